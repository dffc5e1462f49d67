"""One turn: steps of (assemble the prompt, stream the model, run the step's tool calls).

Checkpoints, where a stop is observed: after the prompt is assembled, at every
step boundary, before the stream starts and on every stream chunk; inside a
step's tool calls the scheduler applies the stop contract. A stopped stream
keeps its visible text and reasoning as an ``interrupted`` assistant message;
its half-streamed tool calls are dropped. At a step boundary after the first, a turn whose
next request's history outgrows its share of the context window first compacts the ended
turns before it (:mod:`runtime.agent.compaction`), under its own signal.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import trio

from protocol.errors import ErrorCode
from protocol.messages.events import (
    AssistantDeltaEvent,
    AssistantMessageEvent,
    Block,
    ModelUsageEvent,
    StopReason,
    ToolCallEvent,
    ToolResultEvent,
    TurnOutcome,
    TurnStart,
    UserMessageEvent,
)
from protocol.tools import ToolResult
from protocol.toolspecs import input_schema
from runtime.agent.assembler import Assembler
from runtime.agent.compaction import Compaction, ContextSettings, compact, outgrown_within
from runtime.agent.history import ModelHistory
from runtime.agent.hostport import HOST_RESTARTED, lost_host
from runtime.agent.instructions import DEFAULT_SYSTEM_PROMPT, system_message
from runtime.agent.journal import Journal
from runtime.agent.providers.base import (
    ModelRequest,
    Provider,
    ProviderError,
    ReasoningDelta,
    TextDelta,
    ToolSchema,
    UsageReport,
)
from runtime.agent.providers.usage import request_tokens, usage_of
from runtime.agent.registry import (
    AbortError,
    AbortSignal,
    ToolCallRequest,
    ToolDefinition,
    ToolRegistry,
    cancel_on_abort,
    run_tool_calls,
)
from runtime.agent.task import HOST_CRASHED_ERROR, HOST_RESTARTED_ERROR

log = logging.getLogger(__name__)

YIELD_EVERY = 64
"""Stream chunks taken in a row before the turn lets the rest of the runtime run."""

DEFAULT_MAX_STEPS = 100


StepListener = Callable[[str, Sequence[tuple[str, str, str]]], None]
"""Told a step's calls (turn id; call id, tool, class of each) before any of them starts."""


@dataclass(frozen=True)
class TurnConfig:
    max_steps: int = DEFAULT_MAX_STEPS
    """Model steps a turn may take; past them it ends ``max_steps``."""
    max_parallel: int = 4
    system_prompt: str = DEFAULT_SYSTEM_PROMPT
    """The daemon's or the session's (see :mod:`runtime.agent.instructions`)."""
    workspace: str | None = None
    """The session's workspace (a real path), whose ``AGENTS.md`` each turn reads."""

    def __post_init__(self) -> None:
        if self.max_steps < 1 or self.max_parallel < 1:
            raise ValueError(f"max_steps and max_parallel must be at least 1, not "
                             f"{self.max_steps} and {self.max_parallel}")


@dataclass(frozen=True)
class TurnEnding:
    outcome: TurnOutcome
    stop_reason: StopReason


def tool_schemas(definitions: list[ToolDefinition[Any]]) -> tuple[ToolSchema, ...]:
    return tuple(ToolSchema(d.name, d.description, d.input_schema if d.input_schema is not None
                            else input_schema(d.args_type)) for d in definitions)


class _StepRecorder:
    """The scheduler's records, as durable session events."""

    def __init__(self, journal: Journal, registry: ToolRegistry, turn_id: str,
                 step: int) -> None:
        self._journal = journal
        self._registry = registry
        self._turn_id = turn_id
        self._step = step

    async def record_call(self, call: ToolCallRequest) -> None:
        definition = self._registry.definition(call.tool)
        tool_class = definition.tool_class.value if definition is not None else "unknown"
        args = call.args if isinstance(call.args, dict) else {"raw": call.args}
        self._journal.append(lambda seq: ToolCallEvent(
            seq, self._turn_id, self._step, call.call_id, call.tool, tool_class, args))

    async def record_result(self, call: ToolCallRequest, result: ToolResult) -> None:
        self._journal.append(lambda seq: ToolResultEvent(
            seq, self._turn_id, self._step, call.call_id, result.is_error, result.code,
            result.content, result.details))


class Turn:
    def __init__(self, *, turn_id: str, prompt: str, journal: Journal, provider: Provider,
                 registry: ToolRegistry, definitions: list[ToolDefinition[Any]],
                 config: TurnConfig, history: ModelHistory,
                 on_step: StepListener | None = None,
                 context: ContextSettings | None = None) -> None:
        self.turn_id = turn_id
        self._context = context or ContextSettings()
        self._window = self._context.window
        self._compaction: Compaction | None = None  # the one tried inside this turn
        self._on_step = on_step
        self._history = history
        self._prompt = prompt
        self._journal = journal
        self._provider = provider
        self._registry = registry
        self._schemas = tool_schemas(definitions)
        self._config = config

    async def run(self, signal: AbortSignal) -> TurnEnding:
        """Run to an ending; the caller records ``turn/end``."""
        turn_id = self.turn_id
        self._journal.append(lambda seq: TurnStart(seq, turn_id))
        self._journal.append(lambda seq: UserMessageEvent(seq, turn_id, self._prompt))
        try:
            system = self._config.system_prompt
            with cancel_on_abort(signal):  # a stop abandons the read; the loop then stops
                system = await system_message(self._config.system_prompt,
                                              self._config.workspace)
            for step in range(self._config.max_steps):
                signal.raise_if_aborted()  # step boundary
                if step:
                    await self._compact_if_outgrown(signal)
                request = ModelRequest(system, tuple(self._history.for_turn(turn_id)),
                                       self._schemas)
                signal.raise_if_aborted()  # after prompt assembly
                too_big = self._oversized(request)
                if too_big is not None:
                    return TurnEnding(TurnOutcome("error", error=too_big), "error")
                assembler = await self._stream(request, step, signal)
                self._record_message(assembler, step, interrupted=False)
                if not assembler.tool_calls:
                    return self._ending(signal)
                calls = [ToolCallRequest(c.call_id, c.name, c.args) for c in assembler.tool_calls]
                if self._on_step is not None:
                    self._on_step(turn_id, [(c.call_id, c.tool, self._class_of(c.tool))
                                            for c in calls])
                results = await run_tool_calls(
                    calls, registry=self._registry, signal=signal,
                    recorder=_StepRecorder(self._journal, self._registry, turn_id, step),
                    max_parallel=self._config.max_parallel)
                if any(lost_host(r) for r in results):
                    # Every call has its result; without its host the turn cannot go on.
                    return self._host_lost(calls, results)
            signal.raise_if_aborted()
            return TurnEnding(TurnOutcome("completed"), "max_steps")
        except AbortError as stop:
            return TurnEnding(TurnOutcome("aborted", stop.cause), "cancelled")
        except ProviderError as exc:
            log.warning("turn %s: provider failed: %s", turn_id, exc)
            return TurnEnding(TurnOutcome("error", error=str(exc)), "error")

    async def _compact_if_outgrown(self, signal: AbortSignal) -> None:
        """Before a later step's request: if the history it would carry outgrows its share
        of the window, compact the ended turns before this one (once per turn: a failure
        is not retried, a success leaves nothing to replace) under this turn's signal. A
        stop there is this turn's stop (raised here, after the history stayed as it was or
        was wholly compacted); a failure leaves the history and the turn goes on."""
        if self._compaction is not None or not outgrown_within(
                self._context, self._journal, self._history, self.turn_id):
            return
        self._compaction = job = Compaction("auto")
        await compact(job, self._journal, self._provider, self._history, signal,
                      within=self.turn_id)
        log.info("turn %s: compaction at a step boundary ended %s", self.turn_id, job.outcome)
        signal.raise_if_aborted()

    def _oversized(self, request: ModelRequest) -> str | None:
        """Why the request cannot fit the model's context window (None: it may): said
        plainly, before the provider's own context-length error."""
        if self._window is None:
            return None
        size = request_tokens(request)
        if size <= self._window:
            return None
        failed = self._compaction.error if self._compaction is not None else None
        return (f"the conversation (~{size:,} tokens, estimated) does not fit the model's "
                f"context window ({self._window:,} tokens) even after compaction"
                f"{f' ({failed})' if failed else ''}: start a new session, or set the "
                "provider's contextWindow if the model's is larger")

    @staticmethod
    def _host_lost(calls: list[ToolCallRequest], results: tuple[ToolResult, ...]) -> TurnEnding:
        crashed = [c.call_id for c, r in zip(calls, results, strict=True)
                   if r.code == ErrorCode.HOST_CRASHED.name]
        unsent = [c.call_id for c, r in zip(calls, results, strict=True)
                  if lost_host(r) and r.code != ErrorCode.HOST_CRASHED.name]
        restarted = any(HOST_RESTARTED in r.details for r in results)
        error = (f"{HOST_RESTARTED_ERROR if restarted else HOST_CRASHED_ERROR} "
                 f"{', '.join(crashed) or 'this turn'}")
        if unsent:
            error += f"; never sent: {', '.join(unsent)}"
        return TurnEnding(TurnOutcome("error", error=error), "error")

    def _class_of(self, tool: str) -> str:
        definition = self._registry.definition(tool)
        return definition.tool_class.value if definition is not None else "unknown"

    def _ending(self, signal: AbortSignal) -> TurnEnding:
        # The last checkpoint: a stop that came while the step finished still wins.
        signal.raise_if_aborted()
        return TurnEnding(TurnOutcome("completed"), "end_turn")

    async def _stream(self, request: ModelRequest, step: int, signal: AbortSignal) -> Assembler:
        assembler = Assembler()
        report: UsageReport | None = None
        signal.raise_if_aborted()  # before the stream starts
        # Opening the stream (an HTTP request waiting for headers) is stoppable too.
        with cancel_on_abort(signal):
            async with self._provider.stream(request) as chunks:
                async for chunk in chunks:
                    if signal.aborted:  # on every chunk
                        break
                    if isinstance(chunk, UsageReport):  # not content: the step's usage
                        report = chunk
                        continue
                    assembler.add(chunk)
                    if isinstance(chunk, TextDelta | ReasoningDelta) and chunk.text:
                        self._announce_delta(step, chunk)
                    if assembler.chunks % YIELD_EVERY == 0:
                        # One network read can hold thousands of chunks, all ready: the
                        # other sessions get the loop between batches.
                        await trio.lowlevel.checkpoint()
        if report is not None or assembler.chunks:
            self._record_usage(report, request, assembler, step)
        if signal.aborted:
            self._record_message(assembler, step, interrupted=True)
            signal.raise_if_aborted()
        return assembler

    def _record_usage(self, report: UsageReport | None, request: ModelRequest,
                      assembler: Assembler, step: int) -> None:
        """The step's usage, as reported (or estimated when the provider said nothing)."""
        text = "".join(b.text for b in assembler.blocks)
        usage = usage_of(report, request, text, len(assembler.tool_calls))
        self._journal.append(lambda seq: ModelUsageEvent(seq, self.turn_id, step, usage))

    def _announce_delta(self, step: int, chunk: TextDelta | ReasoningDelta) -> None:
        kind: Literal["text", "reasoning"] = (
            "text" if isinstance(chunk, TextDelta) else "reasoning")
        self._journal.announce(lambda seq: AssistantDeltaEvent(
            seq, self.turn_id, step, kind, chunk.text))

    def _record_message(self, assembler: Assembler, step: int, *, interrupted: bool) -> None:
        blocks = tuple(Block(b.type, b.text, b.signature or None, b.redacted or None)
                       for b in assembler.kept_blocks(interrupted=interrupted))
        if not blocks:  # no visible content: absence itself says the stream showed nothing
            return
        self._journal.append(lambda seq: AssistantMessageEvent(
            seq, self.turn_id, step, blocks, interrupted, assembler.chunks))
