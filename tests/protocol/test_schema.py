"""``docs/protocol.schema.json``: generated from protocol/'s types, current, and true of
real messages (the documented example exchange, every line of it, validated)."""

from __future__ import annotations

import json
import pathlib
from typing import Any

import jsonschema
import pytest

from protocol.methods import DIRECTIONS
from protocol.schema import render_schema

SCHEMA = pathlib.Path(__file__).resolve().parents[2] / "docs" / "protocol.schema.json"
EXAMPLE = SCHEMA.with_name("protocol-example.jsonl")


def test_schema_is_generated_and_current() -> None:
    assert SCHEMA.read_text() == render_schema(), "run scripts/gen_protocol_docs.py"


def _validator(schema: dict[str, Any], target: dict[str, Any]) -> jsonschema.Draft202012Validator:
    whole = dict(schema)
    whole.update(target)
    return jsonschema.Draft202012Validator(whole)


def test_every_method_of_every_direction_is_in_it() -> None:
    schema = json.loads(SCHEMA.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    for direction in DIRECTIONS:
        link = next(v for v in schema["x-links"].values() if v["name"] == direction.name)
        assert set(link["methods"]) == set(direction.specs)


def test_the_example_exchange_validates() -> None:
    schema = json.loads(SCHEMA.read_text())
    links = schema["x-links"]
    requests = _validator(schema, links["client-to-runtime"]["messages"])
    from_runtime = _validator(schema, links["runtime-to-client"]["messages"])
    pending: dict[Any, str] = {}
    checked = 0
    for line in EXAMPLE.read_text().splitlines():
        arrow, _, text = line.partition(" ")
        message = json.loads(text)
        if "method" in message:
            (requests if arrow == "->" else from_runtime).validate(message)
            if "id" in message:
                pending[(arrow, message["id"])] = message["method"]
        else:  # an answer: its result against the request's result type
            asked = "<-" if arrow == "->" else "->"
            method = pending[(asked, message["id"])]
            direction = "client-to-runtime" if asked == "->" else "runtime-to-client"
            if "result" in message:
                result = links[direction]["methods"][method]["result"]
                _validator(schema, result).validate(message["result"])
        checked += 1
    assert checked > 10


def test_it_refuses_what_the_daemon_refuses() -> None:
    schema = json.loads(SCHEMA.read_text())
    requests = _validator(schema, schema["x-links"]["client-to-runtime"]["messages"])
    with pytest.raises(jsonschema.ValidationError):
        requests.validate({"jsonrpc": "2.0", "id": 1, "method": "agent.abort",
                           "params": {"sessionId": "s-1", "bogus": True}})
    with pytest.raises(jsonschema.ValidationError):
        requests.validate({"jsonrpc": "2.0", "id": 1, "method": "session.attach"})
    requests.validate({"jsonrpc": "2.0", "id": 1, "method": "session.attach",
                       "params": {"sessionId": "s-1", "afterSeq": 3}})
