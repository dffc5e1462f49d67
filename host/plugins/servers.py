"""A session's plugin servers: configuration, start and restart, routing, and calls.

A session's servers are those of its workspace's ``.quiesce/mcp.json``, with
the session's own (from ``session.new``) added or replacing them by name.
Each server is one process per session, started by ``plugins.list`` (the
runtime asks at session open, to learn the tool names the model sees) or by
the first call that needs it; a server that died (crashed, or killed by an
operator's force) is started again by the next call. Plugin tools are named
``mcp__<server>__<tool>``; a call is routed by that prefix, so a host that
replaced a crashed one can serve calls without listing first.
"""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import msgspec
import trio

from host.plugins.connection import McpConnection, PluginStartError
from host.plugins.results import to_tool_result
from host.spawn import Confine
from host.tools.context import ToolContext, ToolSpec
from protocol.errors import ErrorCode, RemoteError
from protocol.hostconfig import (
    PluginSettings as PluginSettings,  # the settings, parsed with the host's
)
from protocol.mcp import (
    TOOL_NAME,
    McpTool,
    PluginConfigError,
    ProgressParams,
    check_servers,
    content_digest,
    merge_servers,
    parse_servers_file,
    plugin_tool_name,
)
from protocol.messages.common import McpServerConfig, PluginServerStatus
from protocol.messages.host import PluginsListResult, PluginTool
from protocol.toolclass import ToolClass
from protocol.tools import ToolResult, aborted_result, error_result
from runtime.link import ConnectionClosed

log = logging.getLogger(__name__)

WORKSPACE_FILE = os.path.join(".quiesce", "mcp.json")
MAX_FILE = 1024 * 1024


@dataclass(frozen=True)
class LoadedServers:
    """A session's servers: the workspace file's merged with the session's, the names of
    those that came from the file (``from_workspace``; a session's server of the same name
    replaces it) and the digest of the file's content (None without a file)."""

    servers: tuple[McpServerConfig, ...] = ()
    from_workspace: frozenset[str] = frozenset()
    digest: str | None = None


def _read_declaring_file(path: str) -> bytes | None:
    """The file's content (None if there is none); ``PluginConfigError`` unless it is a
    regular file of at most ``MAX_FILE`` bytes. A cloned repository may make it a symlink
    to anything: a FIFO or the host's own stdin (``/proc/self/fd/0``) is refused, never
    read (opened non-blocking, checked before any read), so it cannot stop the host."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise PluginConfigError(f"{WORKSPACE_FILE}: {exc.strerror}") from exc
    with open(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise PluginConfigError(f"{WORKSPACE_FILE}: not a regular file")
        try:
            data = f.read(MAX_FILE + 1)
        except OSError as exc:
            raise PluginConfigError(f"{WORKSPACE_FILE}: {exc.strerror}") from exc
    if len(data) > MAX_FILE:
        raise PluginConfigError(f"{WORKSPACE_FILE}: larger than {MAX_FILE} bytes")
    return data


def load_servers(workspace: str, session: tuple[McpServerConfig, ...]) -> LoadedServers:
    """The workspace file's servers merged with the session's; ``PluginConfigError``."""
    check_servers(session, "session mcpServers")
    data = _read_declaring_file(os.path.join(workspace, WORKSPACE_FILE))
    if data is None:
        return LoadedServers(session)
    declared = parse_servers_file(data, WORKSPACE_FILE)
    own = {s.name for s in session}
    return LoadedServers(merge_servers(declared, session),
                         frozenset(s.name for s in declared if s.name not in own),
                         content_digest(data))


class PluginServer:
    """One configured server of one session: its current process, if any."""

    def __init__(self, config: McpServerConfig, *, cwd: str, marker: tuple[str, str],
                 kill_grace: float, settings: PluginSettings,
                 nursery: Callable[[], trio.Nursery], confine: Confine | None = None) -> None:
        self.config = config
        self._confine = confine
        """How its process is confined (``host.sandbox``: the session's plugin ruleset)."""
        self._cwd = cwd
        self._marker = marker
        self._grace = kill_grace
        self.settings = settings
        self._nursery = nursery
        self._lock = trio.Lock()
        self.connection: McpConnection | None = None
        self.tools: tuple[McpTool, ...] | None = None
        self.starts = 0
        self.closed = ""
        """Why the server is closed for good (its session closed, re-opened or the host
        leaving); empty while it may be started."""
        self.untrusted = False
        """Declared by a workspace file whose content the user has not trusted: never
        started, its tools never routed (until ``SessionPlugins.trust``)."""

    async def ensure(self) -> McpConnection:
        """The running process, starting one (again) if there is none."""
        async with self._lock:
            if self.closed:
                raise PluginStartError(f"not started again: {self.closed}")
            if self.untrusted:
                raise PluginStartError("not started: the workspace's declaration is not "
                                       "trusted")
            if self.connection is not None and self.connection.alive:
                return self.connection
            # Recorded before the handshake (up to start_timeout): kill() reaches it.
            connection = self.connection = McpConnection(
                self.config, cwd=self._cwd, marker=self._marker, kill_grace=self._grace,
                start_timeout=self.settings.start_timeout, confine=self._confine)
            self.starts += 1
            await self._nursery().start(connection.serve)
            if self.starts > 1:
                log.info("plugin server %s restarted (start %d)", self.config.name, self.starts)
            return connection

    async def list_tools(self) -> tuple[McpTool, ...]:
        connection = await self.ensure()
        if self.tools is None:
            self.tools = await connection.list_tools()
        return self.tools

    async def kill(self, why: str) -> None:
        """Kill the current process tree (if any, running or starting) and wait until it
        is dead and reaped; a later call starts it again."""
        connection = self.connection
        if connection is None:
            return
        connection.kill(why)
        with trio.CancelScope(shield=True):
            await connection.dead.wait()

    async def close(self, why: str) -> None:
        """Kill it for good: nothing starts it again."""
        self.closed = why
        await self.kill(why)

    async def _ensure_unless_stopped(self, stop: trio.Event
                                     ) -> McpConnection | PluginStartError | None:
        """``ensure``, given up (the start cancelled, its tree killed) if ``stop`` comes
        first: a server that takes its time to start must not hold a stop up."""
        outcome: list[McpConnection | PluginStartError] = []
        async with trio.open_nursery() as nursery:
            async def start() -> None:
                try:
                    outcome.append(await self.ensure())
                except PluginStartError as exc:
                    outcome.append(exc)
                nursery.cancel_scope.cancel()

            async def watch() -> None:
                await stop.wait()
                nursery.cancel_scope.cancel()

            nursery.start_soon(start)
            nursery.start_soon(watch)
        return outcome[0] if outcome else None

    async def call(self, tool: str, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        where = {"plugin": {"server": self.config.name, "tool": tool}}
        connection = await self._ensure_unless_stopped(ctx.stop)
        if isinstance(connection, PluginStartError):
            return error_result(ErrorCode.TOOL_FAILED,
                                f"plugin server {self.config.name} could not start: "
                                f"{connection}", body_invoked=True, details=where)
        if connection is None or ctx.stop.is_set():  # no tools/call was sent
            return aborted_result(before_dispatch=True, details={
                **where, "cancel": "stopped before the call reached the server"})
        if not connection.alive:  # died since: the next call restarts it
            return error_result(ErrorCode.TOOL_FAILED, f"plugin server {self.config.name} "
                                f"ended before the call: {connection.why_dead}",
                                body_invoked=True, details=where)

        def progress(params: ProgressParams) -> None:
            total = f"/{params.total:g}" if params.total is not None else ""
            message = f" {params.message}" if params.message else ""
            ctx.emit_output("progress", f"{params.progress:g}{total}{message}\n")

        outcome = await connection.call(
            tool, args, stop=ctx.stop, on_progress=progress, quiet=self.settings.quiet_window)
        return to_tool_result(outcome, self.config.name, tool, self.settings.quiet_window)


class SessionPlugins:
    """The plugin servers of one session, and the ``ToolSpec`` of each plugin tool."""

    def __init__(self, session_id: str, workspace: str, loaded: LoadedServers,
                 *, marker: Callable[[str], tuple[str, str]], kill_grace: float,
                 settings: PluginSettings, nursery: Callable[[], trio.Nursery],
                 trusted_digest: str | None = None, confine: Confine | None = None) -> None:
        self.loaded = loaded
        self.configs = loaded.servers
        self.workspace = workspace
        self.servers = {c.name: PluginServer(c, cwd=workspace, marker=marker(c.name),
                                             kill_grace=kill_grace, settings=settings,
                                             nursery=nursery, confine=confine)
                        for c in self.configs}
        for name in loaded.from_workspace:
            self.servers[name].untrusted = True
        self.trust(trusted_digest)
        # Longest names first: a server named "a__b" wins over "a" for "mcp__a__b__t".
        self._prefixes = sorted(((plugin_tool_name(name, ""), server)
                                 for name, server in self.servers.items()),
                                key=lambda item: -len(item[0]))

    def trust(self, digest: str | None) -> None:
        """The user trusted the workspace file's content ``digest``: if it is the content
        these servers were read from, they may start."""
        if digest is None or digest != self.loaded.digest:
            return
        for name in self.loaded.from_workspace:
            self.servers[name].untrusted = False

    def route(self, name: str) -> tuple[PluginServer, str] | None:
        for prefix, server in self._prefixes:
            if server.untrusted:
                continue
            if name.startswith(prefix) and len(name) > len(prefix):
                return server, name[len(prefix):]
        return None

    def spec(self, name: str) -> ToolSpec | None:
        routed = self.route(name)
        if routed is None:
            return None
        server, tool = routed

        async def body(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
            return await server.call(tool, args, ctx)

        return ToolSpec(name, dict[str, Any], ToolClass.PLUGIN, body)

    async def list_all(self) -> PluginsListResult:
        """Start every server not running, in parallel; list each one's tools."""
        listed: dict[str, tuple[McpTool, ...] | str] = {}

        async def list_one(server: PluginServer) -> None:
            try:
                listed[server.config.name] = await server.list_tools()
            except PluginStartError as exc:
                listed[server.config.name] = str(exc)
            except ConnectionClosed as exc:
                listed[server.config.name] = f"the server exited while listing: {exc}"
            except RemoteError as exc:
                listed[server.config.name] = f"tools/list refused: {exc.message}"

        async with trio.open_nursery() as nursery:
            for server in self.servers.values():
                if not server.untrusted:
                    nursery.start_soon(list_one, server)
        tools: list[PluginTool] = []
        statuses: list[PluginServerStatus] = []
        for name, server in self.servers.items():
            declared = name in self.loaded.from_workspace
            status = PluginServerStatus(
                name, state="untrusted", command=server.config.command,
                args=server.config.args, cwd=self.workspace,
                source="workspace" if declared else "session",
                env=dict(server.config.env) if declared else {})
            if server.untrusted:
                statuses.append(status)
                continue
            found = listed[name]
            if isinstance(found, str):
                log.warning("plugin server %s unavailable: %s", name, found)
                statuses.append(msgspec.structs.replace(status, state="failed", error=found))
                continue
            usable = [t for t in found if TOOL_NAME.fullmatch(t.name)]
            for skipped in (t.name for t in found if not TOOL_NAME.fullmatch(t.name)):
                log.warning("plugin %s: tool name %r is not [A-Za-z0-9_-]+; skipped", name,
                            skipped)
            tools.extend(PluginTool(plugin_tool_name(name, t.name), name,
                                    t.description or f"{t.name} (plugin server {name})",
                                    t.input_schema or {"type": "object"}) for t in usable)
            statuses.append(msgspec.structs.replace(
                status, state="running", tools=len(usable),
                tool_names=tuple(t.name for t in usable)))
        return PluginsListResult(tuple(tools), tuple(statuses), self.loaded.digest)

    async def close(self, why: str) -> None:
        async with trio.open_nursery() as nursery:
            for server in self.servers.values():
                nursery.start_soon(server.close, why)
