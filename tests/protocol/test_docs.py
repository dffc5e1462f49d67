from __future__ import annotations

import pathlib

from protocol.docs import render
from protocol.methods import DIRECTIONS

DOC = pathlib.Path(__file__).resolve().parents[2] / "docs" / "protocol.md"


EXAMPLE = DOC.with_name("protocol-example.jsonl")


def test_protocol_doc_is_generated_and_current() -> None:
    assert DOC.read_text() == render(EXAMPLE.read_text()), "run scripts/gen_protocol_docs.py"


def test_the_doc_has_what_a_client_writer_needs() -> None:
    text = DOC.read_text()
    assert 'protocolVersion` the string `"1.0"`' in text
    for kind in ("turn/start", "user/message", "assistant/delta", "assistant/message",
                 "tool/call", "tool/started", "tool/progress", "tool/abort", "tool/result",
                 "turn/end", "session/meta"):
        assert f"| `{kind}` | " in text, kind  # a row of the event kinds table
    assert "| `tool/progress` | announced |" in text and "| `tool/call` | durable |" in text
    assert '`"text"`, `"image"`' in text and '`"scripted"`, `"openai"`' in text
    assert "| Task | local | `prompt`, `description`? |" in text
    assert "until agent turns land" not in text
    # The example exchange: every message of the turn the docs promise.
    example = text[text.index("## A complete exchange"):]
    for wanted in ('"method":"initialize"', '"method":"session.new"',
                   '"method":"agent.prompt"', '"method":"permission.request"',
                   '"kind":"tool/started"', '"method":"agent.abort"', '"kind":"tool/abort"',
                   '"code":"ABORTED"', '"kind":"turn/end"', '"outcome":"aborted"'):
        assert wanted in example, wanted


def test_every_method_and_type_is_in_the_doc_on_disk() -> None:
    text = DOC.read_text()
    for direction in DIRECTIONS:
        assert f"## {direction.name}\n" in text
        for spec in direction.specs.values():
            assert f"### `{spec.name}`" in text
            assert f"**params** `{spec.params.__name__}`" in text
            if spec.result is not None:
                assert f"**result** `{spec.result.__name__}`" in text
