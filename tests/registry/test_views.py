"""Stage views and definitions at run time (the static half is test_typing.py)."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from protocol.errors import ErrorCode
from protocol.toolclass import ToolClass
from protocol.tools import ToolResult, ok_result
from runtime.agent.registry import (
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
        with pytest.raises(AttributeError):
            call.signal = other  # type: ignore[misc]
        with pytest.raises(TypeError):
            call.replace_signal(None)  # type: ignore[arg-type]
        assert call.signal is caller.signal  # none of that changed it
        call.replace_signal(other)
        assert call.signal is other
        seen["wrapper"] = True
        return await delegate()

    async def body(args: Args, call: ToolExecution) -> ToolResult:
        with pytest.raises(AttributeError):
            call.signal = other  # type: ignore[misc]
        assert not hasattr(call, "replace_signal")
        seen["body"] = call.signal
        return ok_result("ok")

    tool = define_tool("T", args=Args, tool_class=ToolClass.LOCAL, body=body)
    registry = ToolRegistry([tool], pre_policies=[pre], wrappers=[wrapper])
    result = await registry.execute(request("c1", "T", caller.signal))
    assert result.code is None
    assert seen.keys() == {"pre", "wrapper", "body"}
    assert seen["body"] is not other and seen["body"] is not caller.signal


class Strict(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    pass


class Nested(Strict, frozen=True):
    names: tuple[str, ...]


class Mutable(msgspec.Struct, forbid_unknown_fields=True):
    value: int


class WithList(Strict, frozen=True):
    items: list[int]


class WithDict(Strict, frozen=True):
    extra: dict[str, int]


class WithNestedMutable(Strict, frozen=True):
    inner: Mutable | None = None


class Loose(msgspec.Struct, frozen=True):
    value: int = 0


class WithNestedLoose(Strict, frozen=True):
    inner: Loose | None = None


class Good(Strict, frozen=True):
    nested: Nested
    maybe: int | None = None
    pairs: tuple[tuple[str, int], ...] = ()
    flags: frozenset[str] = frozenset()


def test_define_tool_requires_deeply_immutable_strict_arguments() -> None:
    good = define_tool("G", args=Good, tool_class=ToolClass.READ_ONLY, body=_good_body)
    assert good.args_type is Good
    for bad in (Mutable, WithList, WithDict, WithNestedMutable, Loose, WithNestedLoose):
        with pytest.raises(TypeError):
            define_tool("B", args=bad, tool_class=ToolClass.LOCAL, body=_any_body)


async def test_unknown_fields_are_invalid_arguments_at_every_depth() -> None:
    registry = ToolRegistry([define_tool("G", args=Good, tool_class=ToolClass.READ_ONLY,
                                         body=_good_body)])
    signal = AbortController().signal
    ok = await registry.execute(request("c1", "G", signal, args={"nested": {"names": ["a"]}}))
    assert ok.code is None
    for raw in ({"nested": {"names": []}, "typo": 1}, {"nested": {"names": [], "typo": 1}}):
        result = await registry.execute(request("c2", "G", signal, args=raw))
        assert result.code == ErrorCode.INVALID_PARAMS.name and "typo" in result.content[0].text  # type: ignore[union-attr]


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
