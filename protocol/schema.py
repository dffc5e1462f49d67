"""The protocol as JSON Schema (``docs/protocol.schema.json``), generated from the same
msgspec types as ``docs/protocol.md`` (``msgspec.json.schema_components``), so a renderer
in any language can generate its types from it.

``$defs`` holds every params, result and event type. ``x-links`` gives, for each
direction of each link, every method's whole message (``jsonrpc``, ``id`` for a request,
``method``, ``params``), its params and its result type. A frame a side may send is one of
its direction's ``messages``; ``x-session-event`` is what ``session.event`` carries.
"""

from __future__ import annotations

import json
from typing import Any

import msgspec

from protocol.messages.events import AnnouncedEvent
from protocol.methods import DIRECTIONS, MethodSpec
from protocol.version import PROTOCOL_VERSION

_REF = "#/$defs/{name}"


def _key(direction_name: str) -> str:
    """``client → runtime`` as ``client-to-runtime``."""
    return direction_name.replace(" → ", "-to-").replace(" ", "-")


def _message(spec: MethodSpec, params: dict[str, Any]) -> dict[str, Any]:
    """The whole JSON-RPC message of one method."""
    properties: dict[str, Any] = {"jsonrpc": {"const": "2.0"}}
    required = ["jsonrpc", "method"]
    if not spec.is_notification:
        properties["id"] = {"type": ["integer", "string"]}
        required.append("id")
    properties["method"] = {"const": spec.name}
    properties["params"] = params
    try:
        spec.params()
    except TypeError:  # params with required fields must be sent
        required.append("params")
    return {"type": "object", "properties": properties, "required": required,
            "additionalProperties": False}


def _any(t: type) -> dict[str, Any]:
    """``object`` (a value of any JSON type) is any JSON value."""
    if t is object:
        return {"description": "any JSON value"}
    raise NotImplementedError(t)


def schema() -> dict[str, Any]:
    types: list[Any] = [AnnouncedEvent]
    for direction in DIRECTIONS:
        for spec in direction.specs.values():
            types.append(spec.params)
            if spec.result is not None:
                types.append(spec.result)
    refs, defs = msgspec.json.schema_components(types, schema_hook=_any,
                                                ref_template=_REF)
    links: dict[str, Any] = {}
    index = 1
    for direction in DIRECTIONS:
        methods: dict[str, Any] = {}
        for spec in direction.specs.values():
            entry: dict[str, Any] = {"message": _message(spec, refs[index]),
                                     "params": refs[index], "doc": spec.doc}
            index += 1
            if spec.result is not None:
                entry["result"] = refs[index]
                index += 1
            methods[spec.name] = entry
        links[_key(direction.name)] = {
            "name": direction.name, "methods": methods,
            "messages": {"anyOf": [m["message"] for m in methods.values()]}}
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": f"urn:quiesce:protocol:{PROTOCOL_VERSION}",
        "title": f"quiesce protocol {PROTOCOL_VERSION}",
        "description": "Generated from protocol/ by scripts/gen_protocol_docs.py; "
                       "docs/protocol.md explains it.",
        "x-protocol-version": PROTOCOL_VERSION,
        "x-session-event": refs[0],
        "x-links": links,
        "$defs": defs,
    }


def render_schema() -> str:
    return json.dumps(schema(), indent=2, ensure_ascii=False, sort_keys=False) + "\n"
