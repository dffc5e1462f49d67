"""Lossless JSON forms of a tool call: its arguments materialized into the tool's Struct, its
result snapshotted, each refused unless the JSON round trip gives it back unchanged.

Both exist so that what the registry hands on is exactly what the wire and the log hold: the
arguments the body sees are those the host and the model would read back, and the published
result is the one the log records (no NaN turned ``null``, no tuple turned a list).
"""

from __future__ import annotations

from typing import Any

import msgspec

from protocol.tools import ToolResult
from runtime.agent.registry.definition import JsonObjectArgs
from runtime.agent.registry.frozen import freeze_result


def materialize_args(raw: Any, args_type: type[msgspec.Struct]) -> msgspec.Struct:
    """A fresh, frozen copy of the arguments in the tool's Struct (JSON text or objects).

    Objects must survive the JSON form unchanged (JSON text always does): a NaN or
    an infinity would reach the host, the log and the model as ``null``.
    """
    if issubclass(args_type, JsonObjectArgs):
        return args_type.materialize(raw)
    if isinstance(raw, bytes | str):
        return msgspec.json.decode(raw, type=args_type)
    args = msgspec.convert(raw, type=args_type)
    try:
        lossless = msgspec.json.decode(msgspec.json.encode(args), type=args_type) == args
    except msgspec.ValidationError:
        lossless = False
    if not lossless:
        raise msgspec.ValidationError(
            "arguments must survive their JSON form unchanged (no NaN or infinite numbers)")
    return args


def snapshot_result(result: ToolResult) -> ToolResult:
    """A deeply frozen copy of ``result`` through its wire form; raises unless lossless.

    Lossy values (NaN, tuples, non-string keys, bytes: JSON turns them into
    something else) would make the published result differ from the one the log
    holds, so they fail the snapshot instead of being silently converted.
    """
    if not isinstance(result, ToolResult):
        raise TypeError(f"a tool result must be a ToolResult, not {type(result).__name__}")
    copy = msgspec.json.decode(msgspec.json.encode(result), type=ToolResult)
    if copy != result:
        raise ValueError("the result does not survive its JSON form unchanged "
                         "(NaN or infinity, a tuple, a non-string key or bytes in details?)")
    return freeze_result(copy)
