"""Render the protocol reference (``docs/protocol.md``) from the protocol's types."""

from __future__ import annotations

import inspect
import typing
from typing import Any

import msgspec
import msgspec.inspect as mi

from protocol.bounds import BULKY, MARKER, MAX_BATCH_MEMBERS
from protocol.errors import ERROR_MESSAGES, ErrorCode
from protocol.framing import DEFAULT_MAX_FRAME_SIZE
from protocol.messages.client import ProviderConfig
from protocol.messages.events import AnnouncedEvent, Block, DurableEvent
from protocol.methods import DIRECTIONS
from protocol.tooldocs import tool_sections
from protocol.tools import Content, ToolResult
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
    config = cls.__struct_config__
    if config.tag_field is not None:
        about.append(f'Tagged: `"{config.tag_field}": "{config.tag}"`.')
        about.append("")
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


def _tags(union: Any) -> str:
    """The tag values of a union of tagged structs, as the doc quotes them."""
    return ", ".join(f'`"{t.__struct_config__.tag}"`' for t in typing.get_args(union))


def _client_guide() -> list[str]:
    """What a client writer needs beyond the method tables."""
    return [
        "## Writing a client", "",
        "- **Framing.** Write one JSON object per line; read lines, and dispatch each by "
        "its shape: a `method` with an `id` is a request to you (answer it), a `method` "
        "without one is a notification, an `id` without a `method` answers your request. "
        "The runtime sends requests of its own (`permission.request`) while yours are "
        "pending: never block reading on an answer.",
        f"- **Handshake.** Send `initialize` first, with `protocolVersion` the string "
        f'`"{PROTOCOL_VERSION}"` (not a number). Its answer names the version the runtime '
        "speaks and its capabilities (the host's pid and tools with their classes, the "
        "data directory, the ops socket).",
        "- **Tagged unions.** Where a field holds one of several struct types, one field "
        "of the object says which (its *tag*): an event's `kind` (every kind is in the "
        f"table below), a content block's `type` ({_tags(Content)}), an assistant "
        f"message block's `type` ({_block_types()}), a provider's `kind` "
        f"({_tags(ProviderConfig)}). Each type's table below names its tag.",
        "- **A turn.** `agent.prompt` answers when its turn ends (`stopReason`); meanwhile "
        "the turn's events arrive as `session.event` notifications, in order. Answer "
        "`permission.request` with a `decision`; a prompt withdrawn by a stop comes as "
        "`permission.withdrawn` (a late answer is ignored). `agent.abort` answers only "
        "once the stopped turn's `turn/end` is durable: when it answers, every "
        "`tool/call` of the turn has its one `tool/result`.",
        "- **`seq`.** A durable event's `seq` is its position in the session's log "
        "(`session/meta` is 0; each later record adds 1). An announced-only event "
        "(`assistant/delta`, `tool/started`, `tool/progress`, `tool/abort`) is not in the "
        "log and carries the `seq` of the last record before it, so it can be placed; a "
        "client that keeps a transcript keeps the durable events and replaces a step's "
        "deltas by its `assistant/message`. `session.load` replays the durable events, in "
        "`seq` order, before it answers.",
        "- **Errors.** An error answer has the JSON-RPC `code`, a `message` and sometimes "
        "`data`; the catalogue at the end lists the codes. Params that do not validate "
        "are answered -32602 with `message` `\"Invalid params\"` and `data` "
        "`` {\"path\": \"$.params.workspace\", \"detail\": \"Expected `str`, got `int` - "
        "at `$.params.workspace`\"} ``: the JSON path of the offending member (for a "
        "missing or unknown field, that field) and the validator's message. A request "
        "that validates but is refused by its handler with -32602 (a workspace that is "
        "not a directory, a bad provider) has a `message` that says why, and `data` only "
        "where a table says so.",
        "",
    ]


def _block_types() -> str:
    info = mi.type_info(Block)
    assert isinstance(info, mi.StructType)
    kind = next(f.type for f in info.fields if f.name == "type")
    assert isinstance(kind, mi.LiteralType)
    return ", ".join(f'`"{v}"`' for v in kind.values)


def _event_kinds() -> list[str]:
    """Every event kind, its fields, and whether the session log records it."""
    durable = set(typing.get_args(DurableEvent))
    lines = ["## Event kinds", "",
             "`session.event` carries one of these in `event`, tagged by `kind`. Every event "
             "has `seq` and `turnId` (empty for `session/meta`). *Durable* events are the "
             "session's log (`session.load` replays them); *announced* ones are sent once, "
             "live, and never logged. Each kind's full table is under *Types used above*.",
             "", "| kind | recorded | fields | |", "|---|---|---|---|"]
    for cls in typing.get_args(AnnouncedEvent):
        info = mi.type_info(cls)
        assert isinstance(info, mi.StructType)
        fields = ", ".join(f"`{f.encode_name}`" for f in info.fields
                           if f.encode_name not in ("seq", "turnId"))
        doc = inspect.cleandoc(cls.__dict__.get("__doc__") or "").split("\n\n")[0]
        doc = " ".join(doc.replace("``", "`").split())
        lines.append(f"| `{cls.__struct_config__.tag}` | "
                     f"{'durable' if cls in durable else 'announced'} | {fields or '-'} | "
                     f"{doc} |")
    return [*lines, ""]


def _example(example: str) -> list[str]:
    """A real exchange (``docs/protocol-example.jsonl``), as the client saw it."""
    if not example:
        return []
    return [
        "## A complete exchange", "",
        "Captured from a real `quiesce serve` by `scripts/capture_protocol_example.py` "
        "(ids, paths, pids and timings replaced by fixed values; a test captures it again "
        "and compares). `->` is the client's line, `<-` the runtime's. The client opens a "
        "session with a scripted model, prompts; the turn's Bash call asks permission, the "
        "client allows it once, the call starts (`tool/started`) and prints, and the "
        "client stops the turn mid-command with `agent.abort`: the call's process tree is "
        "killed, its result is `ABORTED` with the output it had, the turn ends `aborted`, "
        "and both requests answer.", "", "```", *example.rstrip("\n").split("\n"), "```", ""]


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
        "or as several arrays when one would exceed the frame limit (an extension: standard "
        "JSON-RPC answers a batch with one array; a client sending large batches must "
        "accept several).", "",
        f"**Frames** are at most {DEFAULT_MAX_FRAME_SIZE} bytes both ways. No link writes "
        "a larger one: an answer that would be is replaced by a -32603 error saying so; a "
        "request that would be is not sent (the caller gets the error); a notification "
        "that would be (a `session.event` announcing a 9 MiB `Write`) has its bulky "
        f"strings (of {BULKY} characters or more) shortened, each ending in `"
        + MARKER.format("N") + "` (N: the bytes of UTF-8 left out); shorter strings, ids "
        "and tags (`sessionId`, `callId`, `type`, `kind`, `toolClass`, …) are never cut. "
        "Only the announcement is shortened: the session log keeps the "
        "whole record.", "",
        "**Lone surrogates.** A `\\uD800` to `\\uDFFF` escape that is not half of a pair "
        "(what JavaScript's `JSON.stringify` writes for half an emoji) is read as U+FFFD, "
        "the replacement character, in any string (keys, values, ids); the request is "
        "answered under its id as read, so an id holding a lone surrogate comes back "
        "with U+FFFD in its place, and is served. Invalid UTF-8 bytes stay a -32700.", "",
    ]


def render(example: str = "") -> str:
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
        "and the validator's message (an example under *Writing a client*). A field with a "
        "default may be left out by a sender; quiesce leaves it out when it holds its "
        "default, unless its table says `always sent`.",
        "",
    ]
    out += _client_guide()
    out += _event_kinds()
    out += _example(example)
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
    out += tool_sections()
    out += ["## Error catalogue", "",
            "JSON-RPC errors carry the number; tool results carry the name in "
            "`error.info.code`.", "", "| code | name | message |", "|---|---|---|"]
    for code in ErrorCode:
        out.append(f"| {int(code)} | `{code.name}` | {ERROR_MESSAGES[code]} |")
    return "\n".join(out) + "\n"
