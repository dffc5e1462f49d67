"""The ACP agent: ACP requests in, native client requests out, native events back as ACP.

The server is a client of the native daemon (``runtime.daemon.daemon``) and holds only what the
translation needs: per session a :class:`~runtime.clients.acp.translate.Translator`, the prompt
in flight and the prompts seen on the wire but not started yet. Turns, tools, the host
and the stop policy are the daemon's.

Stops: ``session/cancel`` (or ``$/cancel_request`` naming a prompt) marks the session's
prompts cancelled, stops waiting for the editor's permission answers, and has the prompt
handler send native ``agent.abort`` (cause ``user``), which answers once the turn's end
is durable. A prompt marked before its handler started never reaches the daemon. The
native ``agent.prompt`` answers only after every event of its turn was announced, and
each event becomes its ``session/update`` when it arrives, so every update is on the
wire before ``session/prompt`` answers ``cancelled``.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from typing import Any

import msgspec
import trio

from protocol.causes import ClientCause, DisposedCause, UserCause
from protocol.envelope import IncomingNotification, IncomingRequest
from protocol.errors import ErrorCode, RpcError
from protocol.messages.client import (
    AgentAbortParams,
    AgentAbortResult,
    AgentPromptParams,
    AgentPromptResult,
    PermissionMode,
    SessionCompactParams,
    SessionCompactResult,
    SessionEventParams,
    SessionLoadParams,
    SessionNewParams,
    SessionSetModeParams,
    WorkspaceTrustParams,
    WorkspaceTrustResult,
)
from protocol.messages.events import SessionMeta, TurnEnd
from protocol.methods import RequestId
from runtime.clients.acp import compact
from runtime.clients.acp.convert import mcp_servers, prompt_text
from runtime.clients.acp.messages import (
    PROTOCOL_VERSION,
    AgentCapabilities,
    AgentMessageChunk,
    CancelNotification,
    CancelRequestNotification,
    CurrentModeUpdate,
    Implementation,
    InitializeRequest,
    InitializeResponse,
    LoadSessionRequest,
    LoadSessionResponse,
    NewSessionRequest,
    NewSessionResponse,
    PromptRequest,
    PromptResponse,
    SessionNotification,
    SessionUpdate,
    SetSessionModeRequest,
    SetSessionModeResponse,
    StopReason,
    TextBlock,
    ToolCallUpdate,
)
from runtime.clients.acp.modes import mode_state, permission_mode
from runtime.clients.acp.opening import Openings
from runtime.clients.acp.permissions import PermissionBridge
from runtime.clients.acp.translate import Translator
from runtime.clients.acp.trust import ask_trust
from runtime.link import (
    ConnectionClosed,
    Endpoint,
    Handler,
    NotificationHandler,
    SentRequest,
    answers_later,
)

log = logging.getLogger(__name__)
_USER: ClientCause = UserCause()  # the cause of an editor's session/cancel

VERSION = "0.1.0"
ABORT_RETRY = 0.02  # seconds between stops while our prompt has not reached the agent
_STOP_REASONS: dict[str, StopReason] = {"end_turn": "end_turn", "cancelled": "cancelled",
                                        "max_steps": "max_turn_requests"}


@dataclass
class _Prompt:
    """A ``session/prompt`` seen on the wire, from before its handler runs to its answer."""

    request_id: RequestId | None
    params: PromptRequest
    cancelled: trio.Event = field(default_factory=trio.Event)
    cause: ClientCause = field(default_factory=UserCause)
    done: trio.Event = field(default_factory=trio.Event)
    sent: bool = False  # its agent.prompt is queued on the native link
    abort: SentRequest | None = None  # the agent.abort queued right behind it, if any

    @property
    def session_id(self) -> str:
        return self.params.session_id


@dataclass
class _Session:
    session_id: str
    translator: Translator = field(default_factory=Translator)
    replaying: bool = False
    active: _Prompt | None = None
    errors: dict[str, str] = field(default_factory=dict)  # turn id -> why it failed
    mode: str = ""  # its permission mode (session/meta's, then session/set_mode's)


class AcpServer:
    def __init__(self, *, permission_mode: PermissionMode = "ask") -> None:
        self.permission_mode: PermissionMode = permission_mode
        self.native: Endpoint | None = None
        self._acp: Endpoint | None = None
        self.permissions = PermissionBridge(self._describe, self._cancel_session)
        self._sessions: dict[str, _Session] = {}
        self._initialized = False
        self._by_id: dict[RequestId, _Prompt] = {}
        self._unstarted: dict[str, list[_Prompt]] = {}  # session id -> seen, not started
        self.openings = Openings()  # session/new seen, not answered
        self.tasks: trio.Nursery | None = None
        """Where a notification that must follow an answer is sent from (the link's)."""

    def attach(self, acp: Endpoint, native: Endpoint) -> None:
        self.permissions.acp = acp
        self.native = native
        self._acp = acp

    # -- method tables --------------------------------------------------------------------

    @property
    def acp_handlers(self) -> dict[str, Handler]:
        # Each is forwarded to the native link: its effect is its native request,
        # queued before its first wait; waiting for the daemon's answer follows.
        return {"initialize": self.initialize,
                "session/new": answers_later(self.session_new),
                "session/load": answers_later(self.session_load),
                "session/prompt": answers_later(self.session_prompt),
                "session/set_mode": answers_later(self.session_set_mode)}

    @property
    def acp_notification_handlers(self) -> dict[str, NotificationHandler]:
        return {"session/cancel": self.session_cancel, "$/cancel_request": self.cancel_request}

    @property
    def native_handlers(self) -> dict[str, Handler]:
        # Registered, or shown to the editor: the native link reads on while it decides.
        return {"permission.request": answers_later(self.permissions.request),
                "workspace.trust": answers_later(self._ask_trust)}

    async def _ask_trust(self, params: WorkspaceTrustParams) -> WorkspaceTrustResult:
        """Asked while a session opens, before its workspace's servers start (trust.py)."""
        return await ask_trust(self._acp, params)

    @property
    def native_notification_handlers(self) -> dict[str, NotificationHandler]:
        return {"session.event": self.on_session_event,
                "permission.withdrawn": self.permissions.withdrawn}

    # -- the wire, seen in order ----------------------------------------------------------

    def on_request_seen(self, request: IncomingRequest | IncomingNotification) -> None:
        """A message the endpoint is about to handle (the tap parsed it as it will)."""
        if isinstance(request, IncomingNotification):
            if request.method == "session/cancel":
                # The prompts read before it and not yet handled never reach the agent.
                for prompt in self._unstarted.get(request.params.session_id, ()):
                    prompt.cancelled.set()
            return
        if request.method == "session/prompt":
            prompt = _Prompt(request.id, request.params)
            self._by_id[request.id] = prompt
            self._unstarted.setdefault(prompt.session_id, []).append(prompt)
        elif request.method == "session/new":
            self.openings.seen(request.id, request.params)

    def _claim(self, params: PromptRequest) -> _Prompt:
        """The prompt seen for these params: the first unstarted one equal to them (two
        equal prompts are interchangeable)."""
        waiting = self._unstarted.get(params.session_id, [])
        for i, prompt in enumerate(waiting):
            if prompt.params == params:
                del waiting[i]
                if not waiting:
                    del self._unstarted[params.session_id]
                return prompt
        return _Prompt(None, params)  # not seen by the tap: cancellable once it runs

    def _forget(self, prompt: _Prompt) -> None:
        if prompt.request_id is not None and self._by_id.get(prompt.request_id) is prompt:
            del self._by_id[prompt.request_id]

    # -- ACP requests ---------------------------------------------------------------------

    async def initialize(self, params: InitializeRequest) -> InitializeResponse:
        self._initialized = True
        meta = params.client_capabilities.get("_meta")
        self.permissions.cancel_requests = (isinstance(meta, dict)
                                            and meta.get("cancelRequest") is True)
        # ACP: answer the version we speak; a client that cannot speak it disconnects.
        return InitializeResponse(PROTOCOL_VERSION, AgentCapabilities(),
                                  Implementation("quiesce", VERSION, title="quiesce"))

    def _require_initialized(self) -> None:
        if not self._initialized:
            raise RpcError(ErrorCode.INVALID_REQUEST, "send initialize first")

    def _session(self, session_id: str) -> _Session:
        self._require_initialized()
        session = self._sessions.get(session_id)
        if session is None:
            raise RpcError(ErrorCode.INVALID_PARAMS, f"unknown session {session_id!r} "
                           "(session/new or session/load it first)")
        return session

    async def session_new(self, params: NewSessionRequest) -> NewSessionResponse:
        new = self.openings.claim(params)
        try:
            self._require_initialized()
            if not os.path.isabs(params.cwd):
                raise RpcError(ErrorCode.INVALID_PARAMS, "cwd must be an absolute path")
            # Cancelled while the session opens (its plugin servers starting), it is undone
            # at once, servers killed, and answers -32800 (runtime.clients.acp.opening).
            created = await self.openings.open(new, SessionNewParams(
                params.cwd, self.permission_mode, None, mcp_servers(params.mcp_servers)),
                self._native)
            self._sessions[created.session_id] = _Session(
                created.session_id, Translator(params.cwd), mode=self.permission_mode)
            self._advertise_commands(created.session_id)
            return NewSessionResponse(created.session_id, mode_state(self.permission_mode))
        finally:
            self.openings.forget(new)

    async def session_load(self, params: LoadSessionRequest) -> LoadSessionResponse:
        self._require_initialized()
        old = self._sessions.get(params.session_id)
        if old is not None and old.active is not None:
            raise RpcError(ErrorCode.INVALID_REQUEST, "the session is running a prompt")
        # A fresh translator: the replay shows the whole history, as the native log has it.
        session = _Session(params.session_id, Translator(params.cwd), replaying=True)
        self._sessions[params.session_id] = session
        try:
            # The servers the editor sends now replace the stored ones (ACP: the client's
            # list is the session's).
            await self._native("session.load", SessionLoadParams(
                params.session_id, mcp_servers(params.mcp_servers)))
        except BaseException:
            if self._sessions.get(params.session_id) is session:
                del self._sessions[params.session_id]
            raise
        finally:
            session.replaying = False
        self._advertise_commands(params.session_id)
        return LoadSessionResponse(mode_state(session.mode or self.permission_mode))

    async def session_set_mode(self, params: SetSessionModeRequest) -> SetSessionModeResponse:
        session = self._session(params.session_id)
        mode = permission_mode(params.mode_id)
        if mode is None:
            raise RpcError(ErrorCode.INVALID_PARAMS, f"unknown mode {params.mode_id!r}: "
                           "ask, accept-edits or auto")
        await self._native("session.setMode", SessionSetModeParams(session.session_id, mode))
        session.mode = mode
        self._publish(session.session_id, [CurrentModeUpdate(mode)])
        return SetSessionModeResponse()

    async def session_prompt(self, params: PromptRequest) -> PromptResponse:
        prompt = self._claim(params)
        try:
            session = self._session(params.session_id)
            text = prompt_text(params.prompt)
            if session.active is not None:
                raise RpcError(ErrorCode.INVALID_REQUEST,
                               "a prompt is already running in this session")
            if prompt.cancelled.is_set():
                return PromptResponse("cancelled")  # cancelled before its turn started
            session.active = prompt
            try:
                if compact.is_compact(text):
                    return await self._run_compact(session, prompt)
                return await self._run_prompt(session, prompt, text)
            finally:
                session.active = None
                self.permissions.release_session(session.session_id)
        finally:
            self._forget(prompt)
            prompt.done.set()

    async def _run_prompt(self, session: _Session, prompt: _Prompt,
                          text: str) -> PromptResponse:
        failure: RpcError | None = None
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._abort_when_cancelled, prompt)
            try:
                prompt.sent = True  # (queued at once: no checkpoint before the send)
                answer: AgentPromptResult = await self._native(
                    "agent.prompt", AgentPromptParams(session.session_id, text))
            except RpcError as exc:
                # Raised here it would leave the nursery wrapped in an ExceptionGroup and
                # lose its code: re-raised below, for the endpoint's one error mapping.
                failure = exc
            nursery.cancel_scope.cancel()
        if failure is not None:
            raise failure
        if answer.turn_id is not None:
            # Every update before the answer, and a final one for each call shown.
            self._publish(session.session_id, session.translator.close_turn(answer.turn_id))
        if prompt.cancelled.is_set():
            # ACP: a cancelled prompt answers ``cancelled``, even if its turn ended first.
            return PromptResponse("cancelled")
        if answer.stop_reason == "error":
            why = session.errors.pop(answer.turn_id or "", None) or "the turn failed"
            raise RpcError(ErrorCode.INTERNAL, why, {"turnId": answer.turn_id})
        return PromptResponse(_STOP_REASONS[answer.stop_reason])

    async def _run_compact(self, session: _Session, prompt: _Prompt) -> PromptResponse:
        """``/compact``: the native session.compact, stopped by session/cancel."""
        failure: RpcError | None = None
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._abort_when_cancelled, prompt)
            try:
                prompt.sent = True
                result: SessionCompactResult = await self._native(
                    "session.compact", SessionCompactParams(session.session_id))
            except RpcError as exc:
                failure = exc  # re-raised below, for the endpoint's one error mapping
            nursery.cancel_scope.cancel()
        if failure is not None:
            raise failure
        self._publish(session.session_id,
                      [AgentMessageChunk(TextBlock(compact.outcome_text(result)))])
        if prompt.cancelled.is_set() or result.outcome == "aborted":
            return PromptResponse("cancelled")
        return PromptResponse("end_turn")

    async def _abort_when_cancelled(self, prompt: _Prompt) -> None:
        await prompt.cancelled.wait()
        while True:
            try:
                result: AgentAbortResult
                if prompt.abort is not None:  # already queued behind the prompt
                    sent, prompt.abort = prompt.abort, None
                    try:
                        result = await sent.result()
                    except ConnectionClosed as exc:
                        raise RpcError(ErrorCode.INTERNAL, "the runtime stopped") from exc
                else:
                    result = await self._native(
                        "agent.abort", AgentAbortParams(prompt.session_id, prompt.cause))
            except RpcError as exc:
                # The prompt's own answer says how the turn ended (cancelled, since it was
                # marked); a failed stop must not turn that answer into an error.
                log.warning("agent.abort for %s failed: %s", prompt.session_id, exc)
                return
            if result.outcome != "idle":  # stopped (aborted, or ended by an error meanwhile)
                return
            # ``idle``: the turn ended on its own first, or (a stop before our agent.prompt
            # was queued) nothing ran yet. Ask again until the turn is stopped, or the
            # prompt answers (which ends this).
            await trio.sleep(ABORT_RETRY)

    # -- ACP notifications ----------------------------------------------------------------

    def session_cancel(self, params: CancelNotification) -> None:
        self._cancel_session(params.session_id)

    def cancel_request(self, params: CancelRequestNotification) -> None:
        """``$/cancel_request``: a prompt is cancelled as by ``session/cancel`` and answers
        ``cancelled`` (a valid response, as the spec allows). Other requests are short and
        answer normally (cancelling them is optional in ACP v1)."""
        if params.request_id is not None and self.openings.cancel(params.request_id):
            return
        prompt = self._by_id.get(params.request_id) if params.request_id is not None else None
        if prompt is None:
            log.debug("$/cancel_request for %r: not a running prompt", params.request_id)
            return
        session = self._sessions.get(prompt.session_id)
        if session is not None and session.active is prompt:
            self._cancel_session(prompt.session_id)
        else:
            prompt.cancelled.set()  # not started: it answers cancelled when it is

    def _cancel_session(self, session_id: str, cause: ClientCause = _USER) -> None:
        for prompt in self._unstarted.get(session_id, ()):
            prompt.cancelled.set()
        session = self._sessions.get(session_id)
        if session is not None and session.active is not None:
            active = session.active
            if not active.cancelled.is_set():
                active.cause = cause  # the first cause wins
                if active.sent:
                    self._queue_abort(active)
            active.cancelled.set()
            self.permissions.cancel_session(session_id)

    def _queue_abort(self, prompt: _Prompt) -> None:
        """Queue the native agent.abort now, right behind what was sent before: the daemon
        takes requests in wire order, so it stops exactly this prompt's turn."""
        assert self.native is not None
        try:
            prompt.abort = self.native.send_request(
                "agent.abort", AgentAbortParams(prompt.session_id, prompt.cause))
        except ConnectionClosed:
            prompt.abort = None  # the task that waits for it reports the closed link

    async def dispose(self) -> None:
        """The editor is gone: stop every running turn (cause ``disposed``) through the
        native link and wait until each has settled, before the link is closed. Closed
        first, the daemon would answer the prompts still open with a denial, which wins
        over the stop."""
        running = [s.active for s in self._sessions.values() if s.active is not None]
        for session_id in list(self._sessions):
            self._cancel_session(session_id, DisposedCause())
        for prompt in running:
            await prompt.done.wait()

    # -- the native side ------------------------------------------------------------------

    async def _native(self, method: str, params: msgspec.Struct) -> Any:
        assert self.native is not None
        try:
            return await self.native.request(method, params)
        except ConnectionClosed as exc:
            raise RpcError(ErrorCode.INTERNAL, "the runtime stopped") from exc

    def on_session_event(self, params: SessionEventParams) -> None:
        session = self._sessions.get(params.session_id)
        if session is None:  # not opened through ACP (yet): session/meta of a new session
            if isinstance(params.event, SessionMeta):
                self.openings.on_meta(params.session_id, params.event)
            return
        event = params.event
        if isinstance(event, SessionMeta):
            session.mode = event.permission_mode
        if isinstance(event, TurnEnd) and event.end.error:
            session.errors[event.turn_id] = event.end.error
        self._publish(session.session_id,
                      session.translator.translate(event, replay=session.replaying))

    def _advertise_commands(self, session_id: str) -> None:
        """The session's slash commands (``/compact``), sent right after the answer that
        opens the session (an editor ignores updates of a session it does not know yet).
        The task runs at the handler task's next checkpoint, and the endpoint queues a
        handler's answer with none between its return and the queue: the answer goes
        first."""
        if self.tasks is not None:
            self.tasks.start_soon(self._publish_soon, session_id, compact.COMMANDS)

    async def _publish_soon(self, session_id: str, update: SessionUpdate) -> None:
        self._publish(session_id, [update])

    def _publish(self, session_id: str, updates: list[SessionUpdate]) -> None:
        assert self._acp is not None
        for update in updates:
            self._acp.notify("session/update", SessionNotification(session_id, update))

    def _describe(self, session_id: str, call_id: str) -> ToolCallUpdate | None:
        session = self._sessions.get(session_id)
        return session.translator.describe(call_id) if session is not None else None
