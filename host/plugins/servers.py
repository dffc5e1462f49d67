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
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import trio

from host.plugins.connection import McpConnection, PluginStartError
from host.plugins.results import to_tool_result
from host.spawn import Confine
from host.tools.context import ToolContext, ToolSpec
from protocol.errors import ErrorCode, RemoteError
from protocol.mcp import (
    TOOL_NAME,
    McpTool,
    PluginConfigError,
    ProgressParams,
    check_servers,
    merge_servers,
    parse_servers_file,
    plugin_tool_name,
)
from protocol.messages.common import McpServerConfig, PluginServerStatus
from protocol.messages.host import PluginsListResult, PluginTool
from protocol.toolclass import ToolClass
from protocol.tools import ToolResult, aborted_result, error_result
from runtime.shared.rpc import ConnectionClosed

log = logging.getLogger(__name__)

WORKSPACE_FILE = os.path.join(".quiesce", "mcp.json")
MAX_FILE = 1024 * 1024


def _env_seconds(name: str, default: float) -> float:
    """A default an operator may change through the environment ``quiesce serve`` runs in."""
    try:
        return float(os.environ.get(name, default))
    except ValueError:
        log.warning("ignoring %s=%r: not a number of seconds", name, os.environ[name])
        return default


@dataclass(frozen=True)
class PluginSettings:
    start_timeout: float = _env_seconds("QUIESCE_PLUGIN_START_TIMEOUT", 30.0)
    """Seconds a server has to start and answer MCP ``initialize``."""
    quiet_window: float = _env_seconds("QUIESCE_PLUGIN_QUIET_WINDOW", 1.0)
    """After a stop, how long a server must stay silent about the call, from its answer to
    the ping that shows it read the cancel, before the stop settles (``ABORTED``, marked
    unconfirmed; see ``host.plugins.connection``)."""


def load_servers(workspace: str, session: tuple[McpServerConfig, ...]
                 ) -> tuple[McpServerConfig, ...]:
    """The workspace file's servers merged with the session's; ``PluginConfigError``."""
    check_servers(session, "session mcpServers")
    path = os.path.join(workspace, WORKSPACE_FILE)
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_FILE + 1)
    except FileNotFoundError:
        return session
    except OSError as exc:
        raise PluginConfigError(f"{WORKSPACE_FILE}: {exc.strerror}") from exc
    if len(data) > MAX_FILE:
        raise PluginConfigError(f"{WORKSPACE_FILE}: larger than {MAX_FILE} bytes")
    return merge_servers(parse_servers_file(data, WORKSPACE_FILE), session)


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

    async def ensure(self) -> McpConnection:
        """The running process, starting one (again) if there is none."""
        async with self._lock:
            if self.closed:
                raise PluginStartError(f"not started again: {self.closed}")
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

    def __init__(self, session_id: str, workspace: str, configs: tuple[McpServerConfig, ...],
                 *, marker: Callable[[str], tuple[str, str]], kill_grace: float,
                 settings: PluginSettings, nursery: Callable[[], trio.Nursery],
                 confine: Confine | None = None) -> None:
        self.configs = configs
        self.servers = {c.name: PluginServer(c, cwd=workspace, marker=marker(c.name),
                                             kill_grace=kill_grace, settings=settings,
                                             nursery=nursery, confine=confine)
                        for c in configs}
        # Longest names first: a server named "a__b" wins over "a" for "mcp__a__b__t".
        self._prefixes = sorted(((plugin_tool_name(name, ""), server)
                                 for name, server in self.servers.items()),
                                key=lambda item: -len(item[0]))

    def route(self, name: str) -> tuple[PluginServer, str] | None:
        for prefix, server in self._prefixes:
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
                nursery.start_soon(list_one, server)
        tools: list[PluginTool] = []
        statuses: list[PluginServerStatus] = []
        for name in self.servers:
            found = listed[name]
            if isinstance(found, str):
                log.warning("plugin server %s unavailable: %s", name, found)
                statuses.append(PluginServerStatus(name, error=found))
                continue
            usable = [t for t in found if TOOL_NAME.fullmatch(t.name)]
            for skipped in (t.name for t in found if not TOOL_NAME.fullmatch(t.name)):
                log.warning("plugin %s: tool name %r is not [A-Za-z0-9_-]+; skipped", name,
                            skipped)
            tools.extend(PluginTool(plugin_tool_name(name, t.name), name,
                                    t.description or f"{t.name} (plugin server {name})",
                                    t.input_schema or {"type": "object"}) for t in usable)
            statuses.append(PluginServerStatus(name, tools=len(usable)))
        return PluginsListResult(tuple(tools), tuple(statuses))

    async def close(self, why: str) -> None:
        async with trio.open_nursery() as nursery:
            for server in self.servers.values():
                nursery.start_soon(server.close, why)
