"""The ACP agent: ACP requests in, native client requests out, native events back as ACP.

The server is a client of the native daemon (``runtime.daemon.daemon``) and holds only what the
translation needs: per session a :class:`~runtime.clients.acp.translate.Translator` and the
prompt in flight (``session.py``), and the prompts seen on the wire but not started yet
(``prompts.py``). Turns, tools, the host and the stop policy are the daemon's; a prompt's
run on the native link and its stop are ``promptrun.py``.

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
from typing import Any

import msgspec
import trio

from protocol.causes import ClientCause, DisposedCause, UserCause
from protocol.envelope import IncomingNotification, IncomingRequest
from protocol.errors import ErrorCode, RpcError
from protocol.messages.client import (
    PermissionMode,
    SessionEventParams,
    SessionLoadParams,
    SessionNewParams,
    SessionSetModeParams,
    WorkspaceTrustParams,
    WorkspaceTrustResult,
)
from protocol.messages.events import SessionMeta, TurnEnd
from runtime.clients.acp import compact
from runtime.clients.acp.convert import mcp_servers, prompt_text
from runtime.clients.acp.messages import (
    PROTOCOL_VERSION,
    AgentCapabilities,
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
    ToolCallUpdate,
)
from runtime.clients.acp.modes import mode_state, permission_mode
from runtime.clients.acp.opening import Openings
from runtime.clients.acp.permissions import PermissionBridge
from runtime.clients.acp.promptrun import queue_abort, run_compact, run_prompt
from runtime.clients.acp.prompts import SeenPrompts
from runtime.clients.acp.session import AcpSession
from runtime.clients.acp.translate import Translator
from runtime.clients.acp.trust import ask_trust
from runtime.link import (
    ConnectionClosed,
    Endpoint,
    Handler,
    NotificationHandler,
    answers_later,
)

log = logging.getLogger(__name__)
_USER: ClientCause = UserCause()  # the cause of an editor's session/cancel

VERSION = "0.1.0"


class AcpServer:
    def __init__(self, *, permission_mode: PermissionMode = "ask") -> None:
        self.permission_mode: PermissionMode = permission_mode
        self.native: Endpoint | None = None
        self._acp: Endpoint | None = None
        self.permissions = PermissionBridge(self._describe, self._cancel_session)
        self._sessions: dict[str, AcpSession] = {}
        self._initialized = False
        self.prompts = SeenPrompts()  # session/prompt seen, not answered
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
                self.prompts.cancel_unstarted(request.params.session_id)
            return
        if request.method == "session/prompt":
            self.prompts.seen(request.id, request.params)
        elif request.method == "session/new":
            self.openings.seen(request.id, request.params)

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

    def _session(self, session_id: str) -> AcpSession:
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
            self._sessions[created.session_id] = AcpSession(
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
        session = AcpSession(params.session_id, Translator(params.cwd), replaying=True)
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
        prompt = self.prompts.claim(params)
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
                    return await run_compact(session, prompt, self._native, self._publish)
                return await run_prompt(session, prompt, text, self._native, self._publish)
            finally:
                session.active = None
                self.permissions.release_session(session.session_id)
        finally:
            self.prompts.forget(prompt)
            prompt.done.set()

    # -- ACP notifications ----------------------------------------------------------------

    def session_cancel(self, params: CancelNotification) -> None:
        self._cancel_session(params.session_id)

    def cancel_request(self, params: CancelRequestNotification) -> None:
        """``$/cancel_request``: a prompt is cancelled as by ``session/cancel`` and answers
        ``cancelled`` (a valid response, as the spec allows). Other requests are short and
        answer normally (cancelling them is optional in ACP v1)."""
        if params.request_id is not None and self.openings.cancel(params.request_id):
            return
        prompt = self.prompts.get(params.request_id) if params.request_id is not None else None
        if prompt is None:
            log.debug("$/cancel_request for %r: not a running prompt", params.request_id)
            return
        session = self._sessions.get(prompt.session_id)
        if session is not None and session.active is prompt:
            self._cancel_session(prompt.session_id)
        else:
            prompt.cancelled.set()  # not started: it answers cancelled when it is

    def _cancel_session(self, session_id: str, cause: ClientCause = _USER) -> None:
        self.prompts.cancel_unstarted(session_id)
        session = self._sessions.get(session_id)
        if session is not None and session.active is not None:
            active = session.active
            if not active.cancelled.is_set():
                active.cause = cause  # the first cause wins
                if active.sent:
                    assert self.native is not None
                    queue_abort(self.native, active)
            active.cancelled.set()
            self.permissions.cancel_session(session_id)

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
