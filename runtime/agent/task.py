"""The runtime-local ``Task`` tool: a child agent turn on the same host.

The child runs one turn (its own turn id, ``<parent turn>~<call id>``, in the
same session log) with the host tools and its own controller. A stop of the
parent reaches it twice, as every stop must: through the call's signal, and
through the stop handler the scheduler's stop walk drives; either aborts the
child with cause ``parent``. The Task result is the child's final text, or an
``ABORTED`` result saying how the child ended.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import trio

from protocol.errors import ErrorCode
from protocol.ids import child_turn_id
from protocol.messages.events import TurnEnd
from protocol.toolclass import ToolClass
from protocol.tools import TaskArgs, ToolResult, aborted_result, error_result, ok_result
from protocol.toolspecs import TOOL_SPECS
from runtime.agent.registry import (
    AbortController,
    ParentCause,
    ToolDefinition,
    ToolExecution,
    define_tool,
)

HOST_CRASHED_ERROR = "the host crashed under"  # how a turn's turn/end names a host crash
HOST_RESTARTED_ERROR = "an operator restarted the host under"  # ... and an operator's restart


# Runs one child turn under the given controller; returns its durable turn/end and text.
ChildRunner = Callable[[str, str, AbortController], Awaitable[tuple[TurnEnd, str]]]


class TaskTool:
    def __init__(self, parent_turn_id: str, run_child: ChildRunner,
                 on_started: Callable[[str], None] | None = None) -> None:
        self._parent = parent_turn_id
        self._run_child = run_child
        self._on_started = on_started  # announces tool/started: its body is running
        self._children: dict[str, AbortController] = {}

    def definition(self) -> ToolDefinition[TaskArgs]:
        return define_tool(
            "Task", args=TaskArgs, tool_class=ToolClass.LOCAL, body=self._body,
            stop=self._stop,
            description=TOOL_SPECS["Task"].description,
            input_schema=TOOL_SPECS["Task"].input_schema())

    async def _stop(self, execution: ToolExecution) -> None:
        child = self._children.get(execution.call_id)
        if child is not None:
            child.abort(ParentCause())

    async def _body(self, args: TaskArgs, execution: ToolExecution) -> ToolResult:
        if self._on_started is not None:
            self._on_started(execution.call_id)
        child_turn = child_turn_id(self._parent, execution.call_id)
        controller = AbortController()
        self._children[execution.call_id] = controller
        try:
            async with trio.open_nursery() as nursery:
                async def follow_parent() -> None:
                    await execution.signal.wait()
                    controller.abort(ParentCause())

                nursery.start_soon(follow_parent)
                end, text = await self._run_child(child_turn, args.prompt, controller)
                nursery.cancel_scope.cancel()
        finally:
            del self._children[execution.call_id]
        details: dict[str, Any] = {"childTurnId": child_turn, "childEnd": end.end.kind}
        if end.end.kind == "aborted":
            return aborted_result(before_dispatch=False, details=details,
                                  extra_text=f"The subagent was stopped. Its partial answer:\n"
                                             f"{text}" if text else "")
        if end.end.kind == "error":
            # A host crash under the child is one under the parent too: its turn ends error.
            code = (ErrorCode.HOST_CRASHED
                    if (end.end.error or "").startswith((HOST_CRASHED_ERROR,
                                                         HOST_RESTARTED_ERROR))
                    else ErrorCode.TOOL_FAILED)
            return error_result(code, f"subagent failed: {end.end.error}",
                                body_invoked=True, details=details)
        return ok_result(text or "(the subagent gave no answer)", details=details)
