"""File names that are not UTF-8: shown losslessly, and found again from what was shown."""

from __future__ import annotations

import os

import msgspec
from hypothesis import given
from hypothesis import strategies as st

from host import fsnames
from host.tools import TOOLS
from protocol.tools import GlobArgs, GrepArgs, ReadArgs, TextContent, ToolResult

from .conftest import Harness

LATIN1 = b"caf\xe9.txt"


def text(result: ToolResult) -> str:
    return "\n".join(c.text for c in result.content if isinstance(c, TextContent))


@given(st.binary(max_size=40))
def test_showing_is_lossless(raw: bytes) -> None:
    shown = fsnames.show(raw)
    shown.encode("utf-8")  # always encodable
    assert fsnames.to_bytes(shown) == raw


@given(st.binary(max_size=20), st.binary(max_size=20))
def test_showing_is_injective(a: bytes, b: bytes) -> None:
    if a != b:
        assert fsnames.show(a) != fsnames.show(b)


def test_shown_forms() -> None:
    assert fsnames.show(LATIN1) == "caf\\xe9.txt"
    assert fsnames.show("café.txt".encode()) == "café.txt"
    assert fsnames.show(b"a\\b") == "a\\x5cb"
    # A string the host never showed is taken literally.
    assert fsnames.to_bytes("a\\b") == b"a\\b"
    assert fsnames.to_bytes("x\\x41") == b"x\\x41"


async def test_a_latin1_name_through_glob_grep_and_read(harness: Harness) -> None:
    raw_root = os.fsencode(harness.root)
    with open(raw_root + b"/" + LATIN1, "wb") as f:
        f.write(b"needle in latin-1 \xe9\n")
    (harness.root / "plain.txt").write_text("needle\n")
    (harness.root / "a\\x41.txt").write_text("literal name\n")
    listed = await TOOLS["Glob"].run(GlobArgs("*.txt"), harness.ctx())
    names = text(listed).splitlines()
    assert names == ["a\\x5cx41.txt", "caf\\xe9.txt", "plain.txt"]
    msgspec.json.encode(listed)  # the result encodes: the link would carry it
    found = await TOOLS["Grep"].run(GrepArgs("needle"), harness.ctx())
    assert "caf\\xe9.txt:1:needle in latin-1 \ufffd" in text(found).splitlines()
    msgspec.json.encode(found)
    read = await TOOLS["Read"].run(ReadArgs("a\\x5cx41.txt"), harness.ctx())
    assert "literal name" in text(read) and read.details["path"] == "a\\x5cx41.txt"
    plain_grep = await TOOLS["Grep"].run(GrepArgs("needle", path="caf\\xe9.txt"), harness.ctx())
    assert text(plain_grep) == "caf\\xe9.txt:1:needle in latin-1 \ufffd"
    with open(raw_root + b"/" + LATIN1, "wb") as f:
        f.write(b"utf-8 text in a latin-1 name\n")
    read = await TOOLS["Read"].run(ReadArgs("caf\\xe9.txt"), harness.ctx())
    assert "utf-8 text in a latin-1 name" in text(read)
    assert read.details["path"] == "caf\\xe9.txt"
    msgspec.json.encode(read)
