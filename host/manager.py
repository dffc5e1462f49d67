"""The host's call manager: the life of every tool call, and what a stop does to it.

``execute`` takes a call through tombstone check, registration, argument
decoding, permission, admission and the body, and always returns exactly one
result. ``abort`` never waits: it marks the call stopped and cancels what the
call's phase allows to be abandoned (see ``Call.request_stop``); what happens
to a running body is the tool class's policy:

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

import itertools
import logging
import os
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import Any, Protocol

import msgspec
import trio

from host.admission import Admission, AdmissionLimits, Overloaded
from host.calls import Call, CallTable
from host.permissions import PermissionPort, Verdict, ask, evaluate
from host.plugins import PluginSettings, SessionPlugins, load_servers
from host.tombstones import TombstoneRegistry
from host.tools import TOOLS, ToolSpec
from host.tools.context import HostToolConfig, ToolContext
from host.workspace import Workspace
from protocol.errors import ErrorCode, RpcError
from protocol.mcp import PluginConfigError
from protocol.messages.client import PermissionMode
from protocol.messages.common import McpServerConfig
from protocol.messages.host import (
    AbortCause,
    PluginsListResult,
    ToolsAbortParams,
    ToolsAbortResult,
    ToolsExecuteParams,
    ToolsOutputParams,
    ToolsStartedParams,
)
from protocol.toolclass import ToolClass
from protocol.tools import (
    TextContent,
    ToolResult,
    aborted_result,
    error_result,
)
from runtime.shared.proctree import ENV_MARKER

log = logging.getLogger(__name__)


class RuntimePort(PermissionPort, Protocol):
    """What the manager needs from the runtime link."""

    def tool_output(self, params: ToolsOutputParams) -> None: ...

    def tool_started(self, params: ToolsStartedParams) -> None: ...


@dataclass(frozen=True)
class HostConfig:
    tools: HostToolConfig = field(default_factory=HostToolConfig)
    permission_timeout: float = 120.0
    stop_timeout: float = 5.0
    """When every call is stopped (EOF, shutdown, signal): seconds beyond the kill grace
    to wait for them before forcing what is left, so the host can exit."""
    tombstone_ttl: float = 60.0
    tombstone_capacity: int = 10_000
    admission: AdmissionLimits = field(default_factory=AdmissionLimits)
    plugins: PluginSettings = field(default_factory=PluginSettings)


@dataclass
class HostSession:
    session_id: str
    workspace: Workspace
    permission_mode: PermissionMode
    plugins: SessionPlugins
    allowed: set[str] = field(default_factory=set)
    denied: set[str] = field(default_factory=set)


class CallManager:
    def __init__(self, config: HostConfig, runtime: RuntimePort, *,
                 tools: dict[str, ToolSpec] | None = None) -> None:
        self.config = config
        self._runtime = runtime
        self._tools = TOOLS if tools is None else tools
        self.sessions: dict[str, HostSession] = {}
        self.calls = CallTable()
        self.tombstones = TombstoneRegistry(ttl=config.tombstone_ttl,
                                            capacity=config.tombstone_capacity)
        self.admission = Admission(config.admission)
        self._permission_ids = itertools.count(1)
        self._background: trio.Nursery | None = None
        self._shielded_bodies = 0  # mutating bodies running (in the background nursery)
        self._body_ended = trio.lowlevel.ParkingLot()
        # The host pid: a runtime that outlives a crashed host can still find its trees.
        self.marker_value = str(os.getpid())

    def open_session(self, session_id: str, workspace: str, mode: PermissionMode,
                     mcp_servers: tuple[McpServerConfig, ...] = ()) -> None:
        if "\x00" in workspace or not os.path.isabs(workspace) or not os.path.isdir(workspace):
            raise RpcError(ErrorCode.INVALID_PARAMS,
                           "workspace must be an absolute path to a directory",
                           {"workspace": workspace})
        try:
            servers = load_servers(workspace, mcp_servers)
        except PluginConfigError as exc:
            raise RpcError(ErrorCode.INVALID_PARAMS, f"plugin servers: {exc}") from exc
        old = self.sessions.get(session_id)
        if old is not None and old.plugins.configs == servers:
            plugins = old.plugins  # re-opened as it was: its servers keep running
        else:
            if old is not None and self._background is not None:
                self._background.start_soon(old.plugins.close, "its session was re-opened")
            plugins = SessionPlugins(
                session_id, workspace, servers, kill_grace=self.config.tools.kill_grace,
                settings=self.config.plugins, nursery=self._nursery,
                marker=lambda name: (ENV_MARKER,
                                     f"{self.marker_value}:{session_id}:plugin-{name}"))
        self.sessions[session_id] = HostSession(session_id, Workspace(workspace), mode, plugins)

    def _nursery(self) -> trio.Nursery:
        assert self._background is not None, "attach() the manager to a nursery first"
        return self._background

    async def list_plugins(self, session_id: str) -> PluginsListResult:
        session = self.sessions.get(session_id)
        if session is None:
            raise RpcError(ErrorCode.NOT_FOUND, f"unknown session {session_id!r}")
        return await session.plugins.list_all()

    async def close_session(self, session_id: str, *,
                            task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                            ) -> None:
        """Forget a session (the runtime settled its turns) and kill its plugin servers;
        ``task_status`` is started once it is forgotten, before the kill is awaited."""
        session = self.sessions.pop(session_id, None)
        task_status.started()
        if session is not None:
            with trio.CancelScope(shield=True):
                await session.plugins.close("its session was closed")

    async def close_plugins(self, why: str) -> None:
        """Kill every plugin server's tree (the host is leaving)."""
        with trio.CancelScope(shield=True):
            async with trio.open_nursery() as nursery:
                for session in self.sessions.values():
                    nursery.start_soon(session.plugins.close, why)

    # -- execute --------------------------------------------------------------------

    async def execute(self, params: ToolsExecuteParams, *,
                      task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                      ) -> ToolResult:
        """Run one call; ``task_status`` is started once it is registered (a ``tools.abort``
        read after it finds it), before anything is awaited."""
        if self.tombstones.take((params.session_id, params.call_id, params.tool)):
            self.calls.remember_settled(params.session_id, params.call_id, params.tool)
            log.info("call %s/%s (%s) met its tombstone", params.session_id, params.call_id,
                     params.tool)
            return aborted_result(before_dispatch=True, details={"tombstone": True})
        session = self.sessions.get(params.session_id)
        if session is None:
            return error_result(ErrorCode.NOT_FOUND, f"unknown session {params.session_id!r}",
                                body_invoked=False)
        spec = self._tools.get(params.tool) or session.plugins.spec(params.tool)
        if spec is None:
            return error_result(ErrorCode.NOT_FOUND, f"unknown tool {params.tool!r}",
                                body_invoked=False)
        call = Call(params.session_id, params.call_id, params.tool, spec.tool_class)
        if not self.calls.register(call):  # registered before anything is evaluated
            return error_result(ErrorCode.INVALID_PARAMS,
                                f"call id {params.call_id!r} is already in flight",
                                body_invoked=False)
        task_status.started()
        try:
            return await self._run(call, spec, session, params.args)
        finally:
            self.calls.settle(call)

    async def _run(self, call: Call, spec: ToolSpec, session: HostSession,
                   raw_args: dict[str, Any]) -> ToolResult:
        try:
            args = msgspec.convert(raw_args, spec.args_type)
        except msgspec.ValidationError as exc:
            return error_result(ErrorCode.INVALID_PARAMS, f"invalid arguments: {exc}",
                                body_invoked=False)
        async with AsyncExitStack() as slot:
            with call.pre_body:
                verdict = evaluate(session.permission_mode, call.tool, call.tool_class,
                                   session.allowed, session.denied)
                if verdict is Verdict.DENY:
                    return error_result(ErrorCode.TOOL_DENIED,
                                        f"{call.tool} was denied for this session",
                                        body_invoked=False)
                if verdict is Verdict.ASK:
                    outside = await self._outside_workspace(call, session, args)
                    if outside is not None:
                        return outside  # refused without bothering the user
                    call.state = "permission-pending"
                    decision = await ask(self._runtime, call,
                                         f"perm-{next(self._permission_ids)}", raw_args,
                                         self.config.permission_timeout)
                    if decision is None:  # the runtime is gone: as for a stop
                        call.request_stop("disposed")
                        return aborted_result(before_dispatch=True)
                    if decision in ("deny", "deny-session"):
                        if decision == "deny-session":
                            session.denied.add(call.tool)
                        return error_result(ErrorCode.TOOL_DENIED,
                                            f"permission to run {call.tool} was denied",
                                            body_invoked=False)
                    if decision == "allow-session":
                        session.allowed.add(call.tool)
                call.state = "admission"
                try:
                    await slot.enter_async_context(
                        self.admission.slot(call.session_id, call.tool_class))
                except Overloaded as exc:
                    return error_result(ErrorCode.HOST_OVERLOADED, str(exc), body_invoked=False)
            if call.stop.is_set():
                return aborted_result(before_dispatch=True)
            call.state = "running"
            call.body_invoked = True  # immediately before the body
            self._runtime.tool_started(ToolsStartedParams(call.session_id, call.call_id))
            result = await self._invoke(call, spec, session, args)
        return self._classify(call, result)

    async def _outside_workspace(self, call: Call, session: HostSession,
                                 args: Any) -> ToolResult | None:
        """A built-in tool's ``path`` outside the workspace is refused before the prompt;
        the body resolves it again right before its side effect (after the wait)."""
        path = getattr(args, "path", None)
        if call.tool not in self._tools or not isinstance(path, str):
            return None
        # In a thread: resolving may touch a slow filesystem; a stop abandons it.
        refusal = await trio.to_thread.run_sync(session.workspace.outside, path,
                                                abandon_on_cancel=True)
        return None if refusal is None else error_result(refusal.code, refusal.message,
                                                         body_invoked=False)

    async def _invoke(self, call: Call, spec: ToolSpec, session: HostSession,
                      args: Any) -> ToolResult | None:
        ctx = ToolContext(
            workspace=session.workspace,
            config=self.config.tools,
            stop=call.stop,
            emit_output=lambda stream, text: self._emit(call, stream, text),
            env_marker={ENV_MARKER: f"{self.marker_value}:{call.session_id}:{call.call_id}"},
        )
        if call.tool_class in (ToolClass.MUTATING, ToolClass.PLUGIN):
            return await self._awaited(call, spec, args, ctx)
        with call.body:
            return await self._run_body(call, spec, args, ctx)
        return None  # a read-only body abandoned by a stop

    async def _run_body(self, call: Call, spec: ToolSpec, args: Any,
                        ctx: ToolContext) -> ToolResult:
        try:
            return await spec.run(args, ctx)
        except Exception as exc:  # the one mapping of tool-body failures to TOOL_FAILED
            log.exception("tool %s failed", call.tool)
            return error_result(ErrorCode.TOOL_FAILED, f"{call.tool} failed: {exc}",
                                body_invoked=True)

    async def _awaited(self, call: Call, spec: ToolSpec, args: Any,
                       ctx: ToolContext) -> ToolResult:
        """A body that is never abandoned by a stop: only an operator's force stops waiting.

        The body runs in the manager's background nursery, so a forced call's
        result can be published while its body (whose effects are then unknown)
        still runs; a mutating body is shielded: it completes atomically.
        """
        outcome: list[ToolResult] = []
        done = trio.Event()
        shielded = call.tool_class is ToolClass.MUTATING

        async def run() -> None:
            self._shielded_bodies += shielded
            try:
                with trio.CancelScope(shield=shielded):
                    outcome.append(await self._run_body(call, spec, args, ctx))
            finally:
                self._shielded_bodies -= shielded
                self._body_ended.unpark_all()
            done.set()

        assert self._background is not None, "attach() the manager to a nursery first"
        self._background.start_soon(run)
        with call.force_scope:
            await done.wait()
        if done.is_set():
            return outcome[0]
        log.warning("call %s/%s (%s) forced by an operator; its body is abandoned",
                    call.session_id, call.call_id, call.tool)
        details: dict[str, Any] = {
            "forced": True,
            "note": "an operator stopped waiting for this operation; its effects are unknown",
        }
        if call.tool_class is ToolClass.PLUGIN:
            details.update(await self._kill_plugin_of(call))
        return aborted_result(before_dispatch=False, details=details)

    async def _kill_plugin_of(self, call: Call) -> dict[str, Any]:
        """A forced plugin call: its server's whole tree dies (restarted on next use)."""
        session = self.sessions.get(call.session_id)
        routed = session.plugins.route(call.tool) if session is not None else None
        if routed is None:
            return {}
        server, _ = routed
        await server.kill("an operator forced a call")
        return {"pluginServerKilled": server.config.name}

    def _classify(self, call: Call, result: ToolResult | None) -> ToolResult:
        if call.forced and result is not None and result.details.get("forced"):
            return result
        if result is None or (call.stop.is_set() and
                              call.tool_class in (ToolClass.READ_ONLY, ToolClass.LOCAL)):
            # A read-only result is dropped, also one that finished as the stop landed.
            return aborted_result(before_dispatch=False, details={"discarded": True})
        if call.tool_class is ToolClass.PLUGIN and \
                result.code == ErrorCode.ABORTED_BEFORE_DISPATCH.name:
            return result  # the plugin body knows its request never reached the server
        result = msgspec.structs.replace(result, body_invoked=True)
        if not call.stop.is_set() or result.is_error:
            return result  # no stop, or an error more specific than the stop
        # The stop came while the body ran and the body finished anyway (a mutating
        # operation, or a process that exited first): say what it actually did.
        texts = [c.text for c in result.content if isinstance(c, TextContent)]
        return aborted_result(
            before_dispatch=False,
            details={**result.details, "completed": True},
            extra_text="The operation completed before the stop took effect:\n"
                       + "\n".join(texts),
        )

    def _emit(self, call: Call, stream: str, text: str) -> None:
        call.output_seq += 1
        self._runtime.tool_output(ToolsOutputParams(
            call.session_id, call.call_id, call.output_seq, stream, text))  # type: ignore[arg-type]

    # -- abort ----------------------------------------------------------------------

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

    def _force_stuck(self) -> int:
        """Force every stopped call whose body the host would otherwise wait for forever."""
        stuck = [call for call in self.calls if call.body_invoked and not call.forced
                 and call.tool_class in (ToolClass.MUTATING, ToolClass.PLUGIN)]
        for call in stuck:
            call.force()
        return len(stuck)

    def attach(self, nursery: trio.Nursery) -> None:
        """Where bodies that outlive a forced call run."""
        self._background = nursery

    async def stop_all(self, cause: AbortCause, *, within: float | None = None) -> None:
        """Stop every call and wait until none is left (the runtime is gone or leaving);
        past the kill grace plus ``stop_timeout``, force the calls still waiting on a body."""
        for call in self.calls:
            call.request_stop(cause)
        wait_for = within if within is not None else (self.config.tools.kill_grace
                                                      + self.config.stop_timeout)
        async with trio.open_nursery() as nursery:
            # Plugin servers die with the host. Nobody waits for a plugin call any more,
            # so one that has not settled once an honoured stop would have (the quiet
            # window) ends with its server, as a Bash call ends with its tree.
            nursery.start_soon(self._close_plugins_after, self.config.plugins.quiet_window + 1.0)
            with trio.move_on_after(wait_for) as scope:
                await self.calls.idle.wait()
            nursery.cancel_scope.cancel()
        if scope.cancelled_caught:
            # Nobody can wait for these any more (the runtime is gone or leaving): their
            # results say "forced"; a plugin's server is killed, a mutating body abandoned.
            log.warning("%d calls still running %.1f s after stop_all; forcing %d",
                        len(self.calls), wait_for, self._force_stuck())
            with trio.move_on_after(self.config.tools.kill_grace + 1.0):
                await self.calls.idle.wait()
        await self.close_plugins("the host is stopping")

    async def shielded_bodies_after(self, within: float) -> int:
        """How many mutating bodies (which no cancel ends) still run after ``within``
        seconds; 0 at once if none runs."""
        with trio.move_on_after(within):
            while self._shielded_bodies:
                await self._body_ended.park()
        return self._shielded_bodies

    async def _close_plugins_after(self, delay: float) -> None:
        await trio.sleep(delay)
        if any(call.tool_class is ToolClass.PLUGIN for call in self.calls):
            await self.close_plugins("the host is stopping")

