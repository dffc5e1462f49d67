"""Deeply read-only JSON values, for the ``details`` of a published result.

A published ``ToolResult`` is one object shared by the caller, the recorder (the
session log) and every result observer. The Struct itself is frozen, but its
``details`` is JSON (dicts and lists), so the registry publishes it as
``FrozenDict`` / ``FrozenList``: subclasses of ``dict`` / ``list`` (they compare
equal to plain ones and encode as the same JSON) whose mutating methods raise
``TypeError``. Nothing that looks at a published result can change what was
recorded; whoever wants a variant builds a new dict (``{**details, ...}``).
The one gap, empty ``details`` (see ``freeze_result``), is closed for result
observers by handing them ``sealed(result)``.
"""

from __future__ import annotations

from typing import Any, NoReturn

import msgspec

from protocol.tools import ToolResult

__all__ = ["FrozenDict", "FrozenList", "freeze", "freeze_result", "sealed"]


def _refuse(container: object) -> NoReturn:
    raise TypeError(f"{type(container).__name__}: a published result cannot be changed")


class FrozenDict(dict[str, Any]):
    """A ``dict`` that refuses every change after construction."""

    __slots__ = ()

    def __setitem__(self, *args: Any, **kwargs: Any) -> NoReturn:
        _refuse(self)

    def __delitem__(self, *args: Any, **kwargs: Any) -> NoReturn:
        _refuse(self)

    def __ior__(self, other: Any) -> NoReturn:  # type: ignore[misc]  # refuses, unlike |
        _refuse(self)

    def clear(self, *args: Any, **kwargs: Any) -> NoReturn:
        _refuse(self)

    def pop(self, *args: Any, **kwargs: Any) -> NoReturn:
        _refuse(self)

    def popitem(self, *args: Any, **kwargs: Any) -> NoReturn:
        _refuse(self)

    def setdefault(self, *args: Any, **kwargs: Any) -> NoReturn:
        _refuse(self)

    def update(self, *args: Any, **kwargs: Any) -> NoReturn:
        _refuse(self)

    def __reduce__(self) -> tuple[type[FrozenDict], tuple[dict[str, Any]]]:
        # copy/deepcopy/pickle rebuild through the constructor, not item by item
        return (FrozenDict, (dict(self),))


class FrozenList(list[Any]):
    """A ``list`` that refuses every change after construction."""

    __slots__ = ()

    def __setitem__(self, *args: Any, **kwargs: Any) -> NoReturn:
        _refuse(self)

    def __delitem__(self, *args: Any, **kwargs: Any) -> NoReturn:
        _refuse(self)

    def __iadd__(self, other: Any) -> NoReturn:  # type: ignore[misc]  # refuses, unlike +
        _refuse(self)

    def __imul__(self, other: Any) -> NoReturn:  # type: ignore[misc]  # refuses, unlike *
        _refuse(self)

    def append(self, *args: Any, **kwargs: Any) -> NoReturn:
        _refuse(self)

    def extend(self, *args: Any, **kwargs: Any) -> NoReturn:
        _refuse(self)

    def insert(self, *args: Any, **kwargs: Any) -> NoReturn:
        _refuse(self)

    def pop(self, *args: Any, **kwargs: Any) -> NoReturn:
        _refuse(self)

    def remove(self, *args: Any, **kwargs: Any) -> NoReturn:
        _refuse(self)

    def clear(self, *args: Any, **kwargs: Any) -> NoReturn:
        _refuse(self)

    def sort(self, *args: Any, **kwargs: Any) -> NoReturn:
        _refuse(self)

    def reverse(self, *args: Any, **kwargs: Any) -> NoReturn:
        _refuse(self)

    def __reduce__(self) -> tuple[type[FrozenList], tuple[list[Any]]]:
        return (FrozenList, (list(self),))


def freeze(value: Any) -> Any:
    """``value`` with every dict and list (recursively) made read-only; scalars as they are."""
    if isinstance(value, dict):
        return FrozenDict({key: freeze(item) for key, item in value.items()})
    if isinstance(value, list):
        return FrozenList(freeze(item) for item in value)
    return value


def freeze_result(result: ToolResult) -> ToolResult:
    """``result`` with deeply read-only ``details`` (the rest of a ToolResult is frozen).

    One exception: empty ``details`` stay the plain ``{}``, because msgspec omits a
    default only when it is an exact empty ``dict``, and the wire shape of a result
    (``details`` absent when empty) is part of the contract. Hand such a result to
    code that must not change it through ``sealed(result)``.
    """
    if not result.details:
        return msgspec.structs.replace(result, details={})
    return msgspec.structs.replace(result, details=freeze(result.details))


def sealed(result: ToolResult) -> ToolResult:
    """A published ``result`` as others may see it: its own ``FrozenDict`` even when empty."""
    if isinstance(result.details, FrozenDict):
        return result  # frozen by freeze_result all the way down
    return msgspec.structs.replace(result, details=freeze(result.details))
