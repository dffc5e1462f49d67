"""What an agent's owner gives it when it is built: ``AgentCollaborators``, one typed
protocol, so nothing about the agent is wired after construction.

The agent runs its session's turns and settles their stops; what happens around them is
its owner's business (in the daemon, the session: ``runtime/daemon/sessions/session.py``):
waiting for the client link before a turn's first step, holding the turn's host lease,
showing a step's calls to operators, counting a settled stop, announcing what a stop waits
on, and when a stop counts as stuck. ``Unowned`` is an agent on its own (tests, tools):
nothing around its turns.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager, nullcontext
from typing import Protocol

from runtime.agent.registry.signal import AbortSignal

DEFAULT_STUCK_AFTER = 30.0


class AgentCollaborators(Protocol):
    @property
    def stuck_after(self) -> float:
        """Seconds a stop may wait for its phase to settle before it is logged (and shown
        to operators) as stuck."""
        ...

    async def before_turn(self, stopped: AbortSignal) -> None:
        """Awaited before a turn's first step and a maintenance's start (its phase and
        controller already exist; ``stopped``: the phase's stop signal): the daemon lets
        its client link take the effect of the frames it has already read, so a stop
        written right behind the prompt stops the turn before it runs a tool."""
        ...

    def hold_turn(self, turn_id: str) -> AbstractAsyncContextManager[None]:
        """Entered around a top-level turn's run, inside its shielded end, and left once its
        stops are answered: the daemon holds the turn's host lease there (its nursery)."""
        ...

    def on_step(self, turn_id: str, calls: Sequence[tuple[str, str, str]]) -> None:
        """A step's calls (call id, tool, class), before any of them starts (the ops view)."""
        ...

    def on_stop(self, settled_ms: float) -> None:
        """A stop that settled as ``aborted``: ms from its first request to then."""
        ...

    def on_stopping(self) -> None:
        """A stop of the current phase began, or that phase settled (what the stop waits on
        is announced from there: ``runtime/daemon/sessions/stop_waiting.py``)."""
        ...


class Unowned:
    """An agent with no owner around its turns: no wait, no lease, nobody told."""

    def __init__(self, stuck_after: float = DEFAULT_STUCK_AFTER) -> None:
        self._stuck_after = stuck_after

    @property
    def stuck_after(self) -> float:
        return self._stuck_after

    async def before_turn(self, stopped: AbortSignal) -> None:
        return None

    def hold_turn(self, turn_id: str) -> AbstractAsyncContextManager[None]:
        return nullcontext()

    def on_step(self, turn_id: str, calls: Sequence[tuple[str, str, str]]) -> None:
        return None

    def on_stop(self, settled_ms: float) -> None:
        return None

    def on_stopping(self) -> None:
        return None
