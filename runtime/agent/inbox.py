"""A prompt the agent accepted, waiting for the answer its turn gives.

A prompt accepted while idle starts its turn at once; one accepted while a phase runs
waits in the agent's inbox (a deque of these, ``Agent.inbox``) for the next turn. Either
way its asker waits on ``done`` for ``result``: the turn's id and stop reason, or
``cancelled`` when a stop cleared the inbox before its turn began.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import trio

from protocol.messages.client import AgentPromptResult
from protocol.messages.events import StopReason


@dataclass
class PendingPrompt:
    """A prompt and its answer once its turn has ended (or a stop cleared it)."""

    text: str
    done: trio.Event = field(default_factory=trio.Event)
    result: AgentPromptResult | None = None

    def resolve(self, turn_id: str | None, stop_reason: StopReason) -> None:
        self.result = AgentPromptResult(turn_id, stop_reason)
        self.done.set()
