"""A prompt run on the native link, and its stop: ``agent.prompt`` out, ``agent.abort`` behind it.

A prompt (or ``/compact``: the native ``session.compact``) is sent to the daemon and
answered as its native answer says, once every update of its turn is published. Once the
prompt is cancelled, ``agent.abort`` (its cause) follows: queued right behind what was
sent before (``queue_abort``), so the daemon, taking requests in wire order, stops exactly
this prompt's turn, and asked again while the agent answers ``idle`` (the prompt not
reached yet) until the turn is stopped or the prompt answers.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec
import trio

from protocol.errors import ErrorCode, RpcError
from protocol.messages.client import (
    AgentAbortParams,
    AgentAbortResult,
    AgentPromptParams,
    AgentPromptResult,
    SessionCompactParams,
    SessionCompactResult,
)
from runtime.clients.acp import compact
from runtime.clients.acp.messages import (
    AgentMessageChunk,
    PromptResponse,
    SessionUpdate,
    StopReason,
    TextBlock,
)
from runtime.clients.acp.prompts import SeenPrompt
from runtime.clients.acp.session import AcpSession
from runtime.link import ConnectionClosed, Endpoint

log = logging.getLogger(__name__)

ABORT_RETRY = 0.02  # seconds between stops while our prompt has not reached the agent
STOP_REASONS: dict[str, StopReason] = {"end_turn": "end_turn", "cancelled": "cancelled",
                                       "max_steps": "max_turn_requests"}
"""The native stop reasons as ACP's (``error`` is an error answer)."""

NativeRequest = Callable[[str, msgspec.Struct], Awaitable[Any]]
"""A request to the daemon and its typed result (``RpcError`` if the link is gone)."""
Publish = Callable[[str, list[SessionUpdate]], None]
"""Send a session's updates to the editor."""


async def run_prompt(session: AcpSession, prompt: SeenPrompt, text: str,
                     native: NativeRequest, publish: Publish) -> PromptResponse:
    """Run the prompt as a native ``agent.prompt``; its answer, as ACP has it."""
    failure: RpcError | None = None
    async with trio.open_nursery() as nursery:
        nursery.start_soon(abort_when_cancelled, prompt, native)
        try:
            prompt.sent = True  # (queued at once: no checkpoint before the send)
            answer: AgentPromptResult = await native(
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
        publish(session.session_id, session.translator.close_turn(answer.turn_id))
    if prompt.cancelled.is_set():
        # ACP: a cancelled prompt answers ``cancelled``, even if its turn ended first.
        return PromptResponse("cancelled")
    if answer.stop_reason == "error":
        why = session.errors.pop(answer.turn_id or "", None) or "the turn failed"
        raise RpcError(ErrorCode.INTERNAL, why, {"turnId": answer.turn_id})
    return PromptResponse(STOP_REASONS[answer.stop_reason])


async def run_compact(session: AcpSession, prompt: SeenPrompt, native: NativeRequest,
                      publish: Publish) -> PromptResponse:
    """``/compact``: the native session.compact, stopped by session/cancel."""
    failure: RpcError | None = None
    async with trio.open_nursery() as nursery:
        nursery.start_soon(abort_when_cancelled, prompt, native)
        try:
            prompt.sent = True
            result: SessionCompactResult = await native(
                "session.compact", SessionCompactParams(session.session_id))
        except RpcError as exc:
            failure = exc  # re-raised below, for the endpoint's one error mapping
        nursery.cancel_scope.cancel()
    if failure is not None:
        raise failure
    publish(session.session_id,
            [AgentMessageChunk(TextBlock(compact.outcome_text(result)))])
    if prompt.cancelled.is_set() or result.outcome == "aborted":
        return PromptResponse("cancelled")
    return PromptResponse("end_turn")


async def abort_when_cancelled(prompt: SeenPrompt, native: NativeRequest) -> None:
    """Once the prompt is cancelled, stop its turn (``agent.abort``) until it is stopped."""
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
                result = await native(
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


def queue_abort(native: Endpoint, prompt: SeenPrompt) -> None:
    """Queue the native agent.abort now, right behind what was sent before: the daemon
    takes requests in wire order, so it stops exactly this prompt's turn."""
    try:
        prompt.abort = native.send_request(
            "agent.abort", AgentAbortParams(prompt.session_id, prompt.cause))
    except ConnectionClosed:
        prompt.abort = None  # the task that waits for it reports the closed link
