"""The timeout policy: an around-dispatch wrapper that owns ``TOOL_TIMEOUT``.

It replaces the call's signal (``replace_signal``) with ``fuse(upstream, deadline)`` for the
delegated lifetime, where ``deadline`` is aborted with ``TimeoutCause`` when the
time is up, unless ``upstream`` (the caller's stop, or an outer wrapper's
signal) aborted first. The body learns of the deadline through its signal like
of any stop, and the policy awaits it: a timeout is a request to stop, never an
abandonment.

Once its deadline has fired, the policy owns the outcome: an abort (the body's,
or ``ABORTED_BEFORE_DISPATCH`` because the deadline passed before delegation)
becomes ``TOOL_TIMEOUT``, keeping the result's ``details`` and whether the body
was invoked, and stays so however the caller stops later. A success that
arrived after the deadline (the body ignored it) stays a success, and an error
the body reported stays that error: both say more than "timed out".
"""

from __future__ import annotations

from collections.abc import Callable

import trio

from protocol.errors import ErrorCode
from protocol.tools import ToolResult
from runtime.agent.registry import outcomes
from runtime.agent.registry.causes import TimeoutCause
from runtime.agent.registry.policies import Delegate
from runtime.agent.registry.signal import AbortController, AbortError, AbortSignal, fuse
from runtime.agent.registry.views import ToolDispatchExecution, ToolExecution

__all__ = ["TimeoutPolicy"]

_ABORT_CODES = frozenset({ErrorCode.ABORTED.name, ErrorCode.ABORTED_BEFORE_DISPATCH.name})


class TimeoutPolicy:
    """``TimeoutPolicy(30.0)``, or ``TimeoutPolicy(seconds_for)`` choosing per call
    (``None``: no deadline for this call)."""

    def __init__(self, seconds: float | Callable[[ToolExecution], float | None]) -> None:
        self._seconds = seconds

    def seconds_for(self, call: ToolExecution) -> float | None:
        seconds = self._seconds(call) if callable(self._seconds) else self._seconds
        if seconds is not None and seconds < 0:
            raise ValueError(f"a timeout cannot be negative: {seconds}")
        return seconds

    async def __call__(self, call: ToolDispatchExecution, delegate: Delegate) -> ToolResult:
        seconds = self.seconds_for(call)
        if seconds is None:
            return await delegate()
        deadline = AbortController()
        upstream = call.signal
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_expire, seconds, upstream, deadline)
            with fuse(upstream, deadline.signal) as scoped:
                call.replace_signal(scoped)
                try:
                    result = await delegate()
                except AbortError:
                    if not deadline.signal.aborted:
                        raise
                    result = outcomes.aborted(body_invoked=call.body_invoked)
            nursery.cancel_scope.cancel()
        if deadline.signal.aborted and result.code in _ABORT_CODES:
            return outcomes.timed_out(seconds, body_invoked=call.body_invoked,
                                      details=result.details)
        return result


async def _expire(seconds: float, upstream: AbortSignal, deadline: AbortController) -> None:
    await trio.sleep(seconds)
    if not upstream.aborted:  # a stop that came first is the caller's, not a timeout
        deadline.abort(TimeoutCause(seconds))
