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
order, so a ping answer proves the server has read the cancel; once it has,
and it then sends nothing for the call (no answer, no progress) for a quiet
window, the stop is taken as honoured. A server still reporting progress for
the call is visibly ignoring the stop: the call stays pending until it
answers, or an operator forces it (which kills the server's tree).
"""

from __future__ import annotations

import functools
import itertools
import logging
import os
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import trio

from host.proctree import Child
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
from runtime.rpc import ConnectionClosed, Endpoint

log = logging.getLogger(__name__)

MAX_TOOL_PAGES = 100
STDERR_LINE = 2000
MAX_FRAME = 64 * 1024 * 1024
"""Plugins answer with images and documents: a larger frame limit than quiesce's links."""
EXIT_DRAIN = 0.5
"""After the server's process exits, how long its last output may still be read."""

ProgressSink = Callable[[ProgressParams], None]
STOP_REASON = "the tool call was stopped (quiesce)"


class PluginStartError(Exception):
    """The server could not be started or did not complete the MCP handshake."""


@dataclass(frozen=True)
class CallOutcome:
    """What became of one ``tools/call``: exactly one of result, error, crashed or
    ``confirmed`` (a stop the server took, as far as the wire can tell)."""

    result: CallToolResult | None = None
    error: RemoteError | None = None
    crashed: str | None = None
    stopped: bool = False
    confirmed: bool = False


def _popen(argv: list[str], *, cwd: str, env: dict[str, str], stdin: int, stdout: int,
           stderr: int) -> subprocess.Popen[bytes]:
    return subprocess.Popen(argv, cwd=cwd, env=env, stdin=stdin, stdout=stdout, stderr=stderr,
                            start_new_session=True, close_fds=True)


async def _spawn(config: McpServerConfig, cwd: str, marker: tuple[str, str]
                 ) -> tuple[Child, trio.lowlevel.FdStream]:
    env = {**os.environ, **config.env, marker[0]: marker[1]}
    in_r, in_w = os.pipe()
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    try:
        popen = await trio.to_thread.run_sync(functools.partial(
            _popen, [config.command, *config.args], cwd=cwd, env=env, stdin=in_r,
            stdout=out_w, stderr=err_w))
    except BaseException:
        for fd in (in_w, out_r, err_r):
            os.close(fd)
        raise
    finally:
        for fd in (in_r, out_w, err_w):
            os.close(fd)
    child = Child(popen, trio.lowlevel.FdStream(out_r), trio.lowlevel.FdStream(err_r), marker)
    return child, trio.lowlevel.FdStream(in_w)


class McpConnection:
    """One process of one plugin server, from spawn and handshake to a dead, reaped tree."""

    def __init__(self, config: McpServerConfig, *, cwd: str, marker: tuple[str, str],
                 kill_grace: float, start_timeout: float) -> None:
        self.config = config
        self._cwd = cwd
        self._marker = marker
        self._grace = kill_grace
        self._start_timeout = start_timeout
        self._endpoint: Endpoint | None = None
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

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                    ) -> None:
        """Spawn, shake hands, report started; serve until the server dies or is killed.

        However it ends, the whole tree is killed and the root reaped before ``dead``.
        """
        try:
            child, stdin = await _spawn(self.config, self._cwd, self._marker)
        except OSError as exc:
            self.dead.set()
            raise PluginStartError(f"cannot start {self.config.command!r}: "
                                   f"{exc.strerror or exc}") from exc
        self.pid = child.pid
        endpoint = self._endpoint = Endpoint(
            f"mcp[{self.config.name}:{child.pid}]", child.stdout, stdin,
            incoming=SERVER_TO_CLIENT, outgoing=CLIENT_TO_SERVER, max_frame_size=MAX_FRAME,
            handlers={"ping": self._pong},
            notification_handlers={"notifications/progress": self._on_progress,
                                   "notifications/message": self._on_log})
        failed: PluginStartError | None = None
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
                        task_status.started()
                        await endpoint.closed.wait()
                    nursery.cancel_scope.cancel()
        finally:
            with trio.CancelScope(shield=True):
                report = await child.finish(self._grace)
                await child.aclose()
                await stdin.aclose()
                self.dead.set()
            log.info("plugin server %s (%d) gone: %s; %d processes killed", self.config.name,
                     child.pid, self.why_dead, report.found)
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
        """End the connection: the tree is killed, calls in flight fail (``serve`` returns)."""
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
        request_id = f"quiesce-{next(self._ids)}"
        last_activity = [trio.current_time()]

        def progress(params: ProgressParams) -> None:
            last_activity[0] = trio.current_time()
            on_progress(params)

        answered: list[CallOutcome] = []
        done = trio.Event()

        async def send() -> None:
            try:
                result: CallToolResult = await endpoint.request(
                    "tools/call", CallToolParams(tool, arguments, RequestMeta(request_id)),
                    request_id=request_id)
                answered.append(CallOutcome(result=result, stopped=stop.is_set()))
            except RemoteError as exc:
                answered.append(CallOutcome(error=exc, stopped=stop.is_set()))
            except ConnectionClosed:
                answered.append(CallOutcome(crashed=self.why_dead, stopped=stop.is_set()))
            done.set()

        self._progress[request_id] = progress
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(send)
                await _first(done, stop)
                if not done.is_set():
                    confirmed = await self._cancel(endpoint, request_id, STOP_REASON, done,
                                                   last_activity, quiet, nursery)
                    if confirmed:
                        nursery.cancel_scope.cancel()  # a late answer is dropped
                        return CallOutcome(stopped=True, confirmed=True)
            return answered[0]
        finally:
            del self._progress[request_id]

    @staticmethod
    async def _cancel(endpoint: Endpoint, request_id: str, reason: str, done: trio.Event,
                      last_activity: list[float], quiet: float, nursery: trio.Nursery) -> bool:
        """Send the cancel; True once it is confirmed (ping answered, then quiet)."""
        endpoint.notify("notifications/cancelled", CancelledParams(request_id, reason))
        last_activity[0] = trio.current_time()
        read = trio.Event()

        async def ping() -> None:
            try:
                await endpoint.request("ping", McpEmpty())
            except RemoteError:
                pass  # an error answer still proves the cancel before it was read
            except ConnectionClosed:
                return  # the call's own crash settles it
            read.set()

        nursery.start_soon(ping)
        await _first(done, read)
        while not done.is_set():
            deadline = last_activity[0] + quiet
            if trio.current_time() >= deadline:
                return True
            with trio.move_on_at(deadline):
                await done.wait()
        return False


async def _first(*events: trio.Event) -> None:
    """Until any of ``events`` is set."""
    async with trio.open_nursery() as nursery:
        for event in events:
            async def wait(e: trio.Event = event) -> None:
                await e.wait()
                nursery.cancel_scope.cancel()
            nursery.start_soon(wait)
