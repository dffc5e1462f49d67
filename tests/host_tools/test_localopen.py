"""Read's loop path (``host.localopen``): taken only for a small plain file on the root's own
local file system, never changing what a Read answers, and never entering another mount."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import trio

from host import localopen
from host.localopen import LOCAL_OPENER, LocalOpener
from host.tools import TOOLS
from host.tools import read as read_tool
from protocol.tools import ReadArgs, ToolResult

from .conftest import Harness

pytestmark = pytest.mark.skipif(not LOCAL_OPENER.enabled or sys.platform != "linux",
                                reason="openat2 is Linux's, on x86_64 and aarch64")


class ThreadUse:
    """Counts the Reads that took a reader thread (``run_abandonable``)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls = 0
        real = read_tool.run_abandonable

        async def counted(work: Any) -> Any:
            self.calls += 1
            return await real(work)

        monkeypatch.setattr(read_tool, "run_abandonable", counted)


async def read(h: Harness, path: str, **kw: Any) -> ToolResult:
    with trio.fail_after(5):
        return await TOOLS["Read"].run(ReadArgs(path, **kw), h.ctx())  # type: ignore[arg-type]


def _tree(root: Path) -> None:
    (root / "one").write_text("x\n")
    (root / "sub").mkdir()
    (root / "sub" / "two.txt").write_text("a\r\nb\n")
    (root / "big").write_text("line\n" * (read_tool.INLINE_MAX // 5 + 10))
    (root / "empty").write_text("")
    (root / "bin").write_bytes(b"a\0b")
    (root / "latin").write_bytes("caf\u00e9\n".encode("latin-1"))
    (root / os.fsdecode(b"caf\xe9.txt")).write_text("e\n")
    (root / "back\\slash").write_text("s\n")
    (root / "link").symlink_to("one")
    (root / "dirlink").symlink_to("sub")
    (root / "escape").symlink_to("/etc/hostname")
    (root / "dangling").symlink_to("nowhere")
    os.mkfifo(root / "fifo")


PATHS = ["one", "./one", "sub/two.txt", "sub/../one", "sub//two.txt", "big", "empty", "bin",
         "latin", "caf\\xe9.txt", "back\\x5cslash", "link", "dirlink/two.txt", "escape",
         "dangling", "fifo", "sub", ".", "missing", "../one", "sub/../../one", "/etc/hostname",
         "one/", "one/x", ""]
ON_THE_LOOP = {"one", "./one", "sub/two.txt", "sub/../one", "sub//two.txt", "empty", "bin",
               "latin", "caf\\xe9.txt", "back\\x5cslash"}
"""The plain paths to small regular files (a binary or non-UTF-8 one is refused on the
loop as it would be on a thread)."""


@pytest.mark.parametrize("path", PATHS)
async def test_the_loop_path_answers_every_read_as_the_thread_path_does(
        harness: Harness, monkeypatch: pytest.MonkeyPatch, path: str) -> None:
    _tree(harness.root)
    threads = ThreadUse(monkeypatch)
    answer = await read(harness, path)
    on_thread = threads.calls
    monkeypatch.setattr(LOCAL_OPENER, "enabled", False)
    expected = await read(harness, path)
    assert answer == expected
    assert on_thread == (0 if path in ON_THE_LOOP else 1), (path, answer)


async def test_a_large_file_is_read_on_a_thread_and_whole(harness: Harness,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    _tree(harness.root)
    threads = ThreadUse(monkeypatch)
    result = await read(harness, "big", limit=5000)
    assert threads.calls == 1
    assert result.details["lines"] == read_tool.INLINE_MAX // 5 + 10


def test_another_mount_under_the_root_is_not_entered(tmp_path: Path) -> None:
    """``/proc`` is a mount under ``/``: reaching it from ``/`` leaves ``/``'s file system."""
    opener = LocalOpener()
    (tmp_path / "f").write_text("x")
    rel = os.path.relpath(tmp_path / "f", "/")
    root_local = opener._is_local(os.stat("/").st_dev)
    fd = opener.open_small("/", rel, 100)
    if not root_local or os.stat(tmp_path).st_dev != os.stat("/").st_dev:
        assert fd is None
    else:
        assert fd is not None
        os.close(fd)
    assert opener.open_small("/", "proc/self/status", 1 << 20) is None


def test_a_root_on_a_file_system_not_known_local_is_left_to_the_thread(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    device = os.stat(tmp_path).st_dev
    fake = tmp_path / "mountinfo"
    fake.write_text(f"36 1 {os.major(device)}:{os.minor(device)} / / rw - nfs4 srv:/x rw\n")
    assert LocalOpener(str(fake)).open_small(str(tmp_path), "f", 100) is None
    fake.write_text(f"36 1 {os.major(device)}:{os.minor(device)} / / rw - ext4 /dev/x rw\n")
    fd = LocalOpener(str(fake)).open_small(str(tmp_path), "f", 100)
    assert fd is not None
    os.close(fd)


def test_a_device_not_in_the_mount_table_is_not_local(tmp_path: Path) -> None:
    fake = tmp_path / "mountinfo"
    fake.write_text("")
    (tmp_path / "f").write_text("x")
    assert LocalOpener(str(fake)).open_small(str(tmp_path), "f", 100) is None


def test_a_kernel_without_openat2_turns_the_loop_path_off(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    import errno

    opener = LocalOpener()
    (tmp_path / "f").write_text("x")
    opener._load()
    monkeypatch.setattr(opener, "_syscall", lambda dir_fd, path: -errno.ENOSYS)
    assert opener.open_small(str(tmp_path), "f", 100) is None
    assert not opener.enabled


_MOUNT_PROBE = r"""
import os, subprocess, sys
from host.localopen import LocalOpener
root = sys.argv[1]
opener = LocalOpener()
os.mkdir(os.path.join(root, "mnt"))
open(os.path.join(root, "mnt", "under"), "w").write("u")
fd = opener.open_small(root, "mnt/under", 100)
assert fd is not None, "before the mount"
os.close(fd)
assert not opener._mounts_changed()
subprocess.run(["mount", "-t", "tmpfs", "none", os.path.join(root, "mnt")], check=True)
assert opener._mounts_changed(), "a mount is seen as a change"
assert not opener._mounts_changed(), "once"
open(os.path.join(root, "mnt", "f"), "w").write("x")
assert opener.open_small(root, "mnt/f", 100) is None, "a mount point is not crossed"
print("ok")
"""


def test_a_mount_inside_the_workspace_is_not_crossed_and_is_seen(tmp_path: Path) -> None:
    """In a private mount namespace of its own (it ends with the process): a tmpfs mounted
    inside the root is not entered, and the mount table's change is noticed."""
    unshare = shutil.which("unshare")
    if unshare is None or os.geteuid() != 0:
        pytest.skip("needs unshare and root")
    root = os.path.realpath(tmp_path)
    if not LocalOpener()._is_local(os.stat(root).st_dev):
        pytest.skip("the temporary directory is not on a local file system")
    probe = subprocess.run(
        [unshare, "--mount", "--propagation", "private", sys.executable, "-c", _MOUNT_PROBE,
         root], capture_output=True, text=True, timeout=30,
        cwd=Path(localopen.__file__).parent.parent)
    if probe.returncode != 0 and "unshare failed" in probe.stderr:
        pytest.skip(f"no mount namespace here: {probe.stderr.strip()}")
    assert probe.returncode == 0 and probe.stdout.strip() == "ok", probe.stderr
