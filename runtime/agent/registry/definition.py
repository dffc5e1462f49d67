"""Tool definitions and ``define_tool``.

A definition names a tool, its class (what a stop does to it across the process
boundary), whether it may share the scheduler's parallel pool, the frozen
msgspec Struct its arguments materialize into, and its body
``async (args, exec) -> ToolResult``. ``exec`` is a read-only ``ToolExecution``
whose ``signal`` is a required ``AbortSignal``: a body defined through
``define_tool`` (even as a lambda) sees it typed that way, with no cast.

Optional parts: ``final_content(result) -> content``, a content-only callback the
registry runs on every candidate result, aborts included, before publishing it;
and ``stop(exec)``, which the scheduler's stop walk runs directly for a call
whose body was invoked (for a host tool: send ``tools.abort``). A stop handler
is cancelled if it is still running when its call settles, and an exception it
raises is logged, not propagated (``ToolCall.stop``).

Arguments must be deeply immutable and materialize losslessly, so the argument
Struct is checked when the tool is defined: frozen Structs that forbid unknown
fields (an unknown or mistyped argument is an error, never silently dropped),
tuples, frozensets and immutable scalars only.
A tool whose arguments are free-form JSON validated by the tool itself (a
plugin's) takes ``JsonObjectArgs`` (the object frozen as its JSON text) and
gives the model its own ``input_schema``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import msgspec
import msgspec.inspect as mi

from protocol.toolclass import ToolClass
from protocol.tools import Content, ToolResult
from runtime.agent.registry.views import ToolExecution

__all__ = ["Body", "FinalContent", "JsonObjectArgs", "StopHandler", "ToolDefinition",
           "define_tool"]

A = TypeVar("A", bound=msgspec.Struct)

Body = Callable[[A, ToolExecution], Awaitable[ToolResult]]
FinalContent = Callable[[ToolResult], tuple[Content, ...]]
StopHandler = Callable[[ToolExecution], Awaitable[None]]


class JsonObjectArgs(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Free-form arguments: any JSON object, frozen as its JSON text."""

    json: str

    @classmethod
    def materialize(cls, raw: Any) -> JsonObjectArgs:
        """From an object or JSON text; a ``ValidationError`` unless it is an object
        that its JSON text represents exactly (no NaN or infinity, which JSON would
        turn into ``null``; no non-string keys; lists, not tuples)."""
        value = msgspec.json.decode(raw) if isinstance(raw, bytes | str) else raw
        if not isinstance(value, dict):
            raise msgspec.ValidationError(
                f"Expected `object`, got `{type(value).__name__}`")
        try:
            text = msgspec.json.encode(value)
        except (TypeError, RecursionError) as exc:  # a value with no JSON form, or a cycle
            raise msgspec.ValidationError(str(exc)) from exc
        if msgspec.json.decode(text) != value:
            raise msgspec.ValidationError(
                "arguments must survive their JSON form unchanged "
                "(no NaN or infinite numbers, non-string keys or tuples)")
        return cls(text.decode())

    def value(self) -> dict[str, Any]:
        decoded: dict[str, Any] = msgspec.json.decode(self.json)
        return decoded


@dataclass(frozen=True, slots=True)
class ToolDefinition(Generic[A]):
    name: str
    tool_class: ToolClass
    exclusive: bool
    args_type: type[A]
    body: Body[A]
    final_content: FinalContent | None = None
    stop: StopHandler | None = None
    description: str = ""
    input_schema: dict[str, Any] | None = None
    """The JSON schema the model is given; ``None``: derived from ``args_type``."""


def define_tool(
    name: str,
    *,
    args: type[A],
    tool_class: ToolClass,
    body: Body[A],
    exclusive: bool | None = None,
    final_content: FinalContent | None = None,
    stop: StopHandler | None = None,
    description: str = "",
    input_schema: dict[str, Any] | None = None,
) -> ToolDefinition[A]:
    """Define a tool. ``exclusive`` defaults to ``True`` except for read-only tools.

    Raises ``TypeError`` if ``args`` is not a deeply immutable msgspec Struct whose
    Structs all forbid unknown fields.
    """
    if not name:
        raise ValueError("a tool needs a name")
    _check_immutable(mi.type_info(args), f"{name} arguments", set())
    if exclusive is None:
        exclusive = tool_class is not ToolClass.READ_ONLY
    return ToolDefinition(name=name, tool_class=tool_class, exclusive=exclusive, args_type=args,
                          body=body, final_content=final_content, stop=stop,
                          description=description, input_schema=input_schema)


_IMMUTABLE_LEAVES = (
    mi.NoneType, mi.BoolType, mi.IntType, mi.FloatType, mi.StrType, mi.BytesType,
    mi.DateTimeType, mi.DateType, mi.TimeType, mi.TimeDeltaType, mi.UUIDType, mi.DecimalType,
    mi.LiteralType, mi.EnumType,
)


def _check_immutable(t: mi.Type, where: str, seen: set[type]) -> None:
    if isinstance(t, _IMMUTABLE_LEAVES):
        return
    if isinstance(t, mi.Metadata):
        _check_immutable(t.type, where, seen)
    elif isinstance(t, mi.UnionType):
        for member in t.types:
            _check_immutable(member, where, seen)
    elif isinstance(t, mi.TupleType):
        for item in t.item_types:
            _check_immutable(item, where, seen)
    elif isinstance(t, mi.VarTupleType | mi.FrozenSetType):
        _check_immutable(t.item_type, where, seen)
    elif isinstance(t, mi.StructType):
        if t.cls in seen:
            return
        seen.add(t.cls)
        config = t.cls.__struct_config__
        if not config.frozen:
            raise TypeError(f"{where}: {t.cls.__qualname__} must be a frozen Struct")
        if not config.forbid_unknown_fields:  # else a mistyped argument is silently dropped
            raise TypeError(f"{where}: {t.cls.__qualname__} must forbid unknown fields")
        for field in t.fields:
            _check_immutable(field.type, f"{where}.{field.name}", seen)
    else:
        raise TypeError(f"{where}: {type(t).__name__} is mutable or not allowed in arguments; "
                        "use frozen Structs, tuples, frozensets and scalars")
