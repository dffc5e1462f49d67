"""Why a stop happened: the registry uses the protocol's one cause type.

The tagged union lives in ``protocol.causes`` (it is durable and crosses both links);
it is re-exported here so the registry's users keep one import place.
"""

from __future__ import annotations

from protocol.causes import (
    Cause,
    CauseKind,
    DisposedCause,
    HookCause,
    OperatorCause,
    ParentCause,
    TimeoutCause,
    UserCause,
)

__all__ = [
    "Cause",
    "CauseKind",
    "DisposedCause",
    "HookCause",
    "OperatorCause",
    "ParentCause",
    "TimeoutCause",
    "UserCause",
]
