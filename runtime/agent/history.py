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
    HistoryCompacted,
    ToolCallEvent,
    ToolResultEvent,
    UserMessageEvent,
)
from protocol.tools import TextContent
from runtime.agent.providers.base import (
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


SUMMARY_HEADING = "[Summary of the earlier part of this session, compacted by quiesce]"


def summary_message(summary: str) -> UserMessage:
    """A compaction's summary as the history's first message."""
    return UserMessage(f"{SUMMARY_HEADING}\n\n{summary}")


class ModelHistory:
    """A session's model messages, folded turn by turn so a step costs O(its own turn).

    A top-level turn sees every earlier top-level turn and itself; a subagent turn
    (``<parent>~<call>``) sees only itself. After a ``history/compacted`` record (events
    with an empty turn id: the session's own, not a turn's), the turns it replaced are
    its summary instead: a load rebuilds exactly that from the log.
    """

    def __init__(self, by_turn: dict[str, list[DurableEvent]], turn_order: list[str]) -> None:
        self._by_turn = by_turn
        self._order = turn_order
        self._folded = 0  # turns of _order already folded into _messages
        self._messages: list[ModelMessage] = []
        self._compaction: HistoryCompacted | None = None  # the one _messages starts from

    def latest_compaction(self) -> HistoryCompacted | None:
        return next((e for e in reversed(self._by_turn.get("", ()))
                     if isinstance(e, HistoryCompacted)), None)

    def since_compaction(self) -> int:
        """The index in the turn order of the first turn the latest compaction kept."""
        latest = self.latest_compaction()
        return self._order.index(latest.replaced[-1]) + 1 if latest is not None else 0

    def _view(self, start: int, stop: int) -> list[ModelMessage]:
        latest = self.latest_compaction()
        messages: list[ModelMessage] = (
            [summary_message(latest.summary)] if latest is not None and start == 0 else [])
        begin = max(start, self.since_compaction())
        for turn in self._order[begin:stop]:
            if turn and not is_child_turn(turn):
                messages.extend(model_messages(self._by_turn[turn]))
        return messages

    def current(self) -> list[ModelMessage]:
        """What the next top-level turn's request would carry before its prompt."""
        return self._view(0, len(self._order))

    def through(self, turn_id: str) -> list[ModelMessage]:
        """The history up to and including ``turn_id`` (as requests now carry it)."""
        return self._view(0, self._order.index(turn_id) + 1)

    def after(self, turn_id: str) -> list[ModelMessage]:
        """The top-level turns after ``turn_id``."""
        return self._view(self._order.index(turn_id) + 1, len(self._order))

    def for_turn(self, turn_id: str) -> list[ModelMessage]:
        own = model_messages(self._by_turn.get(turn_id, []))
        if is_child_turn(turn_id):
            return own
        latest = self.latest_compaction()
        if latest is not self._compaction:  # a compaction since the last fold: start anew
            self._compaction = latest
            self._messages = [summary_message(latest.summary)] if latest is not None else []
            self._folded = self.since_compaction()
        # Turns run one after another: every turn begun before this one has ended.
        while self._folded < len(self._order) and self._order[self._folded] != turn_id:
            earlier = self._order[self._folded]
            if earlier and not is_child_turn(earlier):
                self._messages.extend(model_messages(self._by_turn[earlier]))
            self._folded += 1
        return [*self._messages, *own]
