"""The host's sessions: each one's workspace, permission mode, session-wide permission
answers and plugin servers; opening, re-opening and closing them."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field

import trio

from host.plugins import SessionPlugins, load_servers
from host.sandbox import Mode, SessionSandbox, landlock
from host.workspace import Workspace
from protocol.errors import ErrorCode, RpcError
from protocol.hostconfig import HostConfig
from protocol.mcp import PluginConfigError
from protocol.messages.client import PermissionMode
from protocol.messages.common import McpServerConfig
from protocol.messages.host import PluginsListResult
from protocol.sandbox import SandboxPolicy
from protocol.sandboxsettings import SandboxSettings, narrowed
from runtime.proc.proctree import ENV_MARKER


def _check_sandbox(settings: SandboxSettings) -> None:
    """``required = true`` where the kernel has no Landlock: no session opens."""
    version, why = landlock.abi()
    if settings.required and settings.mode != "off" and version == 0:
        raise RpcError(ErrorCode.SANDBOX_UNAVAILABLE,
                       f"the sandbox is required but unavailable: {why}")


@dataclass
class HostSession:
    session_id: str
    workspace: Workspace
    permission_mode: PermissionMode
    plugins: SessionPlugins
    sandbox: SessionSandbox
    allowed: set[str] = field(default_factory=set)
    denied: set[str] = field(default_factory=set)


class HostSessions:
    """The open sessions by id (``by_id``); ``background()`` is the nursery plugin
    servers run in (None until the manager is attached to one)."""

    def __init__(self, config: HostConfig, marker_value: str,
                 background: Callable[[], trio.Nursery | None]) -> None:
        self.config = config
        self.marker_value = marker_value
        self._background = background
        self.by_id: dict[str, HostSession] = {}

    def _nursery(self) -> trio.Nursery:
        nursery = self._background()
        assert nursery is not None, "attach() the manager to a nursery first"
        return nursery

    def get(self, session_id: str) -> HostSession | None:
        return self.by_id.get(session_id)

    def open(self, session_id: str, workspace: str, mode: PermissionMode,
             mcp_servers: tuple[McpServerConfig, ...] = (),
             trusted_digest: str | None = None, sandbox_mode: Mode | None = None
             ) -> SandboxPolicy:
        if "\x00" in workspace or not os.path.isabs(workspace) or not os.path.isdir(workspace):
            raise RpcError(ErrorCode.INVALID_PARAMS,
                           "workspace must be an absolute path to a directory",
                           {"workspace": workspace})
        try:
            settings = narrowed(self.config.sandbox, sandbox_mode)
        except ValueError as exc:
            raise RpcError(ErrorCode.INVALID_PARAMS, str(exc), {"sandbox": sandbox_mode}
                           ) from exc
        _check_sandbox(settings)
        try:
            servers = load_servers(workspace, mcp_servers)
        except PluginConfigError as exc:
            raise RpcError(ErrorCode.INVALID_PARAMS, f"plugin servers: {exc}") from exc
        old = self.by_id.get(session_id)
        ws = Workspace(workspace)
        if (old is not None and old.sandbox.workspace == str(ws.root)
                and old.sandbox.settings == settings):
            sandbox = old.sandbox
        else:
            if old is not None:
                self._close_sandbox(old.sandbox)
            sandbox = SessionSandbox(settings, str(ws.root), session_id)
            if sandbox.proxy is not None:
                self._nursery().start_soon(sandbox.proxy.run)
        if (old is not None and old.plugins.loaded == servers
                and old.sandbox is sandbox):
            plugins = old.plugins  # re-opened as it was: its servers keep running
            plugins.trust(trusted_digest)
        else:
            background = self._background()
            if old is not None and background is not None:
                background.start_soon(old.plugins.close, "its session was re-opened")
            plugins = SessionPlugins(
                session_id, workspace, servers, kill_grace=self.config.tools.kill_grace,
                settings=self.config.plugins, nursery=self._nursery,
                trusted_digest=trusted_digest,
                marker=lambda name: (ENV_MARKER,
                                     f"{self.marker_value}:{session_id}:plugin-{name}"),
                confine=sandbox.confine_plugin)
        # Re-opened (a mode change, a runtime re-registering): the user's session-wide
        # answers stand.
        kept = (old.allowed, old.denied) if old is not None else (set(), set())
        self.by_id[session_id] = HostSession(session_id, ws, mode, plugins, sandbox, *kept)
        return sandbox.policy()

    def _close_sandbox(self, sandbox: SessionSandbox) -> None:
        """Its rulesets closed and temporary directory removed, on a thread (not awaited:
        removing a tree is no part of closing a session)."""
        sandbox.stop_network()
        background = self._background()
        if background is not None:
            background.start_soon(trio.to_thread.run_sync, sandbox.close)
        else:
            sandbox.close()

    async def list_plugins(self, session_id: str) -> PluginsListResult:
        session = self.by_id.get(session_id)
        if session is None:
            raise RpcError(ErrorCode.NOT_FOUND, f"unknown session {session_id!r}")
        return await session.plugins.list_all()

    async def close(self, session_id: str, *,
                    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Forget a session (the runtime settled its turns) and kill its plugin servers;
        ``task_status`` is started once it is forgotten, before the kill is awaited."""
        session = self.by_id.pop(session_id, None)
        task_status.started()
        if session is not None:
            self._close_sandbox(session.sandbox)
            with trio.CancelScope(shield=True):
                await session.plugins.close("its session was closed")

    async def close_plugins(self, why: str) -> None:
        """Kill every plugin server's tree (the host is leaving)."""
        with trio.CancelScope(shield=True):
            async with trio.open_nursery() as nursery:
                for session in self.by_id.values():
                    nursery.start_soon(session.plugins.close, why)
