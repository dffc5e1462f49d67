"""Fake tools, policies and a recorder for the registry tests."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import msgspec
import trio

from protocol.toolclass import ToolClass
from protocol.tools import ToolResult, ok_result
from runtime.agent.registry import (
    AbortController,
    AbortSignal,
    StopHandler,
    ToolCallRequest,
    ToolDefinition,
    ToolExecution,
    ToolExecutionInput,
    ToolRegistry,
    UserCause,
    cancel_on_abort,
    define_tool,
)


class Args(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    value: int = 0
    tags: tuple[str, ...] = ()


@dataclass
class BodyLog:
    """What fake bodies did: invocations (with the state seen on entry) and settlements."""

    invoked: list[str] = field(default_factory=list)
    finished: list[str] = field(default_factory=list)
    signals: dict[str, AbortSignal] = field(default_factory=dict)
    aborted_on_entry: dict[str, bool] = field(default_factory=dict)  # the body's signal
    running: int = 0
    max_running: int = 0
    exclusive_overlap: bool = False
    exclusive_running: int = 0
    started_at: dict[str, float] = field(default_factory=dict)
    finished_at: dict[str, float] = field(default_factory=dict)

    def enter(self, call: ToolExecution, *, exclusive: bool) -> None:
        self.invoked.append(call.call_id)
        self.started_at[call.call_id] = trio.current_time()
        self.signals[call.call_id] = call.signal
        self.aborted_on_entry[call.call_id] = call.signal.aborted
        self.running += 1
        self.max_running = max(self.max_running, self.running)
        if exclusive:
            self.exclusive_running += 1
        if self.exclusive_running and self.running > 1:
            self.exclusive_overlap = True

    def leave(self, call: ToolExecution, *, exclusive: bool) -> None:
        self.running -= 1
        if exclusive:
            self.exclusive_running -= 1
        self.finished.append(call.call_id)
        self.finished_at[call.call_id] = trio.current_time()


Behaviour = Callable[[Args, ToolExecution], Awaitable[ToolResult]]


def cooperative(seconds: float, text: str = "done") -> Behaviour:
    """Works for ``seconds`` but stops at once when its signal aborts."""

    async def body(args: Args, call: ToolExecution) -> ToolResult:
        with cancel_on_abort(call.signal):
            await trio.sleep(seconds)
        call.signal.raise_if_aborted()
        return ok_result(text, details={"value": args.value})

    return body


def uncooperative(seconds: float, text: str = "done") -> Behaviour:
    """Works for ``seconds`` whatever its signal says."""

    async def body(args: Args, call: ToolExecution) -> ToolResult:
        await trio.sleep(seconds)
        return ok_result(text, details={"value": args.value})

    return body


def logged_tool(name: str, behaviour: Behaviour, log: BodyLog, *, exclusive: bool = False,
                stop: StopHandler | None = None, tool_class: ToolClass = ToolClass.LOCAL,
                **extra: Any) -> ToolDefinition[Args]:
    async def body(args: Args, call: ToolExecution) -> ToolResult:
        log.enter(call, exclusive=exclusive)
        try:
            return await behaviour(args, call)
        finally:
            log.leave(call, exclusive=exclusive)

    return define_tool(name, args=Args, tool_class=tool_class, body=body, exclusive=exclusive,
                       stop=stop, **extra)


class RecorderFailure(Exception):
    pass


class MemoryRecorder:
    """Records ``("call", id)`` and ``("result", id)`` in order; can fail on a chosen record."""

    def __init__(self, fail_on: tuple[str, str] | None = None) -> None:
        self.records: list[tuple[str, str]] = []
        self.results: dict[str, ToolResult] = {}
        self.fail_on = fail_on

    async def record_call(self, call: ToolCallRequest) -> None:
        await trio.lowlevel.checkpoint()
        self._maybe_fail("call", call.call_id)
        self.records.append(("call", call.call_id))

    async def record_result(self, call: ToolCallRequest, result: ToolResult) -> None:
        await trio.lowlevel.checkpoint()
        self._maybe_fail("result", call.call_id)
        assert call.call_id not in self.results, f"second result for {call.call_id}"
        self.records.append(("result", call.call_id))
        self.results[call.call_id] = result

    def _maybe_fail(self, kind: str, call_id: str) -> None:
        if self.fail_on == (kind, call_id):
            raise RecorderFailure(f"cannot record {kind} {call_id}")


def request(call_id: str, tool: str, signal: AbortSignal, args: Any = None) -> ToolExecutionInput:
    return ToolExecutionInput(call_id=call_id, tool=tool, args={} if args is None else args,
                              signal=signal)


def calls(*tools: str) -> list[ToolCallRequest]:
    return [ToolCallRequest(call_id=f"c{i}", tool=tool, args={"value": i})
            for i, tool in enumerate(tools)]


async def abort_at(seconds: float, controller: AbortController, cause: Any) -> None:
    await trio.sleep_until(seconds)
    controller.abort(cause)


def code(result: ToolResult) -> str | None:
    return result.code


def all_tasks() -> set[trio.lowlevel.Task]:
    """Every task of the current trio run."""
    found: set[trio.lowlevel.Task] = set()
    root = trio.lowlevel.current_root_task()
    assert root is not None
    pending = [root]
    while pending:
        task = pending.pop()
        found.add(task)
        for nursery in task.child_nurseries:
            pending.extend(nursery.child_tasks)
    return found


async def execute_with_stop(registry: ToolRegistry, at: float, *, tool: str = "T",
                            controller: AbortController | None = None) -> ToolResult:
    """Execute call ``c1`` of ``tool`` while the caller stops (cause ``user``) at time ``at``."""
    controller = controller or AbortController()
    result: list[ToolResult] = []
    async with trio.open_nursery() as nursery:

        async def stop() -> None:
            await trio.sleep(at)
            controller.abort(UserCause())

        nursery.start_soon(stop)
        result.append(await registry.execute(request("c1", tool, controller.signal)))
        nursery.cancel_scope.cancel()
    return result[0]
