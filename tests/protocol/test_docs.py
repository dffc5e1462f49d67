from __future__ import annotations

import pathlib

from protocol.docs import render
from protocol.methods import DIRECTIONS

DOC = pathlib.Path(__file__).resolve().parents[2] / "docs" / "protocol.md"


def test_protocol_doc_is_generated_and_current() -> None:
    assert DOC.read_text() == render(), "run scripts/gen_protocol_docs.py"


def test_every_method_is_documented() -> None:
    text = render()
    for direction in DIRECTIONS:
        for name in direction.specs:
            assert f"### `{name}`" in text
