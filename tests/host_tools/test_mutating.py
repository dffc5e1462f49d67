"""Write and Edit: atomic replacement, mode preservation, clear failures, confinement."""

from __future__ import annotations

import os
import stat
import threading
from typing import Any

import pytest
import trio

from host.tools import TOOLS
from host.tools.atomic import atomic_write, identity
from host.workspace import ToolInputError
from protocol.tools import EditArgs, TextContent, ToolResult, WriteArgs

from .conftest import Harness


def text(result: ToolResult) -> str:
    return "\n".join(c.text for c in result.content if isinstance(c, TextContent))


async def write(h: Harness, path: str, content: str) -> ToolResult:
    return await TOOLS["Write"].run(WriteArgs(path, content), h.ctx())


async def edit(h: Harness, path: str, old: str, new: str, replace_all: bool = False) -> ToolResult:
    return await TOOLS["Edit"].run(EditArgs(path, old, new, replace_all), h.ctx())


def leftovers(h: Harness) -> list[str]:
    return [str(p) for p in h.root.rglob("*.tmp")]


async def test_write_creates_with_parents(harness: Harness) -> None:
    result = await write(harness, "new/dir/f.txt", "héllo\n")
    assert not result.is_error
    assert result.details == {"path": "new/dir/f.txt", "bytesWritten": 7, "created": True}
    assert (harness.root / "new/dir/f.txt").read_text() == "héllo\n"
    assert leftovers(harness) == []


async def test_write_replaces_and_keeps_mode(harness: Harness) -> None:
    target = harness.root / "script.sh"
    target.write_text("old")
    target.chmod(0o751)
    inode = target.stat().st_ino
    result = await write(harness, "script.sh", "new content")
    assert result.details["created"] is False and result.details["bytesWritten"] == 11
    assert target.read_text() == "new content"
    assert stat.S_IMODE(target.stat().st_mode) == 0o751
    assert target.stat().st_ino != inode  # replaced by rename, never rewritten in place
    assert leftovers(harness) == []


async def test_write_through_inside_symlink_keeps_the_link(harness: Harness) -> None:
    (harness.root / "real.txt").write_text("a")
    (harness.root / "alias.txt").symlink_to("real.txt")
    await write(harness, "alias.txt", "b")
    assert (harness.root / "alias.txt").is_symlink()
    assert (harness.root / "real.txt").read_text() == "b"


async def test_write_errors(harness: Harness) -> None:
    outside = harness.root.parent / "outside"
    outside.mkdir()
    (harness.root / "out").symlink_to(outside)
    (harness.root / "adir").mkdir()
    (harness.root / "afile").write_text("x")
    assert (await write(harness, "../x", "y")).code == "PATH_OUTSIDE_WORKSPACE"
    assert (await write(harness, "/tmp/x", "y")).code == "PATH_OUTSIDE_WORKSPACE"
    assert (await write(harness, "out/x", "y")).code == "PATH_OUTSIDE_WORKSPACE"
    assert list(outside.iterdir()) == []
    assert "is a directory" in text(await write(harness, "adir", "y"))
    assert (await write(harness, "afile/x", "y")).code == "TOOL_FAILED"


async def test_a_started_write_is_not_abandoned_when_cancelled(
        harness: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    started, release = threading.Event(), threading.Event()
    real = atomic_write

    def slow_atomic_write(*args: Any, **kw: Any) -> Any:
        started.set()
        release.wait(5)
        return real(*args, **kw)

    monkeypatch.setattr("host.tools.write.atomic_write", slow_atomic_write)
    finished = []
    with trio.fail_after(5):
        with trio.CancelScope() as scope:
            async with trio.open_nursery() as nursery:
                async def body() -> None:
                    finished.append(await write(harness, "f.txt", "all of it"))
                nursery.start_soon(body)
                await trio.to_thread.run_sync(started.wait)
                releaser = threading.Timer(0.1, release.set)
                releaser.start()
                cancelled_at = trio.current_time()
                scope.cancel()  # the write is under way: cancelling must not tear it
    releaser.join()
    assert trio.current_time() - cancelled_at >= 0.09  # the body waited for the write
    assert (harness.root / "f.txt").read_text() == "all of it"
    assert finished and finished[0].details["bytesWritten"] == 9
    assert leftovers(harness) == []


async def test_edit_unique_and_all(harness: Harness) -> None:
    target = harness.root / "f.py"
    target.write_text("a = 1\nb = 1\n")
    target.chmod(0o640)
    result = await edit(harness, "f.py", "a = 1", "a = 2")
    assert not result.is_error and result.details["replacements"] == 1
    assert target.read_text() == "a = 2\nb = 1\n"
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    result = await edit(harness, "f.py", " = ", " := ", replace_all=True)
    assert result.details["replacements"] == 2
    assert target.read_text() == "a := 2\nb := 1\n"
    assert leftovers(harness) == []


@pytest.mark.parametrize(("old", "new", "replace_all", "message"), [
    ("x = 1", "x = 2", False, "was not found"),
    ("= 1", "= 3", False, "occurs 2 times"),
    ("a = 1", "a = 1", False, "identical"),
    ("", "z", False, "empty"),
])
async def test_edit_failures_are_clear_and_write_nothing(
        harness: Harness, old: str, new: str, replace_all: bool, message: str) -> None:
    target = harness.root / "f.py"
    target.write_text("a = 1\nb = 1\n")
    before = identity(target.stat())
    result = await edit(harness, "f.py", old, new, replace_all)
    assert result.code == "TOOL_FAILED" and message in text(result)
    assert result.body_invoked
    assert identity(target.stat()) == before


async def test_edit_errors(harness: Harness) -> None:
    (harness.root / "latin.txt").write_bytes("é".encode("latin-1"))
    os.mkfifo(harness.root / "fifo")
    with trio.fail_after(5):
        assert (await edit(harness, "missing", "a", "b")).code == "NOT_FOUND"
        assert "not UTF-8" in text(await edit(harness, "latin.txt", "a", "b"))
        assert "not a regular file" in text(await edit(harness, "fifo", "a", "b"))
        assert (await edit(harness, "../f", "a", "b")).code == "PATH_OUTSIDE_WORKSPACE"


def test_atomic_write_refuses_a_file_changed_since_read(harness: Harness) -> None:
    target = harness.root / "f.txt"
    target.write_text("one")
    seen = identity(target.stat())
    target.write_text("changed by someone else")
    with pytest.raises(ToolInputError, match="changed while"):
        atomic_write(harness.workspace, target, "f.txt", b"mine", create_parents=False,
                     expect=seen)
    assert target.read_text() == "changed by someone else"
    assert leftovers(harness) == []


@pytest.mark.parametrize("tool", ["Write", "Edit"])
def test_mutating_class(tool: str) -> None:
    assert TOOLS[tool].tool_class.value == "mutating"
