"""The tool registry: definitions plus the stages run around every body.

``execute(input)`` runs one call and returns its one frozen result; the
scheduler uses the two halves, ``prepare(input)`` (the call token, so it can
drive the call's stop handler) and ``ToolCall.run()``. There is no overload or
convenience path without a caller's signal.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from protocol.tools import ToolResult
from runtime.agent.registry.definition import ToolDefinition
from runtime.agent.registry.pipeline import Stages, ToolCall
from runtime.agent.registry.policies import (
    Approval,
    DispatchWrapper,
    PostPolicy,
    PrePolicy,
    ResultObserver,
)
from runtime.agent.registry.views import ToolExecutionInput

__all__ = ["ToolRegistry"]


class ToolRegistry:
    def __init__(
        self,
        tools: Iterable[ToolDefinition[Any]] = (),
        *,
        pre_policies: Sequence[PrePolicy] = (),
        approval: Approval | None = None,
        wrappers: Sequence[DispatchWrapper] = (),
        post_policies: Sequence[PostPolicy] = (),
        observers: Sequence[ResultObserver] = (),
    ) -> None:
        """``wrappers`` run outermost first: ``wrappers[0]`` delegates to ``wrappers[1]``."""
        self._tools: dict[str, ToolDefinition[Any]] = {}
        self._stages = Stages(tuple(pre_policies), approval, tuple(wrappers),
                              tuple(post_policies), tuple(observers))
        for tool in tools:
            self.register(tool)

    def register(self, definition: ToolDefinition[Any]) -> None:
        if definition.name in self._tools:
            raise ValueError(f"tool {definition.name!r} is already registered")
        self._tools[definition.name] = definition

    def definition(self, name: str) -> ToolDefinition[Any] | None:
        return self._tools.get(name)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self._tools)

    def is_exclusive(self, name: str) -> bool:
        """Whether a call of ``name`` is a scheduling barrier (unknown tools are not:
        they end with an error before any stage runs)."""
        definition = self._tools.get(name)
        return definition is not None and definition.exclusive

    def prepare(self, request: ToolExecutionInput) -> ToolCall:
        """Make the call token: snapshot the definition, materialize the arguments."""
        return ToolCall(request, self._tools.get(request.tool), self._stages)

    async def execute(self, request: ToolExecutionInput) -> ToolResult:
        """Run one call through every stage; its one frozen, authoritative result."""
        return await self.prepare(request).run()
