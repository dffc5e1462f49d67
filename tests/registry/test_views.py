"""Stage views and definitions at run time (the static half is test_typing.py)."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from protocol.toolclass import ToolClass
from protocol.tools import ToolResult, ok_result
from runtime.registry import (
    AbortController,
    Allow,
    Delegate,
    ToolDispatchExecution,
    ToolExecution,
    ToolRegistry,
    define_tool,
)
from tests.registry.fakes import Args, request


async def echo(args: Args, call: ToolExecution) -> ToolResult:
    return ok_result("echo")


async def test_views_refuse_writes_and_the_dispatch_view_refuses_deletion() -> None:
    caller = AbortController()
    other = AbortController().signal
    seen: dict[str, Any] = {}

    async def pre(call: ToolExecution) -> Allow:
        with pytest.raises(AttributeError):
            call.signal = other  # type: ignore[misc]
        with pytest.raises(AttributeError):
            call.call_id = "x"  # type: ignore[misc]
        with pytest.raises(AttributeError):
            call.extra = 1  # type: ignore[attr-defined]
        seen["pre"] = True
        return Allow()

    async def wrapper(call: ToolDispatchExecution, delegate: Delegate) -> ToolResult:
        with pytest.raises(AttributeError):
            del call.signal
        call.signal = other
        assert call.signal is other
        seen["wrapper"] = True
        return await delegate()

    async def body(args: Args, call: ToolExecution) -> ToolResult:
        with pytest.raises(AttributeError):
            call.signal = other  # type: ignore[misc]
        seen["body"] = call.signal
        return ok_result("ok")

    tool = define_tool("T", args=Args, tool_class=ToolClass.LOCAL, body=body)
    registry = ToolRegistry([tool], pre_policies=[pre], wrappers=[wrapper])
    result = await registry.execute(request("c1", "T", caller.signal))
    assert result.code is None
    assert seen.keys() == {"pre", "wrapper", "body"}
    assert seen["body"] is not other and seen["body"] is not caller.signal


class Nested(msgspec.Struct, frozen=True):
    names: tuple[str, ...]


class Mutable(msgspec.Struct):
    value: int


class WithList(msgspec.Struct, frozen=True):
    items: list[int]


class WithDict(msgspec.Struct, frozen=True):
    extra: dict[str, int]


class WithNestedMutable(msgspec.Struct, frozen=True):
    inner: Mutable | None = None


class Good(msgspec.Struct, frozen=True):
    nested: Nested
    maybe: int | None = None
    pairs: tuple[tuple[str, int], ...] = ()
    flags: frozenset[str] = frozenset()


def test_define_tool_requires_deeply_immutable_arguments() -> None:
    good = define_tool("G", args=Good, tool_class=ToolClass.READ_ONLY, body=_good_body)
    assert good.args_type is Good
    for bad in (Mutable, WithList, WithDict, WithNestedMutable):
        with pytest.raises(TypeError):
            define_tool("B", args=bad, tool_class=ToolClass.LOCAL, body=_any_body)


async def _good_body(args: Good, call: ToolExecution) -> ToolResult:
    return ok_result("")


async def _any_body(args: Any, call: ToolExecution) -> ToolResult:
    return ok_result("")


def test_exclusive_defaults_by_class_and_can_be_overridden() -> None:
    assert not define_tool("R", args=Args, tool_class=ToolClass.READ_ONLY, body=echo).exclusive
    for cls in (ToolClass.MUTATING, ToolClass.PROCESS, ToolClass.PLUGIN, ToolClass.LOCAL):
        assert define_tool("X", args=Args, tool_class=cls, body=echo).exclusive
    assert not define_tool("P", args=Args, tool_class=ToolClass.PROCESS, body=echo,
                           exclusive=False).exclusive
    registry = ToolRegistry([define_tool("W", args=Args, tool_class=ToolClass.MUTATING,
                                         body=echo)])
    assert registry.is_exclusive("W") and not registry.is_exclusive("Nope")
    with pytest.raises(ValueError):
        registry.register(define_tool("W", args=Args, tool_class=ToolClass.LOCAL, body=echo))
