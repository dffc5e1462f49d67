"""Stop causes at the client boundary: the wire's ``{kind, reason}`` to the registry's types."""

from __future__ import annotations

from protocol.errors import ErrorCode, RpcError
from protocol.messages.events import Cause as WireCause
from runtime.registry import (
    Cause,
    DisposedCause,
    HookCause,
    OperatorCause,
    ParentCause,
    UserCause,
)


def from_wire(cause: WireCause) -> Cause:
    if cause.kind == "hook":
        if not cause.reason:
            raise RpcError(ErrorCode.INVALID_PARAMS, "a hook cause needs a reason")
        return HookCause(cause.reason)
    if cause.kind == "parent":
        return ParentCause()
    if cause.kind == "disposed":
        return DisposedCause()
    if cause.kind == "operator":
        return OperatorCause()
    return UserCause()
