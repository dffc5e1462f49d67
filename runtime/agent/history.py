"""The model's view of a session: its durable events as provider messages.

Within a step, calls start and results commit interleaved (a rolling pool), but
a model expects one assistant message carrying every call of the step,
followed by the results; so events are grouped by (turn, step).
"""

from __future__ import annotations

from protocol.ids import is_child_turn
from protocol.messages.events import (
    AssistantMessageEvent,
    DurableEvent,
    ToolCallEvent,
    ToolResultEvent,
    UserMessageEvent,
)
from protocol.tools import TextContent
from runtime.providers.base import (
    AssistantMessage,
    ModelMessage,
    SealedReasoning,
    ToolCallChunk,
    ToolMessage,
    UserMessage,
)


def model_messages(events: list[DurableEvent]) -> list[ModelMessage]:
    messages: list[ModelMessage] = []
    step: tuple[str, int] | None = None
    text = reasoning = ""
    calls: list[ToolCallChunk] = []
    results: list[ToolMessage] = []
    sealed: list[SealedReasoning] = []

    def flush() -> None:
        nonlocal step, text, reasoning
        if step is not None and (text or reasoning or calls or sealed):
            messages.append(AssistantMessage(text, reasoning, tuple(calls), tuple(sealed)))
        messages.extend(results)
        step, text, reasoning = None, "", ""
        calls.clear()
        results.clear()
        sealed.clear()

    for event in events:
        if isinstance(event, UserMessageEvent):
            flush()
            messages.append(UserMessage(event.text))
            continue
        if not isinstance(event, AssistantMessageEvent | ToolCallEvent | ToolResultEvent):
            continue
        key = (event.turn_id, event.step)
        if key != step:
            flush()
            step = key
        if isinstance(event, AssistantMessageEvent):
            text += "".join(b.text for b in event.blocks if b.type == "text")
            reasoning += "".join(b.text for b in event.blocks if b.type == "reasoning")
            sealed.extend(SealedReasoning(b.text, b.signature or "", b.redacted or "")
                          for b in event.blocks if b.signature or b.redacted)
        elif isinstance(event, ToolCallEvent):
            calls.append(ToolCallChunk(event.call_id, event.tool, dict(event.args)))
        else:
            body = "\n".join(c.text for c in event.content if isinstance(c, TextContent))
            body = _with_contexts(body, event.details.get("contexts"))
            results.append(ToolMessage(event.call_id, body, event.is_error))
    flush()
    return messages


def _with_contexts(body: str, contexts: object) -> str:
    """The deferred contexts of a result (a hook's ``additionalContext``), after its text:
    they are meant for the model, which reads only text."""
    if not isinstance(contexts, list):
        return body
    return "\n\n".join([body, *(c for c in contexts if isinstance(c, str) and c)])


class ModelHistory:
    """A session's model messages, folded turn by turn so a step costs O(its own turn).

    A top-level turn sees every earlier top-level turn and itself; a subagent turn
    (``<parent>~<call>``) sees only itself.
    """

    def __init__(self, by_turn: dict[str, list[DurableEvent]], turn_order: list[str]) -> None:
        self._by_turn = by_turn
        self._order = turn_order
        self._folded = 0  # turns of _order already folded into _messages
        self._messages: list[ModelMessage] = []

    def for_turn(self, turn_id: str) -> list[ModelMessage]:
        own = model_messages(self._by_turn.get(turn_id, []))
        if is_child_turn(turn_id):
            return own
        # Turns run one after another: every turn begun before this one has ended.
        while self._folded < len(self._order) and self._order[self._folded] != turn_id:
            earlier = self._order[self._folded]
            if earlier and not is_child_turn(earlier):
                self._messages.extend(model_messages(self._by_turn[earlier]))
            self._folded += 1
        return [*self._messages, *own]
