"""One running MCP server: its process tree, its JSON-RPC link, and one tool call's stop.

The server is spawned in its own session with the host's process marker in its
environment, so ``kill_tree`` (and, after a host crash, the runtime's marker
sweep) finds all of it. Its stdout/stdin carry MCP as newline-delimited
JSON-RPC through the same ``Endpoint`` as the host's runtime link; its stderr
goes to the host's log, a line at a time.

A stop sends ``notifications/cancelled`` and keeps waiting for the answer.
MCP servers (the official SDK included) never answer a request they
cancelled, so waiting alone could never settle a stop a server honoured: the
host also sends a ``ping`` after the cancel. Messages on stdio are read in
order, so a ping answer proves the server has read the cancel. From that
answer on, a server that sends nothing for the call (no answer, no progress)
for a quiet window settles the stop, *unconfirmed*: MCP has no way to say a
tool stopped, and the SDK runs sync tools in worker threads that a cancel
cannot interrupt. So the call's request stays open after it settled, for as
long as the connection lives: a late answer or progress for it is logged as a
warning (the server ignored the cancel) and dropped. A server still reporting
progress inside the window is visibly ignoring the stop: the call stays
pending until it answers, or an operator forces it (which kills the server's
tree).
"""

from __future__ import annotations

import itertools
import logging
import os
from typing import Any

import trio

from host.childenv import child_environment
from host.plugins.request import CallOutcome, PluginRequest, ProgressSink
from host.spawn import Child, Confine, new_cgroup, start_process
from protocol.errors import RemoteError
from protocol.mcp import (
    CLIENT_TO_SERVER,
    MCP_PROTOCOL_VERSION,
    SERVER_TO_CLIENT,
    CallToolParams,
    CallToolResult,
    CancelledParams,
    Implementation,
    ListToolsParams,
    ListToolsResult,
    LoggingMessageParams,
    McpEmpty,
    McpInitializeParams,
    McpInitializeResult,
    McpTool,
    ProgressParams,
    RequestMeta,
)
from protocol.messages.common import McpServerConfig
from runtime.link import ConnectionClosed, Endpoint

log = logging.getLogger(__name__)

MAX_TOOL_PAGES = 100
STDERR_LINE = 2000
MAX_FRAME = 64 * 1024 * 1024
"""Plugins answer with images and documents: a larger frame limit than quiesce's links."""
EXIT_DRAIN = 0.5
"""After the server's process exits, how long its last output may still be read."""

STOP_REASON = "the tool call was stopped (quiesce)"


class PluginStartError(Exception):
    """The server could not be started or did not complete the MCP handshake."""


async def _spawn(config: McpServerConfig, cwd: str, marker: tuple[str, str],
                 confine: Confine | None = None) -> tuple[Child, trio.lowlevel.FdStream]:
    """``PluginStartError`` if it cannot be spawned. Started like a tool root
    (``spawn.start_process``: its own session, a parent-death signal, registered)."""
    env = child_environment({**config.env, marker[0]: marker[1]})  # declared env as given
    in_r, in_w = os.pipe()
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    cgroup = new_cgroup(None)
    try:
        popen = await start_process([config.command, *config.args], cgroup=cgroup, cwd=cwd,
                                    env=env, stdin=in_r, stdout=out_w, stderr=err_w,
                                    confine=confine)
    except BaseException as exc:
        for fd in (in_w, out_r, err_r):
            os.close(fd)
        if cgroup is not None:
            cgroup.remove()
        if isinstance(exc, OSError):
            raise PluginStartError(f"cannot start {config.command!r}: "
                                   f"{exc.strerror or exc}") from exc
        if isinstance(exc, ValueError):  # a NUL byte, an env name with "="
            raise PluginStartError(f"cannot start {config.command!r}: {exc}") from exc
        raise
    finally:
        for fd in (in_r, out_w, err_w):
            os.close(fd)
    child = Child(popen, trio.lowlevel.FdStream(out_r), trio.lowlevel.FdStream(err_r), marker,
                  cgroup)
    return child, trio.lowlevel.FdStream(in_w)


class McpConnection:
    """One process of one plugin server, from spawn and handshake to a dead, reaped tree."""

    def __init__(self, config: McpServerConfig, *, cwd: str, marker: tuple[str, str],
                 kill_grace: float, start_timeout: float, confine: Confine | None = None
                 ) -> None:
        self.config = config
        self._confine = confine
        self._cwd = cwd
        self._marker = marker
        self._grace = kill_grace
        self._start_timeout = start_timeout
        self._endpoint: Endpoint | None = None
        self._nursery: trio.Nursery | None = None
        self._scope = trio.CancelScope()
        self._progress: dict[str | int, ProgressSink] = {}
        self._ids = itertools.count(1)
        self.pid: int | None = None
        self.dead = trio.Event()
        self.why_dead = "the plugin server exited"

    @property
    def alive(self) -> bool:
        return not self.dead.is_set() and self._endpoint is not None \
            and not self._endpoint.closed.is_set()

    @property
    def open_requests(self) -> int:
        """Calls whose request is still listened to (answered or not, settled or not)."""
        return len(self._progress)

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                    ) -> None:
        """Spawn, shake hands, report started; serve until the server dies or is killed.

        However it ends, the whole tree is killed and the root reaped before ``dead``;
        ``kill`` during the start ends it too (``PluginStartError``).
        """
        try:
            await self._serve(task_status)
        finally:
            self.dead.set()

    async def _serve(self, task_status: trio.TaskStatus[None]) -> None:
        child, stdin = await _spawn(self.config, self._cwd, self._marker, self._confine)
        self.pid = child.pid
        endpoint = self._endpoint = Endpoint(
            f"mcp[{self.config.name}:{child.pid}]", child.stdout, stdin,
            incoming=SERVER_TO_CLIENT, outgoing=CLIENT_TO_SERVER, max_frame_size=MAX_FRAME,
            handlers={"ping": self._pong},
            notification_handlers={"notifications/progress": self._on_progress,
                                   "notifications/message": self._on_log})
        failed: PluginStartError | None = None
        started = False
        try:
            with self._scope:
                async with trio.open_nursery() as nursery:
                    await nursery.start(endpoint.run)
                    nursery.start_soon(self._pump_stderr, child)
                    nursery.start_soon(self._watch_exit, child, endpoint)
                    try:
                        await self._handshake(endpoint)
                    except PluginStartError as exc:
                        # Raised after the nursery, not inside it (no exception group).
                        failed, self.why_dead = exc, str(exc)
                    else:
                        self._nursery = nursery  # where calls' requests live
                        started = True
                        task_status.started()
                        await endpoint.closed.wait()
                    nursery.cancel_scope.cancel()
        finally:
            self._nursery = None
            with trio.CancelScope(shield=True):
                report = await child.finish(self._grace)
                await child.aclose()
                await stdin.aclose()
                self.dead.set()
            log.info("plugin server %s (%d) gone: %s; %d processes killed", self.config.name,
                     child.pid, self.why_dead, report.found)
        if failed is None and not started:  # killed while starting
            failed = PluginStartError(f"stopped while starting: {self.why_dead}")
        if failed is not None:
            raise failed

    async def _handshake(self, endpoint: Endpoint) -> None:
        try:
            with trio.fail_after(self._start_timeout):
                info: McpInitializeResult = await endpoint.request(
                    "initialize", McpInitializeParams(
                        MCP_PROTOCOL_VERSION, {}, Implementation("quiesce-host", "0.1.0")))
        except trio.TooSlowError:
            raise PluginStartError(f"no answer to initialize within {self._start_timeout:g} s"
                                   ) from None
        except ConnectionClosed:
            raise PluginStartError("the server exited during the MCP handshake") from None
        except RemoteError as exc:
            raise PluginStartError(f"the server refused initialize: {exc.message}") from None
        endpoint.notify("notifications/initialized", McpEmpty())
        log.info("plugin server %s (%s) ready, MCP %s", self.config.name,
                 info.server_info.name if info.server_info else "?", info.protocol_version)

    async def _watch_exit(self, child: Child, endpoint: Endpoint) -> None:
        await child.wait_exited()
        # Its last answer may still be in the pipe: read it, unless a survivor holds it open.
        with trio.move_on_after(EXIT_DRAIN):
            await endpoint.closed.wait()
        endpoint.stop_reading()

    async def _pump_stderr(self, child: Child) -> None:
        buffer = b""
        while True:
            try:
                data = await child.stderr.receive_some(65536)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                data = b""
            if not data:
                break
            buffer += data
            *lines, buffer = buffer.split(b"\n")
            for line in lines:
                self._log_stderr(line)
            if len(buffer) > STDERR_LINE:
                self._log_stderr(buffer)
                buffer = b""
        if buffer:
            self._log_stderr(buffer)

    def _log_stderr(self, line: bytes) -> None:
        text = line.decode("utf-8", "replace").rstrip()
        if text:
            log.info("plugin %s: %s", self.config.name, text[:STDERR_LINE])

    async def _pong(self, params: McpEmpty) -> McpEmpty:
        return McpEmpty()

    def _on_progress(self, params: ProgressParams) -> None:
        sink = self._progress.get(params.progress_token)
        if sink is not None:
            sink(params)

    def _on_log(self, params: LoggingMessageParams) -> None:
        log.info("plugin %s [%s]: %s", self.config.name, params.level, params.data)

    def kill(self, why: str) -> None:
        """End the connection: the tree is killed, calls in flight fail (``serve`` returns;
        while the server starts, ``serve`` raises ``PluginStartError``)."""
        if not self.dead.is_set():
            self.why_dead = why
        self._scope.cancel()

    async def list_tools(self) -> tuple[McpTool, ...]:
        endpoint = self._require()
        tools: list[McpTool] = []
        cursor: str | None = None
        for _ in range(MAX_TOOL_PAGES):
            page: ListToolsResult = await endpoint.request("tools/list", ListToolsParams(cursor))
            tools.extend(page.tools)
            cursor = page.next_cursor
            if not cursor:
                break
        return tuple(tools)

    def _require(self) -> Endpoint:
        if self._endpoint is None or not self.alive:
            raise ConnectionClosed(self.why_dead)
        return self._endpoint

    async def call(self, tool: str, arguments: dict[str, Any], *, stop: trio.Event,
                   on_progress: ProgressSink, quiet: float) -> CallOutcome:
        """Call a tool; on ``stop``, cancel it and wait as the module docstring says."""
        endpoint = self._require()
        nursery = self._nursery
        if nursery is None:
            raise ConnectionClosed(self.why_dead)
        request = PluginRequest(self.config.name, f"quiesce-{next(self._ids)}", stop, on_progress)
        self._progress[request.request_id] = request.progress
        # In the connection's nursery, not the call's: after an unconfirmed stop the
        # request is still listened to, until it is answered or the connection ends.
        nursery.start_soon(self._send, endpoint, tool, arguments, request)
        try:
            await _first(request.done, stop)
            if not request.done.is_set() and await self._cancel(endpoint, request, quiet):
                return CallOutcome(stopped=True, unconfirmed=True)
            assert request.outcome is not None
            return request.outcome
        finally:
            request.settled = True  # whatever comes for it now is late

    async def _send(self, endpoint: Endpoint, tool: str, arguments: dict[str, Any],
                    request: PluginRequest) -> None:
        outcome: CallOutcome | None = None
        try:
            result: CallToolResult = await endpoint.request(
                "tools/call", CallToolParams(tool, arguments, RequestMeta(request.request_id)),
                request_id=request.request_id)
            outcome = CallOutcome(result=result)
        except RemoteError as exc:
            outcome = CallOutcome(error=exc)
        except ConnectionClosed:
            pass
        finally:  # also when the connection is killed under it (cancelled)
            self._progress.pop(request.request_id, None)
            request.deliver(outcome or CallOutcome(crashed=self.why_dead))

    async def _cancel(self, endpoint: Endpoint, request: PluginRequest, quiet: float) -> bool:
        """Send the cancel and a ping; True once the server answered the ping and then
        sent nothing for the call for ``quiet`` seconds, measured from that answer."""
        endpoint.notify("notifications/cancelled", CancelledParams(request.request_id,
                                                                   STOP_REASON))
        request.cancel_sent = True
        read = trio.Event()

        async def ping() -> None:
            try:
                await endpoint.request("ping", McpEmpty())
            except RemoteError:
                pass  # an error answer still proves the cancel before it was read
            except ConnectionClosed:
                return  # the call's own crash settles it
            read.set()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(ping)
            await _first(request.done, read)
            nursery.cancel_scope.cancel()
        request.last_activity = trio.current_time()  # the ping's answer: the cancel is read
        while not request.done.is_set():
            deadline = request.last_activity + quiet
            if trio.current_time() >= deadline:
                log.info("plugin %s: request %s quiet for %g s after its cancel was read; "
                         "settled unconfirmed", self.config.name, request.request_id, quiet)
                return True
            with trio.move_on_at(deadline):
                await request.done.wait()
        return False


async def _first(*events: trio.Event) -> None:
    """Until any of ``events`` is set."""
    async with trio.open_nursery() as nursery:
        for event in events:
            async def wait(e: trio.Event = event) -> None:
                await e.wait()
                nursery.cancel_scope.cancel()
            nursery.start_soon(wait)
