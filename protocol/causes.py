"""Why a stop happened: the one cause type of the registry, both links and the log.

A cause is a frozen msgspec Struct tagged by ``kind``:
``msgspec.json.encode(HookCause("lint"))`` is ``{"kind":"hook","reason":"lint"}``.
The same Structs are what the registry's signals carry, what ``agent.abort`` takes,
what ``turn/end`` records as its ``reason`` and what ``tools.abort`` sends the host,
so no layer converts them.

``timeout`` is decided here, once: it is its own kind, ``{"kind":"timeout",
"seconds":2.5}``, everywhere (a deadline owned by the registry's timeout policy; a
client cannot send it, see ``ClientCause``). Logs written before it had a kind of its
own recorded such a stop as ``{"kind":"hook","reason":"timeout"}``; those still load,
as the ``HookCause`` they say.
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

CauseKind = Literal["user", "parent", "hook", "disposed", "operator", "timeout"]


class _Cause(msgspec.Struct, frozen=True, forbid_unknown_fields=True, tag_field="kind"):
    @property
    def kind(self) -> CauseKind:
        tag: CauseKind = type(self).__struct_config__.tag  # type: ignore[assignment]
        return tag


class UserCause(_Cause, frozen=True, tag="user"):
    """A person pressed Stop."""


class ParentCause(_Cause, frozen=True, tag="parent"):
    """A parent agent stopped this subagent."""


class HookCause(_Cause, frozen=True, tag="hook"):
    """A policy hook stopped the activity, for ``reason`` (not empty)."""

    reason: Annotated[str, msgspec.Meta(min_length=1)]


class DisposedCause(_Cause, frozen=True, tag="disposed"):
    """The owner is being shut down (``session.close``, the daemon's shutdown)."""


class OperatorCause(_Cause, frozen=True, tag="operator"):
    """Operator tooling (``quiesce ops``) stopped it."""


class TimeoutCause(_Cause, frozen=True, tag="timeout"):
    """A deadline owned by the timeout policy passed after ``seconds``."""

    seconds: float


ClientCause = UserCause | ParentCause | HookCause | DisposedCause | OperatorCause
"""The causes a client may name in ``agent.abort``."""

Cause = UserCause | ParentCause | HookCause | DisposedCause | OperatorCause | TimeoutCause
"""Every cause; decode one with ``msgspec.json.decode(data, type=Cause)``."""


def cause_of(kind: CauseKind, reason: str | None = None, *, seconds: float = 0.0) -> Cause:
    """The cause of ``kind`` (for callers holding a kind string, such as ACP's
    ``session/cancel``); ``hook`` needs ``reason``; ``reason`` is ignored elsewhere."""
    if kind == "hook":
        if not reason:
            raise ValueError("a hook cause needs a reason")
        return HookCause(reason)
    if kind == "timeout":
        return TimeoutCause(seconds)
    simple: dict[str, Cause] = {"user": UserCause(), "parent": ParentCause(),
                                "disposed": DisposedCause(), "operator": OperatorCause()}
    return simple[kind]


__all__ = [
    "Cause",
    "CauseKind",
    "ClientCause",
    "DisposedCause",
    "HookCause",
    "OperatorCause",
    "ParentCause",
    "TimeoutCause",
    "UserCause",
    "cause_of",
]
