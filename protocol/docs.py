"""Render the protocol reference (``docs/protocol.md``) from the protocol's types."""

from __future__ import annotations

import inspect
from typing import Any

import msgspec
import msgspec.inspect as mi

from protocol.bounds import MARKER, MAX_BATCH_MEMBERS
from protocol.errors import ERROR_MESSAGES, ErrorCode
from protocol.framing import DEFAULT_MAX_FRAME_SIZE
from protocol.methods import DIRECTIONS
from protocol.toolclass import TOOL_CLASSES
from protocol.tools import TOOL_ARGS, ToolResult
from protocol.version import PROTOCOL_VERSION


def _type_name(t: mi.Type) -> str:
    if isinstance(t, mi.StructType):
        return t.cls.__name__
    if isinstance(t, mi.UnionType):
        return " \\| ".join(_type_name(x) for x in t.types)
    if isinstance(t, mi.LiteralType):
        return " \\| ".join(f"`{v!r}`".replace("'", '"') for v in t.values)
    if isinstance(t, mi.ListType | mi.VarTupleType):
        return f"array of {_type_name(t.item_type)}"
    if isinstance(t, mi.DictType):
        return f"object of {_type_name(t.value_type)}"
    names = {mi.StrType: "string", mi.IntType: "integer", mi.BoolType: "boolean",
             mi.FloatType: "number", mi.NoneType: "null", mi.AnyType: "any"}
    for cls, name in names.items():
        if isinstance(t, cls):
            return name
    return type(t).__name__.removesuffix("Type").lower()


def _default(field: mi.Field, always_sent: bool) -> str:
    if field.required:
        return "required"
    sent = ", always sent" if always_sent else ""
    if field.default is not msgspec.NODEFAULT:
        return f"default `{msgspec.json.encode(field.default).decode()}`{sent}"
    return f"optional{sent}"


def _struct_table(cls: type[Any]) -> list[str]:
    """The type's own docstring (if any), then its fields."""
    doc = cls.__dict__.get("__doc__")
    about = [inspect.cleandoc(doc).replace("``", "`"), ""] if doc else []
    info = mi.type_info(cls)
    assert isinstance(info, mi.StructType)
    if not info.fields:
        return [*about, "*(no fields)*", ""]
    always_sent = not cls.__struct_config__.omit_defaults
    lines = ["| field | type | |", "|---|---|---|"]
    for f in info.fields:
        lines.append(f"| `{f.encode_name}` | {_type_name(f.type)} | "
                     f"{_default(f, always_sent)} |")
    return [*about, *lines, ""]


def _nested_structs(cls: type[Any], seen: set[type[Any]]) -> list[type[Any]]:
    found: list[type[Any]] = []

    def walk(t: mi.Type) -> None:
        if isinstance(t, mi.StructType):
            if t.cls not in seen:
                seen.add(t.cls)
                found.append(t.cls)
                for f in t.fields:
                    walk(f.type)
        elif isinstance(t, mi.UnionType):
            for x in t.types:
                walk(x)
        elif isinstance(t, mi.ListType | mi.VarTupleType):
            walk(t.item_type)
        elif isinstance(t, mi.DictType):
            walk(t.value_type)

    info = mi.type_info(cls)
    assert isinstance(info, mi.StructType)
    for f in info.fields:
        walk(f.type)
    return found


def _order_and_bounds() -> list[str]:
    """The ordering rule and the wire's bounds (``protocol.bounds``), for every link."""
    return [
        "## Order and bounds", "",
        "These hold on every link: client → runtime (and ACP), ops → runtime, runtime → "
        "host, host → runtime.", "",
        "**Requests take effect in wire order.** A request's effect on state (the "
        "handshake; opening, loading or closing a session; a prompt accepted; a stop's "
        "cause recorded and the stop started; a host call registered) happens before that "
        "of any frame after it, so a client may pipeline: `agent.prompt` and `agent.abort` "
        "written together stop exactly that prompt's turn, before its first step (a "
        "turn's first step waits until the link has taken every frame already read). "
        "Answers come back in any order, and a request that waits (a prompt until its turn "
        "ends, an abort until its stop settles) never holds up the frames after it. "
        "A request on a session that must wait (behind a `session.load` or `session.close` "
        "of it still in progress) keeps its place: it takes its effect right after the "
        "request before it on that session; behind a close, once the close's stop has "
        "started (a prompt is then refused, an abort joins that stop).", "",
        f"**Batches** have at most {MAX_BATCH_MEMBERS} members. A longer one is answered "
        "with one -32600 (id null) naming the limit, decided while reading it: its members "
        "are not handled. A batch's members are handled like separate requests, one after "
        "the other (the same order rule); their answers come back together, as one array, "
        "or as several arrays when one would exceed the frame limit.", "",
        f"**Frames** are at most {DEFAULT_MAX_FRAME_SIZE} bytes both ways. No link writes "
        "a larger one: an answer that would be is replaced by a -32603 error saying so; a "
        "request that would be is not sent (the caller gets the error); a notification "
        "that would be (a `session.event` announcing a 9 MiB `Write`) has its longest "
        "strings shortened, each ending in `" + MARKER.format("N") + "` (N: the bytes of "
        "UTF-8 left out). Only the announcement is shortened: the session log keeps the "
        "whole record.", "",
        "**Lone surrogates.** A `\\uD800` to `\\uDFFF` escape that is not half of a pair "
        "(what JavaScript's `JSON.stringify` writes for half an emoji) is read as U+FFFD, "
        "the replacement character, in any string (keys, values, ids); the request keeps "
        "its id and is served. Invalid UTF-8 bytes stay a -32700.", "",
    ]


def render() -> str:
    out = [
        "# quiesce protocol reference",
        "",
        "<!-- Generated by scripts/gen_protocol_docs.py from protocol/; do not edit. -->",
        "",
        f"Protocol version **{PROTOCOL_VERSION}**. JSON-RPC 2.0, UTF-8, one message per line "
        f"(newline-delimited), at most {DEFAULT_MAX_FRAME_SIZE} bytes a frame. A frame that is "
        "too large is answered with -32600 (id null: its id is not read) and skipped up to the "
        "next newline. Request ids are minted by the sender. The first request on a link is "
        "`initialize`; a different major version fails with `PROTOCOL_MISMATCH`. Params are "
        "objects (by-name), validated strictly: unknown fields are refused. Params that do not "
        "validate are answered -32602 with `data: {path, detail}`: the JSON path of the "
        "offending member (`$.params.workspace`; for a missing or unknown field, that field) "
        "and a message for a person. A field with a default may be left out by a sender; "
        "quiesce leaves it out when it holds its default, unless its table says `always "
        "sent`.",
        "",
    ]
    out += _order_and_bounds()
    nested: list[type[Any]] = []
    seen: set[type[Any]] = set()
    for direction in DIRECTIONS:
        out += [f"## {direction.name}", ""]
        for spec in direction.specs.values():
            kind = "notification" if spec.is_notification else "request"
            out += [f"### `{spec.name}` ({kind})", "", spec.doc, "",
                    f"**params** `{spec.params.__name__}`", ""]
            out += _struct_table(spec.params)
            nested += _nested_structs(spec.params, seen)
            if spec.result is not None:
                out += [f"**result** `{spec.result.__name__}`", ""]
                out += _struct_table(spec.result)
                nested += _nested_structs(spec.result, seen)
    out += ["## Tool result", "", "Every `tools.execute` answers with exactly one of these.",
            "", "`ToolResult`", ""]
    out += _struct_table(ToolResult)
    nested += _nested_structs(ToolResult, seen)
    out += ["## Types used above", ""]
    for cls in nested:
        if cls is ToolResult:
            continue
        out += [f"### `{cls.__name__}`", ""]
        out += _struct_table(cls)
    out += ["## Tools and their classes", "",
            "| tool | class | arguments |", "|---|---|---|"]
    for name, args in TOOL_ARGS.items():
        info = mi.type_info(args)
        assert isinstance(info, mi.StructType)
        fields = ", ".join(f"`{f.encode_name}`" + ("" if f.required else "?")
                           for f in info.fields)
        out.append(f"| {name} | {TOOL_CLASSES[name].value} | {fields} |")
    out += ["", "## Error catalogue", "",
            "JSON-RPC errors carry the number; tool results carry the name in "
            "`error.info.code`.", "", "| code | name | message |", "|---|---|---|"]
    for code in ErrorCode:
        out.append(f"| {int(code)} | `{code.name}` | {ERROR_MESSAGES[code]} |")
    return "\n".join(out) + "\n"
