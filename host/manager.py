"""The host's call manager: what the host link's handlers call, and what a stop does
to a call.

It holds the host's collaborators, one concept each: ``host.sessions`` (the open
sessions and their plugin servers), ``host.execution`` (one call's life:
``execute`` takes a call through tombstone check, registration, argument
decoding, permission, admission and the body, and always returns exactly one
result), ``host.calls`` (the calls in flight and their state table) and
``host.shutdown`` (stopping everything when the host leaves).

``abort`` never waits: it marks the call stopped and cancels what the call's
phase allows to be abandoned (see ``Call.request_stop``); what happens to a
running body is the tool class's policy:

- read-only: the body's cancel scope is cancelled; its result is dropped.
- process: the body watches ``stop``, kills its process tree, returns the output
  collected before termination.
- mutating: the body is shielded and completes atomically; the call ends
  ``ABORTED`` with what the operation did in ``details``.
- plugin: the body watches ``stop`` and forwards it to the plugin (MCP
  ``notifications/cancelled``), and awaits its answer (or, once the server read
  the cancel, a quiet window: ``ABORTED`` marked unconfirmed); an operator's force
  kills the plugin server's process tree (``host.plugins``). A stop before the
  request reached the server is the body's own ``ABORTED_BEFORE_DISPATCH``.

"Body invoked" is recorded immediately before the body is called; it alone
separates ``ABORTED`` from ``ABORTED_BEFORE_DISPATCH``.
"""

from __future__ import annotations

import os

import trio

from host.admission import Admission
from host.calls import CallTable
from host.execution import Executor, RuntimePort
from host.hooks import HookRunner
from host.sandbox import Mode
from host.sessions import HostSession, HostSessions
from host.shutdown import stop_all
from host.tombstones import TombstoneRegistry
from host.tools import TOOLS, ToolSpec
from protocol.causes import Cause
from protocol.hostconfig import HostConfig
from protocol.messages.client import PermissionMode
from protocol.messages.common import McpServerConfig
from protocol.messages.host import (
    PluginsListResult,
    ToolsAbortParams,
    ToolsAbortResult,
    ToolsExecuteParams,
)
from protocol.sandbox import SandboxPolicy
from protocol.toolclass import ToolClass
from protocol.tools import ToolResult

__all__ = ["CallManager", "HostConfig", "HostSession", "RuntimePort"]


class CallManager:
    def __init__(self, config: HostConfig, runtime: RuntimePort, *,
                 tools: dict[str, ToolSpec] | None = None) -> None:
        self.config = config
        self._background: trio.Nursery | None = None
        # The host pid: a runtime that outlives a crashed host can still find its trees.
        self.marker_value = str(os.getpid())
        self.host_sessions = HostSessions(config, self.marker_value, lambda: self._background)
        self.calls = CallTable()
        self.tombstones = TombstoneRegistry(ttl=config.tombstone_ttl,
                                            capacity=config.tombstone_capacity)
        self.admission = Admission(config.admission)
        self.executor = Executor(config, runtime, TOOLS if tools is None else tools,
                                 self.host_sessions, self.calls, self.tombstones,
                                 self.admission, lambda: self._background)
        self.hooks = HookRunner(config, self.host_sessions)

    @property
    def sessions(self) -> dict[str, HostSession]:
        return self.host_sessions.by_id

    def attach(self, nursery: trio.Nursery) -> None:
        """Where bodies that outlive a forced call, and plugin servers, run."""
        self._background = nursery

    # -- sessions ---------------------------------------------------------------------

    def open_session(self, session_id: str, workspace: str, mode: PermissionMode,
                     mcp_servers: tuple[McpServerConfig, ...] = (),
                     trusted_digest: str | None = None, sandbox: Mode | None = None
                     ) -> SandboxPolicy:
        return self.host_sessions.open(session_id, workspace, mode, mcp_servers, trusted_digest,
                                sandbox)

    async def list_plugins(self, session_id: str) -> PluginsListResult:
        return await self.host_sessions.list_plugins(session_id)

    async def close_session(self, session_id: str, *,
                            task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                            ) -> None:
        await self.host_sessions.close(session_id, task_status=task_status)

    async def close_plugins(self, why: str) -> None:
        await self.host_sessions.close_plugins(why)

    # -- calls ------------------------------------------------------------------------

    async def execute(self, params: ToolsExecuteParams, *,
                      task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                      ) -> ToolResult:
        """Run one call (``host.execution``); ``task_status`` is started once it is
        registered (a ``tools.abort`` read after it finds it), before anything is awaited."""
        return await self.executor.execute(params, task_status=task_status)

    # -- abort ------------------------------------------------------------------------

    def abort(self, params: ToolsAbortParams) -> ToolsAbortResult:
        """Never waits. A call not (yet) known leaves a tombstone."""
        call = self.calls.find(params.session_id, params.call_id, params.tool)
        if call is None:
            if self.calls.was_settled(params.session_id, params.call_id, params.tool):
                return ToolsAbortResult(found=True, state="settled")
            self.tombstones.add((params.session_id, params.call_id, params.tool))
            return ToolsAbortResult(found=False, state="tombstoned")
        call.request_stop(params.cause)
        assert call.stopped_in is not None
        return ToolsAbortResult(found=True, state=call.stopped_in,
                                body_invoked=call.body_invoked)

    def force(self, session_id: str, call_id: str, tool: str | None = None
              ) -> tuple[bool, str]:
        """Stop waiting for a stopped mutating or plugin call whose body is stuck."""
        call = self.calls.find_any(session_id, call_id)
        if call is None or (tool is not None and call.tool != tool):
            return False, "no such call in flight"
        if call.tool_class not in (ToolClass.MUTATING, ToolClass.PLUGIN):
            return False, (f"{call.tool} is {call.tool_class.value}: a stop already ends it "
                           "without waiting")
        if not call.stop.is_set():
            return False, "the call has not been stopped: stop it first"
        if not call.body_invoked:
            return False, "its body has not started: the stop ends it"
        call.force()
        return True, f"{call.tool} {call_id} forced"

    # -- shutdown ---------------------------------------------------------------------

    async def stop_all(self, cause: Cause, *, within: float | None = None) -> None:
        """``host.shutdown.stop_all``: stop every call and hook, wait, force what is left."""
        self.hooks.stop_all()
        await stop_all(self.calls, self.host_sessions, self.config, cause, within=within)

    async def shielded_bodies_after(self, within: float) -> int:
        return await self.executor.shielded_bodies_after(within)
