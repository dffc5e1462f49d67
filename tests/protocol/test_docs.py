from __future__ import annotations

import pathlib

from protocol.docs import render
from protocol.methods import DIRECTIONS

DOC = pathlib.Path(__file__).resolve().parents[2] / "docs" / "protocol.md"


def test_protocol_doc_is_generated_and_current() -> None:
    assert DOC.read_text() == render(), "run scripts/gen_protocol_docs.py"


def test_every_method_and_type_is_in_the_doc_on_disk() -> None:
    text = DOC.read_text()
    for direction in DIRECTIONS:
        assert f"## {direction.name}\n" in text
        for spec in direction.specs.values():
            assert f"### `{spec.name}`" in text
            assert f"**params** `{spec.params.__name__}`" in text
            if spec.result is not None:
                assert f"**result** `{spec.result.__name__}`" in text
