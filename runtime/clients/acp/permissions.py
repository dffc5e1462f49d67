"""The host's permission prompts as ACP ``session/request_permission``, and their stops.

The daemon asks (native ``permission.request``); we ask the editor with the four ACP
options and map the chosen one back to a native decision. A prompt stops being waited
for in two ways:

- the native side withdraws it (a stop reached its call, whatever the cause): we stop
  waiting for the editor at once. The editor's dialog closes with the call's final
  ``tool_call_update`` (``failed``, ``ABORTED_BEFORE_DISPATCH``), which follows at once;
  ``$/cancel_request`` for our request is sent only to an editor that said it handles it
  (``clientCapabilities._meta.cancelRequest``: ACP makes the notification optional, and an
  editor without a handler for it, such as the official Python SDK 0.12, logs an error);
- the editor cancels the turn (``session/cancel``, ``$/cancel_request`` of the prompt, or
  answering ``cancelled``): we stop waiting (and tell it the same way), but do not answer
  the native side yet. An answer would be a denial, recorded ``TOOL_DENIED``, which wins
  over a stop; the host withdraws the prompt as the stop reaches the call (the call ends
  ``ABORTED_BEFORE_DISPATCH``), and a withdrawn prompt's answer is read by nobody. Prompts
  of a session being cancelled are not shown at all, for the same reason.

Prompts held so are released when withdrawn, or when the turn has settled.
"""

from __future__ import annotations

import collections
import itertools
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

import trio

from protocol.errors import RemoteError
from protocol.messages.client import ClientPermissionRequestParams
from protocol.messages.host import PermissionRequestResult, PermissionWithdrawnParams
from protocol.methods import RequestId
from runtime.clients.acp.messages import (
    CANCEL_REQUEST,
    CancelRequestNotification,
    PermissionOption,
    RequestPermissionRequest,
    RequestPermissionResponse,
    SelectedOutcome,
    ToolCallUpdate,
)
from runtime.clients.acp.translate import TITLE_MAX, tool_call_id, tool_kind
from runtime.link import ConnectionClosed, Endpoint

log = logging.getLogger(__name__)

REQUEST_PERMISSION = "session/request_permission"
REMEMBERED = 1024  # early withdrawals kept
PermissionDecision = Literal["allow-once", "allow-session", "deny", "deny-session"]

OPTIONS = (
    PermissionOption("allow-once", "Allow once", "allow_once"),
    PermissionOption("allow-always", "Always allow this tool in this session", "allow_always"),
    PermissionOption("reject-once", "Reject", "reject_once"),
    PermissionOption("reject-always", "Always reject this tool in this session",
                     "reject_always"),
)
DECISIONS: dict[str, PermissionDecision] = {
    "allow-once": "allow-once", "allow-always": "allow-session",
    "reject-once": "deny", "reject-always": "deny-session",
}
DENY = PermissionRequestResult("deny")

Describe = Callable[[str, str], ToolCallUpdate | None]  # (session id, tool call id)


@dataclass
class _Prompt:
    session_id: str
    call_id: str
    scope: trio.CancelScope = field(default_factory=trio.CancelScope)
    released: trio.Event = field(default_factory=trio.Event)
    acp_id: RequestId | None = None  # our request's id, once shown to the editor
    stopped: bool = False  # we no longer wait for the editor


class _Bounded:
    def __init__(self) -> None:
        self._items: collections.OrderedDict[str, None] = collections.OrderedDict()

    def add(self, key: str) -> None:
        self._items[key] = None
        while len(self._items) > REMEMBERED:
            self._items.popitem(last=False)

    def pop(self, key: str) -> bool:
        return self._items.pop(key, 0) is None


class PermissionBridge:
    def __init__(self, describe: Describe, on_turn_cancelled: Callable[[str], None]) -> None:
        self.acp: Endpoint | None = None
        self.cancel_requests = False
        """Whether the editor handles ``$/cancel_request`` (it said so at initialize)."""
        self._describe = describe
        self._on_turn_cancelled = on_turn_cancelled
        self._prompts: dict[str, _Prompt] = {}  # native request id ->
        self._cancelling: set[str] = set()  # sessions whose turn is being stopped
        # Withdrawals handled before their request (notifications are handled inline,
        # requests in tasks of their own): such a request is never shown.
        self._withdrawn_early = _Bounded()
        self._ids = itertools.count(1)

    async def request(self, params: ClientPermissionRequestParams) -> PermissionRequestResult:
        if self._withdrawn_early.pop(params.request_id):
            return DENY  # the native side forgot it already: nobody reads this
        prompt = _Prompt(params.session_id, params.call_id)
        self._prompts[params.request_id] = prompt
        # Registered (a withdrawal finds it); the native link reads on (answers_later).
        try:
            if params.session_id not in self._cancelling:
                answer = await self._ask(params, prompt)
                if answer is not None:
                    return answer
            await prompt.released.wait()
            return DENY
        finally:
            del self._prompts[params.request_id]

    async def _ask(self, params: ClientPermissionRequestParams,
                   prompt: _Prompt) -> PermissionRequestResult | None:
        """The editor's decision; None when it is not to be had (held instead)."""
        assert self.acp is not None
        # The call's tool/call came first, so the editor was shown it: name it the same way.
        acp_call_id = (params.call_id if params.turn_id is None
                       else tool_call_id(params.turn_id, params.call_id))
        tool_call = self._describe(params.session_id, acp_call_id) or ToolCallUpdate(
            acp_call_id, status="pending",
            title=f"{params.tool} {params.args_preview}"[:TITLE_MAX],
            kind=tool_kind(params.tool))
        # Our own id (the endpoint's counter never makes strings): a stop names it in
        # ``$/cancel_request``. The request is queued before this returns to the loop, so
        # such a cancel always follows it on the wire.
        prompt.acp_id = f"permission-{next(self._ids)}"
        with prompt.scope:
            try:
                answer: RequestPermissionResponse = await self.acp.request(
                    REQUEST_PERMISSION,
                    RequestPermissionRequest(params.session_id, tool_call, OPTIONS),
                    request_id=prompt.acp_id)
            except RemoteError as exc:
                log.info("permission %s: the editor answered an error (%s): deny",
                         params.request_id, exc)
                return DENY
            except ConnectionClosed:
                # The editor is gone and the daemon is being shut down under this turn:
                # the stop (cause disposed) withdraws the prompt; a denial would win over it.
                prompt.stopped = True
                return None
            if isinstance(answer.outcome, SelectedOutcome):
                decision = DECISIONS.get(answer.outcome.option_id)
                if decision is None:
                    log.warning("permission %s: unknown option %r: deny", params.request_id,
                                answer.outcome.option_id)
                return PermissionRequestResult(decision or "deny")
            # ACP: an editor answers ``cancelled`` only when it cancelled the turn.
            prompt.stopped = True
            self._on_turn_cancelled(params.session_id)
        return None

    # -- stops --------------------------------------------------------------------------

    def withdrawn(self, params: PermissionWithdrawnParams) -> None:
        prompt = self._prompts.get(params.request_id)
        if prompt is None:
            self._withdrawn_early.add(params.request_id)
            return
        self._stop_waiting(prompt)
        prompt.released.set()

    def cancel_session(self, session_id: str) -> None:
        """The editor cancelled the session's turn: stop waiting for it, hold the host."""
        self._cancelling.add(session_id)
        for prompt in list(self._prompts.values()):
            if prompt.session_id == session_id:
                self._stop_waiting(prompt)

    def release_session(self, session_id: str) -> None:
        """The session's turn settled: nothing of it is left to hold."""
        self._cancelling.discard(session_id)
        for prompt in list(self._prompts.values()):
            if prompt.session_id == session_id:
                self._stop_waiting(prompt)
                prompt.released.set()

    def _stop_waiting(self, prompt: _Prompt) -> None:
        if prompt.stopped:
            return
        prompt.stopped = True
        prompt.scope.cancel()  # the editor's late answer is dropped by the endpoint
        if prompt.acp_id is not None:
            self._tell(prompt.acp_id)

    def _tell(self, request_id: RequestId) -> None:
        if self.acp is not None and self.cancel_requests:
            self.acp.notify(CANCEL_REQUEST, CancelRequestNotification(request_id))
