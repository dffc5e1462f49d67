"""Read, Glob and Grep: normal and error paths, confinement, FIFOs, and cancellation."""

from __future__ import annotations

import os
import time
from typing import Any

import msgspec
import pytest
import trio

from host.tools import TOOLS, ripgrep
from host.tools import grep as grep_tool
from host.tools.pathmatch import MAX_ALTERNATIVES, alternatives, max_depth
from host.workspace import ToolInputError
from protocol.tools import GlobArgs, GrepArgs, ReadArgs, TextContent, ToolResult

from .conftest import Harness


def text(result: ToolResult) -> str:
    return "\n".join(c.text for c in result.content if isinstance(c, TextContent))


async def read(h: Harness, path: str, **kw: object) -> ToolResult:
    return await TOOLS["Read"].run(ReadArgs(path, **kw), h.ctx())  # type: ignore[arg-type]


# -- Read ---------------------------------------------------------------------------


async def test_read_numbers_lines(harness: Harness) -> None:
    (harness.root / "f.txt").write_text("one\ntwo\r\nthree")
    result = await read(harness, "f.txt")
    assert not result.is_error
    assert text(result) == "     1\tone\n     2\ttwo\n     3\tthree\n"
    assert result.details == {"path": "f.txt", "startLine": 1, "lines": 3,
                              "truncated": False, "more": False}


async def test_read_offset_limit(harness: Harness) -> None:
    (harness.root / "f.txt").write_text("".join(f"line {i}\n" for i in range(1, 11)))
    result = await read(harness, "f.txt", offset=3, limit=2)
    assert text(result).splitlines()[:2] == ["     4\tline 4", "     5\tline 5"]
    assert "continue with offset=5" in text(result)
    assert result.details["more"] is True
    beyond = await read(harness, "f.txt", offset=20)
    assert "the file has 10 lines" in text(beyond)


async def test_read_bounds_size_and_long_lines(harness: Harness) -> None:
    (harness.root / "long.txt").write_text("x" * 5000 + "\nshort\n")
    result = await read(harness, "long.txt")
    first = text(result).splitlines()[0]
    assert first.endswith("[line truncated]") and len(first) < 2100
    assert text(result).splitlines()[1] == "     2\tshort"
    (harness.root / "big.txt").write_text("y" * 100 + "\n" * 1 + ("z" * 100 + "\n") * 5000)
    result = await TOOLS["Read"].run(ReadArgs("big.txt"), harness.ctx(read_max_bytes=4096))
    assert len(text(result).encode()) < 4096 + 200
    assert result.details["truncated"] is True and "output truncated" in text(result)


async def test_read_refuses_binary_and_non_utf8(harness: Harness) -> None:
    (harness.root / "bin").write_bytes(b"abc\x00def")
    (harness.root / "latin1.txt").write_bytes("café\n".encode("latin-1"))
    binary = await read(harness, "bin")
    assert binary.code == "TOOL_FAILED" and "binary" in text(binary)
    latin = await read(harness, "latin1.txt")
    assert latin.code == "TOOL_FAILED" and "not UTF-8" in text(latin)


@pytest.mark.parametrize("content", [
    b"one\ntwo\r\nthree\rfour", b"x" * 5000 + b"\nshort\n", b"", b"a\n" * 3000,
    b"text\x00binary"])
async def test_read_of_a_small_file_in_one_go_shows_what_the_streamed_read_shows(
        harness: Harness, monkeypatch: pytest.MonkeyPatch, content: bytes) -> None:
    """Files up to ``SMALL_FILE`` are read and decoded at once; larger ones as they are
    read. Both show the same lines, bounds, errors and details."""
    from host.tools import read as read_module

    (harness.root / "f").write_bytes(content)
    shown = [await TOOLS["Read"].run(ReadArgs("f", offset=1, limit=2500),
                                     harness.ctx(read_max_bytes=8192))]
    monkeypatch.setattr(read_module, "SMALL_FILE", -1)  # even an empty file streams
    shown.append(await TOOLS["Read"].run(ReadArgs("f", offset=1, limit=2500),
                                         harness.ctx(read_max_bytes=8192)))
    assert shown[0] == shown[1]


async def test_read_names_the_line_of_the_first_invalid_byte(harness: Harness) -> None:
    (harness.root / "f").write_bytes(b"ok\nfine\n" + "caf\u00e9\n".encode("latin-1"))
    result = await read(harness, "f")
    assert result.code == "TOOL_FAILED" and "not UTF-8 text (invalid bytes near line 3)" in \
        text(result)


async def test_read_errors(harness: Harness, tmp_path: object) -> None:
    (harness.root / "dir").mkdir()
    os.mkfifo(harness.root / "fifo")
    (harness.root / "empty").write_text("")
    (harness.root / "escape").symlink_to("/etc/hostname")
    with trio.fail_after(5):
        assert (await read(harness, "missing")).code == "NOT_FOUND"
        assert (await read(harness, "dir")).code == "TOOL_FAILED"
        assert "not a regular file" in text(await read(harness, "fifo"))
        assert (await read(harness, "../x")).code == "PATH_OUTSIDE_WORKSPACE"
        assert (await read(harness, "/etc/hostname")).code == "PATH_OUTSIDE_WORKSPACE"
        assert (await read(harness, "escape")).code == "PATH_OUTSIDE_WORKSPACE"
        assert text(await read(harness, "empty")) == "(empty file)"


# -- Glob ---------------------------------------------------------------------------


def _tree(h: Harness) -> None:
    for rel in ["a.py", "b.txt", "src/c.py", "src/deep/d.py", "src/deep/e.ts", ".git/x.py"]:
        path = h.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"content of {rel}\nneedle here\n")


async def glob(h: Harness, pattern: str, path: str | None = None) -> ToolResult:
    return await TOOLS["Glob"].run(GlobArgs(pattern, path), h.ctx())


async def test_glob_patterns(harness: Harness) -> None:
    _tree(harness)
    assert text(await glob(harness, "*.py")) == "a.py"
    assert text(await glob(harness, "**/*.py")).splitlines() == [
        "a.py", "src/c.py", "src/deep/d.py"]
    assert text(await glob(harness, "src/**/*.{py,ts}")).splitlines() == [
        "src/c.py", "src/deep/d.py", "src/deep/e.ts"]
    assert text(await glob(harness, "*.py", "src")) == "src/c.py"
    assert text(await glob(harness, "?.[pt][yx]*")).splitlines() == ["a.py", "b.txt"]
    none = await glob(harness, "*.rs")
    assert not none.is_error and none.details["count"] == 0


async def test_glob_confined(harness: Harness, tmp_path: object) -> None:
    _tree(harness)
    outside = harness.root.parent / "outside"
    outside.mkdir()
    (outside / "o.py").write_text("x")
    (harness.root / "link_dir").symlink_to(outside)
    (harness.root / "link_out.py").symlink_to(outside / "o.py")
    (harness.root / "link_in.py").symlink_to(harness.root / "a.py")
    listed = text(await glob(harness, "**/*.py")).splitlines()
    assert listed == ["a.py", "src/c.py", "src/deep/d.py"]  # symlinks: neither followed nor listed
    assert (await glob(harness, "../*")).code == "PATH_OUTSIDE_WORKSPACE"
    assert (await glob(harness, "/etc/*")).code == "PATH_OUTSIDE_WORKSPACE"
    assert (await glob(harness, "*", "link_dir")).code == "PATH_OUTSIDE_WORKSPACE"
    assert (await glob(harness, "*", "missing")).code == "NOT_FOUND"
    assert (await glob(harness, "*", "a.py")).code == "TOOL_FAILED"
    assert (await glob(harness, "[z-a]")).code == "INVALID_PARAMS"


def test_glob_alternatives_are_bounded_before_expansion() -> None:
    assert alternatives("a/{b,c{d,e}}/f") == ["a/b/f", "a/cd/f", "a/ce/f"]
    assert alternatives("{a,b") == ["[{]a,b"]  # an unmatched brace is literal
    assert max_depth(alternatives("*.py")) == 1 and max_depth(alternatives("**/*.py")) is None
    started = time.monotonic()
    for bomb in ["{a,b}" * 23, "{a,b}" * 200, "{" * 5000 + "}" * 5000,
                 "{" + ",".join("x" * 5 for _ in range(MAX_ALTERNATIVES + 1)) + "}"]:
        with pytest.raises(ToolInputError) as refused:
            alternatives(bomb)
        assert refused.value.code.name == "INVALID_PARAMS"
    assert time.monotonic() - started < 0.5  # counted, never expanded
    assert len(alternatives("{a,b}" * 8)) == MAX_ALTERNATIVES


async def test_glob_hidden_and_ignored_files_need_include_ignored(harness: Harness) -> None:
    _tree(harness)
    (harness.root / ".hidden.py").write_text("needle\n")
    (harness.root / ".hid").mkdir()
    (harness.root / ".hid" / "h.py").write_text("needle\n")
    (harness.root / ".ignore").write_text("ignored/\n")
    (harness.root / "ignored").mkdir()
    (harness.root / "ignored" / "i.py").write_text("needle\n")
    # A hidden file the pattern names is listed (ripgrep's --glob overrides the hidden
    # rule for the files it matches); hidden and ignored directories are not walked.
    assert text(await glob(harness, "**/*.py")).splitlines() == [
        ".hidden.py", "a.py", "src/c.py", "src/deep/d.py"]
    everything = await TOOLS["Glob"].run(GlobArgs("**/*.py", include_ignored=True),
                                         harness.ctx())
    assert text(everything).splitlines() == [
        ".hid/h.py", ".hidden.py", "a.py", "ignored/i.py", "src/c.py",
        "src/deep/d.py"]  # never .git
    assert len(text(await grep(harness, "needle")).splitlines()) == 5
    assert len(text(await grep(harness, "needle", include_ignored=True)).splitlines()) == 8


# -- Grep ---------------------------------------------------------------------------


async def grep(h: Harness, pattern: str, **kw: object) -> ToolResult:
    return await TOOLS["Grep"].run(GrepArgs(pattern, **kw), h.ctx())  # type: ignore[arg-type]


async def test_grep_tree_file_glob_and_case(harness: Harness) -> None:
    _tree(harness)
    (harness.root / "bin.dat").write_bytes(b"needle\x00")
    result = await grep(harness, "needle")
    lines = text(result).splitlines()
    assert "a.py:2:needle here" in lines and "src/deep/e.ts:2:needle here" in lines
    assert not any(line.startswith((".git", "bin.dat")) for line in lines)
    assert result.details["matches"] == 5 and result.details["files"] == 5
    only_ts = await grep(harness, "needle", glob="*.ts")
    assert text(only_ts) == "src/deep/e.ts:2:needle here"
    assert text(await grep(harness, "NEEDLE")) == "No matches found"
    wire = msgspec.convert({"pattern": "NEEDLE", "ignoreCase": True}, GrepArgs)
    assert len(text(await TOOLS["Grep"].run(wire, harness.ctx())).splitlines()) == 5
    single = await grep(harness, "content", path="src/c.py")
    assert text(single) == "src/c.py:1:content of src/c.py"


async def test_grep_errors_and_bounds(harness: Harness) -> None:
    _tree(harness)
    assert (await grep(harness, "(")).code == "INVALID_PARAMS"
    assert (await grep(harness, "x", path="../")).code == "PATH_OUTSIDE_WORKSPACE"
    assert (await grep(harness, "x", path="missing")).code == "NOT_FOUND"
    (harness.root / "many.txt").write_text("hit\n" * 5000)
    bounded = await TOOLS["Grep"].run(GrepArgs("hit"), harness.ctx(max_output_bytes=2000))
    assert bounded.details["truncated"] is True
    assert len(text(bounded).encode()) < 2200 and "output truncated" in text(bounded)


async def test_grep_does_not_hang_on_a_fifo(harness: Harness) -> None:
    _tree(harness)
    os.mkfifo(harness.root / "src" / "pipe")  # nobody ever writes it
    with trio.fail_after(5):
        result = await grep(harness, "needle")
        assert result.details["matches"] == 5
        single = await grep(harness, "needle", path="src/pipe")
    assert single.code == "TOOL_FAILED" and "not a regular file" in text(single)


async def test_a_cancelled_grep_kills_its_rg_at_once(
        harness: Harness, monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    _tree(harness)
    slow = tmp_path / "slow-rg"
    pidfile = tmp_path / "rg.pid"
    slow.write_text(f"#!/bin/sh\necho $$ > {pidfile}\nexec sleep 30\n")
    slow.chmod(0o755)
    monkeypatch.setenv("QUIESCE_RG", str(slow))  # an rg that never finishes
    started = time.monotonic()
    with trio.fail_after(5):
        with trio.move_on_after(0.3):
            await grep(harness, "needle")
        cancelled_at = time.monotonic()
    assert cancelled_at - started < 0.3 + 0.5  # the caller is released at once
    pid = int(pidfile.read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # and its search is dead and reaped, not left running


async def test_grep_and_glob_without_rg_say_so(harness: Harness,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ripgrep, "_found_rg", lambda: None)
    monkeypatch.delenv("QUIESCE_RG", raising=False)
    for result in [await grep(harness, "x"), await glob(harness, "*")]:
        assert result.code == "TOOL_FAILED" and "ripgrep (rg) is not installed" in text(result)


async def test_read_only_bodies_return_promptly_when_cancelled(harness: Harness) -> None:
    _tree(harness)
    with trio.CancelScope() as scope:
        scope.cancel()
        await glob(harness, "**/*")
    assert scope.cancelled_caught


@pytest.mark.parametrize("tool", ["Read", "Glob", "Grep"])
def test_read_only_class(tool: str) -> None:
    assert TOOLS[tool].tool_class.value == "read-only"


async def test_glob_counts_past_what_it_shows(harness: Harness) -> None:
    for d in range(3):
        (harness.root / f"d{d}").mkdir()
        for f in range(700):
            (harness.root / f"d{d}" / f"f{f:03}.txt").write_text("")
    result = await glob(harness, "**/*.txt")
    lines = text(result).splitlines()
    assert result.details == {"count": 2100, "truncated": True}
    assert lines[0] == "d0/f000.txt" and lines[999] == "d1/f299.txt"
    assert lines[-1] == "[1100 more files not shown; narrow the pattern]"


async def test_grep_shows_the_start_of_a_match_on_a_line_too_long_to_read(
        harness: Harness) -> None:
    """A minified file's huge line: ripgrep sends only its start (``--max-columns``), the
    host shows what it shows of any long line, with the line's number."""
    (harness.root / "minified.js").write_text("x" * (ripgrep.MAX_RECORD + 10) + "needle\n")
    (harness.root / "short.txt").write_text("needle\n")
    result = await grep(harness, "needle")
    assert text(result).splitlines() == [
        f"minified.js:1:{'x' * grep_tool.MAX_SHOWN_LINE_CHARS} [line truncated]",
        "short.txt:1:needle"]


async def test_grep_of_a_binary_file_named_says_it_matches(harness: Harness) -> None:
    """ripgrep reports a match in a binary file it was named as a message, not a line: the
    model is told the file matches, with no NUL-laden text."""
    (harness.root / "blob.bin").write_bytes(b"needle\0\xff\xfe rest\n")
    result = await grep(harness, "needle", path="blob.bin")
    assert text(result).splitlines() == [
        'blob.bin:?:[binary file matches (found "\\0" byte around offset 6)]']
    assert result.details == {"matches": 1, "files": 1, "truncated": False}


async def test_grep_lines_keep_their_colons_and_carriage_returns_go(harness: Harness) -> None:
    (harness.root / "a:b.txt").write_bytes(b"x: needle: y\r\nno\n")
    result = await grep(harness, "needle")
    assert text(result).splitlines() == ["a:b.txt:1:x: needle: y"]


async def test_grep_names_a_file_whose_name_holds_a_newline(harness: Harness) -> None:
    """ripgrep prints a name's bytes as they are, so a newline in it splits the record:
    the match is shown under its own name, never under another file's."""
    (harness.root / "a\nb.txt").write_text("needle here\n")
    (harness.root / "b.txt").write_text("nothing\n")
    result = await grep(harness, "needle")
    assert text(result) == "a\nb.txt:1:needle here"
    assert result.details == {"matches": 1, "files": 1, "truncated": False}


async def test_grep_shows_a_previewed_line_without_ripgreps_marker(harness: Harness) -> None:
    """ripgrep previews a line over 2,000 bytes; its marker never reaches the model, and a
    line it previewed whole (500 four-byte characters: 2,001 bytes with the newline) is
    shown whole, not marked cut."""
    emoji = "\U0001f600"
    (harness.root / "exact.txt").write_text(emoji * grep_tool.MAX_SHOWN_LINE_CHARS + "\n")
    (harness.root / "wide.txt").write_text(emoji * grep_tool.MAX_SHOWN_LINE_CHARS + "x\n")
    result = await grep(harness, emoji)
    exact, wide = text(result).splitlines()
    assert exact == "exact.txt:1:" + emoji * grep_tool.MAX_SHOWN_LINE_CHARS
    assert wide == "wide.txt:1:" + emoji * grep_tool.MAX_SHOWN_LINE_CHARS + " [line truncated]"
