"""One call's life on the host: tombstone check, registration, argument decoding,
permission, admission, the body, and the one result it always ends with.

What a stop does to a running body is the tool class's policy (see ``host.manager``);
"body invoked" is recorded immediately before the body is called, and alone separates
``ABORTED`` from ``ABORTED_BEFORE_DISPATCH``.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable
from typing import Any, Protocol

import msgspec
import trio

from host.admission import Admission, Overloaded
from host.calls import Call, CallEvent, CallTable
from host.permissions import PermissionPort, Verdict, ask, evaluate
from host.sandbox.asking import must_ask
from host.sessions import HostSession, HostSessions
from host.tombstones import TombstoneRegistry
from host.tools import ToolSpec
from host.tools.context import ToolContext
from protocol.causes import DisposedCause
from protocol.errors import ErrorCode
from protocol.hostconfig import HostConfig
from protocol.messages.host import ToolsExecuteParams, ToolsOutputParams, ToolsStartedParams
from protocol.toolclass import ToolClass
from protocol.tools import TextContent, ToolResult, aborted_result, error_result
from runtime.proc.cgroups import call_cgroup_name
from runtime.proc.proctree import ENV_MARKER

log = logging.getLogger(__name__)


class RuntimePort(PermissionPort, Protocol):
    """What the host needs from the runtime link."""

    def tool_output(self, params: ToolsOutputParams) -> None: ...

    def tool_started(self, params: ToolsStartedParams) -> None: ...


class Executor:
    """Runs calls to their result. Bodies that outlive a forced call run in
    ``background()``; ``shielded_bodies`` counts the mutating bodies running there."""

    def __init__(self, config: HostConfig, runtime: RuntimePort, tools: dict[str, ToolSpec],
                 sessions: HostSessions, calls: CallTable, tombstones: TombstoneRegistry,
                 admission: Admission, background: Callable[[], trio.Nursery | None]) -> None:
        self._config = config
        self._runtime = runtime
        self._tools = tools
        self._sessions = sessions
        self.calls = calls
        self.tombstones = tombstones
        self.admission = admission
        self._background_of = background
        self._permission_ids = itertools.count(1)
        self.shielded_bodies = 0  # mutating bodies running (in the background nursery)
        self._body_ended = trio.lowlevel.ParkingLot()

    @property
    def marker_value(self) -> str:
        return self._sessions.marker_value

    async def execute(self, params: ToolsExecuteParams, *,
                      task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                      ) -> ToolResult:
        """Run one call; ``task_status`` is started once it is registered (a ``tools.abort``
        read after it finds it), before anything is awaited."""
        tombstoned = self._tombstoned(params)
        if tombstoned is not None:
            return tombstoned
        session = self._sessions.get(params.session_id)
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
            return await self._run(call, spec, session, params.args, force_ask=params.ask)
        finally:
            self.calls.settle(call)

    def execute_now(self, params: ToolsExecuteParams) -> ToolResult | None:
        """The call's result, if it can be had at once with nothing awaited, else ``None``
        (and nothing done): ``execute`` then runs it.

        At once means: a built-in tool with an inline body (``ToolSpec.inline``) that answers
        these arguments (a small local file for Read), allowed without asking, with an
        admission slot free and nobody waiting for one. Then no task, cancel scope or call
        record is made: no other task runs before the result, so nothing could observe the
        call or stop it (a ``tools.abort`` read after finds it settled). Its
        ``tools.started`` is sent all the same, just before the result. A call id is
        refused only while its call is in flight, so a second request with the same id,
        even pipelined right behind, runs anew (as after any call settled)."""
        tombstoned = self._tombstoned(params)
        if tombstoned is not None:
            return tombstoned
        spec = self._tools.get(params.tool)
        session = self._sessions.get(params.session_id)
        if (spec is None or spec.inline is None or session is None or params.ask
                or self.calls.find_any(params.session_id, params.call_id) is not None
                or evaluate(session.permission_mode, spec.name, spec.tool_class,
                            session.allowed, session.denied) is not Verdict.ALLOW
                or not self.admission.free_now(params.session_id, spec.tool_class,
                                               spec.search)):
            return None
        try:
            args = msgspec.convert(params.args, spec.args_type)
        except msgspec.ValidationError:
            return None  # ``execute`` says what is wrong
        ctx = ToolContext(workspace=session.workspace, config=self._config.tools,
                          stop=trio.Event(), emit_output=_no_output)
        try:
            result = spec.run_inline(args, ctx)
        except Exception as exc:  # noqa: BLE001 - logged and mapped by _failed
            result = _failed(spec.name, exc)
        if result is None:
            return None
        self._runtime.tool_started(ToolsStartedParams(params.session_id, params.call_id))
        self.calls.remember_settled(params.session_id, params.call_id, params.tool)
        return msgspec.structs.replace(result, body_invoked=True)

    def _tombstoned(self, params: ToolsExecuteParams) -> ToolResult | None:
        if not self.tombstones.take((params.session_id, params.call_id, params.tool)):
            return None
        self.calls.remember_settled(params.session_id, params.call_id, params.tool)
        log.info("call %s/%s (%s) met its tombstone", params.session_id, params.call_id,
                 params.tool)
        return aborted_result(before_dispatch=True, details={"tombstone": True})

    async def _run(self, call: Call, spec: ToolSpec, session: HostSession,
                   raw_args: dict[str, Any], *, force_ask: bool = False) -> ToolResult:
        try:
            args = msgspec.convert(raw_args, spec.args_type)
        except msgspec.ValidationError as exc:
            return error_result(ErrorCode.INVALID_PARAMS, f"invalid arguments: {exc}",
                                body_invoked=False)
        admitted = False
        try:
            with call.pre_body:
                verdict = evaluate(session.permission_mode, call.tool, call.tool_class,
                                   session.allowed, session.denied)
                if force_ask and verdict is Verdict.ALLOW:  # a hook asked: prompt whatever the mode
                    verdict = Verdict.ASK
                if verdict is Verdict.ALLOW and must_ask(session.sandbox, call.tool, args,
                                                         session.allowed):
                    verdict = Verdict.ASK
                if verdict is Verdict.DENY:
                    return error_result(ErrorCode.TOOL_DENIED,
                                        f"{call.tool} was denied for this session",
                                        body_invoked=False)
                if verdict is Verdict.ASK:
                    outside = await self._outside_workspace(call, session, args)
                    if outside is not None:
                        return outside  # refused without bothering the user
                    call.fire(CallEvent.ASK_PERMISSION)
                    decision = await ask(self._runtime, call,
                                         f"perm-{next(self._permission_ids)}", raw_args,
                                         self._config.permission_timeout)
                    if decision is None:  # the runtime is gone: as for a stop
                        call.request_stop(DisposedCause())
                        return aborted_result(before_dispatch=True)
                    if decision in ("deny", "deny-session"):
                        if decision == "deny-session":
                            session.denied.add(call.tool)
                        return error_result(ErrorCode.TOOL_DENIED,
                                            f"permission to run {call.tool} was denied",
                                            body_invoked=False)
                    if decision == "allow-session":
                        session.allowed.add(call.tool)
                call.fire(CallEvent.ADMIT)
                try:
                    await self.admission.acquire(call.session_id, call.tool_class, spec.search)
                except Overloaded as exc:
                    return error_result(ErrorCode.HOST_OVERLOADED, str(exc), body_invoked=False)
                admitted = True
            if call.stop.is_set():
                return aborted_result(before_dispatch=True)
            call.fire(CallEvent.START_BODY)
            call.body_invoked = True  # immediately before the body
            self._runtime.tool_started(ToolsStartedParams(call.session_id, call.call_id))
            result = await self._invoke(call, spec, session, args)
        finally:
            if admitted:  # the slot is held from admission to the body's end
                self.admission.release(call.session_id, call.tool_class, spec.search)
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
            config=self._config.tools,
            stop=call.stop,
            on_stop=call.stop_hooks.append,
            emit_output=lambda stream, text: self._emit(call, stream, text),
            env_marker={ENV_MARKER: f"{self.marker_value}:{call.session_id}:{call.call_id}"},
            cgroup_name_of=lambda: call_cgroup_name(self.marker_value, call.session_id,
                                                    call.call_id),
            sandbox=session.sandbox,
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
        except Exception as exc:  # noqa: BLE001 - logged and mapped by _failed
            return _failed(call.tool, exc)

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
            self.shielded_bodies += shielded
            try:
                with trio.CancelScope(shield=shielded):
                    outcome.append(await self._run_body(call, spec, args, ctx))
            finally:
                self.shielded_bodies -= shielded
                self._body_ended.unpark_all()
            done.set()

        background = self._background_of()
        assert background is not None, "attach() the manager to a nursery first"
        background.start_soon(run)
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
        session = self._sessions.get(call.session_id)
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

    async def shielded_bodies_after(self, within: float) -> int:
        """How many mutating bodies (which no cancel ends) still run after ``within``
        seconds; 0 at once if none runs."""
        with trio.move_on_after(within):
            while self.shielded_bodies:
                await self._body_ended.park()
        return self.shielded_bodies


def _failed(tool: str, exc: Exception) -> ToolResult:
    """The one mapping of a tool body's unexpected failure: ``TOOL_FAILED``."""
    log.exception("tool %s failed", tool)
    return error_result(ErrorCode.TOOL_FAILED, f"{tool} failed: {exc}", body_invoked=True)


def _no_output(stream: str, text: str) -> None:
    raise AssertionError("an inline body streams no output")
