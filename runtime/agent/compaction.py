"""Compacting a session's history: the model's summary of its older turns replaces them.

It runs in the agent's ``maintenance`` phase, under that phase's controller (the agent
enters and leaves the phase; :func:`compact` is the job). The records, in order:
``maintenance/start``; the summary request's ``model/usage`` if it got a response;
``history/compacted`` if it succeeded; ``maintenance/end``, fsynced. Only whole top-level
turns that ended are replaced, the most recent ``KEEP_RECENT`` kept, so a ``tool/call`` is
never parted from its ``tool/result`` and an interrupted prefix stays with its turn.

The same job also runs inside a running top-level turn, at a step boundary (``within``:
the turn's id on its records), when the history the turn's next request would carry
outgrows the share: it replaces every ended turn (the running one is the recent part kept)
under the turn's own signal, so a stop there is the turn's stop; no phase change (the
phase table has no ``running`` to ``maintenance`` edge: the turn's phase owns it).

A stop (at any point before ``history/compacted`` is appended) closes the summary's stream
at once and leaves the history as it was; so does a failure (the provider's error, an empty
summary), which ``maintenance/end`` says. The history a request carries afterwards is
:class:`~runtime.agent.history.ModelHistory`'s, which reads the latest ``history/compacted``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

import msgspec
import trio

from protocol.ids import is_child_turn
from protocol.messages.client import (
    AnthropicProviderConfig,
    ProviderConfig,
    ScriptedProviderConfig,
    SessionCompactResult,
)
from protocol.messages.events import (
    DurableEvent,
    HistoryCompacted,
    MaintenanceEnd,
    MaintenanceStart,
    ModelUsageEvent,
    TokenUsage,
    TurnEnd,
    TurnOutcome,
)
from runtime.agent.history import ModelHistory, summary_message
from runtime.agent.journal import Journal
from runtime.agent.providers.base import (
    AssistantMessage,
    ModelMessage,
    ModelRequest,
    Provider,
    ProviderError,
    TextDelta,
    ToolMessage,
    UsageReport,
    UserMessage,
)
from runtime.agent.providers.usage import history_tokens, usage_of
from runtime.agent.registry import AbortError, AbortSignal, cancel_on_abort

log = logging.getLogger(__name__)

DEFAULT_COMPACT_AT = 0.8
DEFAULT_WINDOWS = {"openai": 128_000, "anthropic": 200_000}
"""Context windows (tokens) assumed when a provider's config sets none; the scripted
provider has none (no automatic compaction unless its config sets ``contextWindow``)."""
KEEP_RECENT = 1
"""Top-level turns a compaction keeps whole after the summary."""
RESULT_EXCERPT = 2000
"""Characters of a tool result the summary request shows (the rest is cut, said so)."""

COMPACTION_PROMPT = """\
You are compacting the history of a coding agent's session so that the work can go on \
within the model's context window. You are given the transcript of the older part of the \
session. Write a summary that lets the agent continue as if it had read the transcript: \
the user's goals and constraints, decisions made and why, files read, created or changed \
(with paths), commands run and their important results, errors met and how they were \
resolved, and what was still open or planned at the end. Keep exact names, paths, \
identifiers and numbers. Do not invent anything; do not address the user; write only the \
summary."""

COMPACTION_REQUEST = "Summarise the transcript above as instructed."


@dataclass(frozen=True)
class ContextSettings:
    """When a session's history is compacted on its own (``window`` None: never)."""

    window: int | None = None
    compact_at: float = DEFAULT_COMPACT_AT

    @property
    def threshold(self) -> int | None:
        return int(self.window * self.compact_at) if self.window is not None else None


def settings_for(config: ProviderConfig | None) -> ContextSettings:
    """A provider config's context window and compaction share (documented defaults)."""
    if config is None:
        return ContextSettings()
    share = config.compact_at or DEFAULT_COMPACT_AT
    if isinstance(config, ScriptedProviderConfig):
        return ContextSettings(config.context_window, share)
    vendor = "anthropic" if isinstance(config, AnthropicProviderConfig) else "openai"
    return ContextSettings(config.context_window or DEFAULT_WINDOWS[vendor], share)


def settings_from_meta(provider: dict[str, Any]) -> ContextSettings:
    """The settings of the provider config a session's ``session/meta`` recorded."""
    try:
        config = msgspec.convert(provider, ProviderConfig) if provider else None
    except msgspec.ValidationError:
        config = None
    return settings_for(config)


def outgrown(settings: ContextSettings, journal: Journal, history: ModelHistory) -> bool:
    """The history would fill more than its share of the window, and a compaction could
    replace something (a single long turn cannot be: it is not tried)."""
    threshold = settings.threshold
    return (threshold is not None and history_tokens(history.current()) > threshold
            and bool(compactable(journal.by_turn, journal.turn_order, history)))


def compactable(events: dict[str, list[DurableEvent]], order: list[str],
                history: ModelHistory, keep: int = KEEP_RECENT) -> tuple[str, ...]:
    """The top-level turns a compaction now would replace: every ended turn since the
    last compaction but the most recent ``keep`` (a running turn has not ended: never)."""
    since = history.since_compaction()
    ended = [t for t in order[since:] if t and not is_child_turn(t)
             and any(isinstance(e, TurnEnd) for e in events.get(t, ()))]
    return tuple(ended[:-keep] if keep else ended)


def outgrown_within(settings: ContextSettings, journal: Journal, history: ModelHistory,
                    turn_id: str) -> bool:
    """At a step boundary of top-level turn ``turn_id``: the history its next request
    would carry fills more than its share of the window, and there are ended turns
    before it to replace (every one: the running turn is the recent part kept)."""
    threshold = settings.threshold
    return (threshold is not None
            and history_tokens(history.for_turn(turn_id)) > threshold
            and bool(compactable(journal.by_turn, journal.turn_order, history, keep=0)))


def transcript(messages: list[ModelMessage]) -> str:
    """The history to summarise as one text (no tool schemas needed, any provider)."""
    parts: list[str] = []
    for message in messages:
        if isinstance(message, UserMessage):
            parts.append(f"## User\n{message.text}")
        elif isinstance(message, AssistantMessage):
            lines = [message.text] if message.text else []
            lines += [f"[tool call {c.call_id}: {c.name} "
                      f"{msgspec.json.encode(c.args).decode()}]" for c in message.tool_calls]
            if lines:
                parts.append("## Assistant\n" + "\n".join(lines))
        elif isinstance(message, ToolMessage):
            text = message.text
            if len(text) > RESULT_EXCERPT:
                text = f"{text[:RESULT_EXCERPT]}\n[... {len(text) - RESULT_EXCERPT} characters cut]"
            failed = " (error)" if message.is_error else ""
            parts.append(f"## Tool result {message.call_id}{failed}\n{text}")
    return "\n\n".join(parts)


Outcome = Literal["compacted", "nothing", "aborted", "failed"]


@dataclass
class Compaction:
    """One compaction's course, as the agent's maintenance phase reports it."""

    trigger: Literal["auto", "manual"]
    outcome: Outcome = "failed"
    replaced: tuple[str, ...] = ()
    tokens_before: int = 0
    tokens_after: int = 0
    error: str | None = None
    durable: bool = False
    """Its ``maintenance/end`` is on disk (fsynced): only then may a stop answer."""
    done: trio.Event = field(default_factory=trio.Event)
    """Set when its maintenance phase has ended."""

    def result(self) -> SessionCompactResult:
        return SessionCompactResult(self.outcome, self.replaced, self.tokens_before,
                                    self.tokens_after, self.error)


async def compact(job: Compaction, journal: Journal, provider: Provider,
                  history: ModelHistory, signal: AbortSignal, *, within: str = "") -> None:
    """Run one compaction (the caller shields it and holds the phase); ``job`` says how it
    ended. An ``OSError`` of the log propagates (``job.durable`` stays false).

    ``within``: the running top-level turn it runs inside, at a step boundary, under that
    turn's signal (its ``maintenance/*`` and summary ``model/usage`` records carry the
    turn's id; it replaces every ended turn); empty: the ``maintenance`` phase's own."""
    journal.append(lambda seq: MaintenanceStart(seq, within, "compact", job.trigger))
    end = TurnOutcome("completed")
    record: HistoryCompacted | None = None
    try:
        signal.raise_if_aborted()
        replaced = compactable(journal.by_turn, journal.turn_order, history,
                               keep=0 if within else KEEP_RECENT)
        if not replaced:
            job.outcome = "nothing"
        else:
            record = await _summarise(job, replaced, journal, provider, history, signal,
                                      within)
            job.outcome = "compacted" if record is not None else "failed"
    except AbortError as stop:
        job.outcome, end = "aborted", TurnOutcome("aborted", stop.cause)
    except ProviderError as exc:
        job.outcome, job.error = "failed", f"compaction failed: {exc}"
    if job.outcome == "failed":
        end = TurnOutcome("error", error=job.error)
        log.warning("compaction failed, the history is unchanged: %s", job.error)
    if record is not None:
        journal.append(lambda seq: msgspec.structs.replace(record, seq=seq))
    await journal.append_durably(lambda seq: MaintenanceEnd(seq, within, end,
                                                            record is not None))
    job.durable = True


async def _summarise(job: Compaction, replaced: tuple[str, ...], journal: Journal,
                     provider: Provider, history: ModelHistory, signal: AbortSignal,
                     within: str) -> HistoryCompacted | None:
    """Ask for the summary; the record to append, or None (``job`` says why)."""
    before = history.current()
    job.tokens_before = history_tokens(before)
    request = ModelRequest(COMPACTION_PROMPT, (UserMessage(
        transcript(history.through(replaced[-1])) + "\n\n" + COMPACTION_REQUEST),))
    text: list[str] = []
    report: UsageReport | None = None
    chunks = 0
    try:
        with cancel_on_abort(signal):  # a stop closes the summary's stream at once
            async with provider.stream(request) as stream:
                async for chunk in stream:
                    if signal.aborted:
                        break
                    chunks += 1
                    if isinstance(chunk, UsageReport):
                        report = chunk
                    elif isinstance(chunk, TextDelta):
                        text.append(chunk.text)
    finally:
        if report is not None or chunks:
            usage = usage_of(report, request, "".join(text))
            journal.append(lambda seq: ModelUsageEvent(seq, within, -1, usage))
    signal.raise_if_aborted()  # a stop before the record wins: the history is unchanged
    summary = "".join(text).strip()
    if not summary:
        job.error = "compaction failed: the model returned an empty summary"
        return None
    after = [summary_message(summary), *history.after(replaced[-1])]
    job.replaced, job.tokens_after = replaced, history_tokens(after)
    last = usage_of(report, request, summary)
    return HistoryCompacted(-1, "", replaced, summary, job.tokens_before, job.tokens_after,
                            last)


def usage_sum(events: Iterable[DurableEvent]) -> TokenUsage | None:
    """The sum of the ``model/usage`` records among ``events`` (None: there are none)."""
    total: TokenUsage | None = None
    for event in events:
        if isinstance(event, ModelUsageEvent):
            total = event.usage if total is None else total + event.usage
    return total
