"""Why a stop happened: a small frozen tagged union.

A cause is durable (``turn/end`` records it as its ``reason``), so it is a frozen
msgspec Struct tagged by ``kind``; ``msgspec.json.encode(HookCause("lint"))`` is
``{"kind":"hook","reason":"lint"}``. The kinds are the wire's ``AbortCause``
literals (``protocol.messages.host``), so a cause maps onto ``tools.abort``
without a table.
"""

from __future__ import annotations

from typing import Literal

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
    """A policy hook stopped the activity, for ``reason``."""

    reason: str


class DisposedCause(_Cause, frozen=True, tag="disposed"):
    """The owner is being shut down."""


class OperatorCause(_Cause, frozen=True, tag="operator"):
    """Operator tooling (``quiesce ops``) stopped it."""


class TimeoutCause(_Cause, frozen=True, tag="timeout"):
    """A deadline owned by the timeout policy passed after ``seconds``."""

    seconds: float


Cause = UserCause | ParentCause | HookCause | DisposedCause | OperatorCause | TimeoutCause
"""Every cause; decode one with ``msgspec.json.decode(data, type=Cause)``."""
