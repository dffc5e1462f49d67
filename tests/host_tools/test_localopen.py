"""Read's loop path (``host.localopen``): taken only for a small plain file on the root's own
local file system, never changing what a Read answers, and never entering another mount."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

from host import localopen
from host.localopen import LOCAL_OPENER, LocalOpener
from host.tools import TOOLS
from host.tools import read as read_tool
from host.tools.context import HostToolConfig, ToolContext
from host.workspace import Workspace
from protocol.tools import ReadArgs, ToolResult

from .conftest import Harness

pytestmark = pytest.mark.skipif(not LOCAL_OPENER.enabled or sys.platform != "linux",
                                reason="openat2 is Linux's, on x86_64 and aarch64")


OpenerFactory = Callable[..., LocalOpener]


@pytest.fixture
def new_opener() -> Iterator[OpenerFactory]:
    """Openers of a test, closed after it (each holds the mount table open)."""
    made: list[LocalOpener] = []

    def make(mountinfo: str = "/proc/self/mountinfo") -> LocalOpener:
        made.append(LocalOpener(mountinfo))
        return made[-1]

    yield make
    for opener in made:
        opener.close()


def _local_tmp() -> bool:
    opener = LocalOpener()
    try:
        return opener._root_device(os.path.realpath(tempfile.gettempdir())) is not None
    finally:
        opener.close()


needs_local_tmp = pytest.mark.skipif(not _local_tmp(), reason="the temporary directory is "
                                     "not on local file systems: the loop path is never taken")


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


@needs_local_tmp
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


@pytest.mark.parametrize("swapped", ["root", "ancestor"])
async def test_a_root_swapped_for_a_symlink_is_not_followed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, swapped: str) -> None:
    """The root (or a folder above it) replaced by a symlink after the session opened:
    the loop path does not follow it out; the thread path refuses it, as before."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_text("s\n")
    (tmp_path / "up" / "ws").mkdir(parents=True)
    ctx = ToolContext(workspace=Workspace(tmp_path / "up" / "ws"), config=HostToolConfig(),
                      stop=trio.Event(), emit_output=lambda stream, text: None)

    async def read_secret() -> ToolResult:
        with trio.fail_after(5):
            return await TOOLS["Read"].run(ReadArgs("secret"), ctx)

    assert (await read_secret()).code == "NOT_FOUND"
    if swapped == "root":
        (tmp_path / "up" / "ws").rename(tmp_path / "up" / "ws.old")
        (tmp_path / "up" / "ws").symlink_to(outside)
    else:
        (tmp_path / "up").rename(tmp_path / "up.old")
        (tmp_path / "up.old" / "ws").rename(tmp_path / "up.old" / "gone")
        (tmp_path / "up.old" / "ws").symlink_to(outside)
        (tmp_path / "up").symlink_to(tmp_path / "up.old")
    threads = ThreadUse(monkeypatch)
    answer = await read_secret()
    assert threads.calls == 1
    assert answer.code == "PATH_OUTSIDE_WORKSPACE", answer


def test_a_fifo_is_never_opened_on_the_loop(tmp_path: Path, new_opener: OpenerFactory) -> None:
    """Only a regular file is opened for reading: a writer waiting for a FIFO's reader is
    not let through by the check (a device's driver would not run either)."""
    import threading

    os.mkfifo(tmp_path / "fifo")
    writer: list[int] = []
    thread = threading.Thread(target=lambda: writer.append(
        os.open(tmp_path / "fifo", os.O_WRONLY)), daemon=True)
    thread.start()
    try:
        assert new_opener().open_small(str(tmp_path), "fifo", 100) is None
        thread.join(0.2)
        assert writer == [], "the FIFO was opened for reading"
    finally:
        os.close(os.open(tmp_path / "fifo", os.O_RDONLY | os.O_NONBLOCK))  # let it go
        thread.join(5)
        for fd in writer:
            os.close(fd)


_LEASE_HOLDER = r"""
import fcntl, os, signal, sys, time
signal.signal(signal.SIGIO, signal.SIG_IGN)
fd = os.open(sys.argv[1], os.O_RDONLY)
fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_WRLCK)
print("held", flush=True)
time.sleep(5)  # the lease lasts this long at most
"""


@needs_local_tmp
def test_a_file_under_another_process_s_lease_is_left_to_the_thread(
        tmp_path: Path, new_opener: OpenerFactory) -> None:
    """An open of a file another process holds a write lease on waits until the lease is
    broken (45 s by default): on the loop it must not wait at all."""
    import time

    (tmp_path / "f").write_text("x\n")
    holder = subprocess.Popen([sys.executable, "-c", _LEASE_HOLDER, str(tmp_path / "f")],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        started = time.monotonic()
        assert new_opener().open_small(str(tmp_path), "f", 100) is None
        assert time.monotonic() - started < 1.0
    finally:
        holder.kill()
        holder.wait()
        assert holder.stdout is not None
        holder.stdout.close()


def test_another_mount_under_the_root_is_not_entered(tmp_path: Path,
                                                     new_opener: OpenerFactory) -> None:
    """``/proc`` is a mount under ``/``: reaching it from ``/`` leaves ``/``'s file system
    (as does reaching the temporary directory, if a mount of its own holds it)."""
    opener = new_opener()
    if not opener._root_is_local("/"):
        pytest.skip("/ is not on a local file system here")
    (tmp_path / "f").write_text("x")
    real = os.path.realpath(tmp_path)
    own_mount = any(point != "/" and (real == point or real.startswith(point + "/"))
                    for point, *_ in opener._mount_table())
    fd = opener.open_small("/", os.path.relpath(real, "/") + "/f", 100)
    if own_mount:
        assert fd is None
    else:
        assert fd is not None
        os.close(fd)
    assert opener.open_small("/", "proc/self/status", 1 << 20) is None


def _table(tmp_path: Path, *mounts: tuple[str, str] | tuple[str, str, str]) -> str:
    """A mount table of ``(point, type)`` or ``(point, type, super options)``."""
    fake = tmp_path / "mountinfo"
    fake.write_bytes(b"".join(
        b"%d 1 0:%d / %s rw shared:1 - %s src %s\n"
        % (36 + i, 40 + i, mount[0].replace(" ", "\\040").encode(), mount[1].encode(),
           (mount[2] if len(mount) > 2 else "rw").encode())
        for i, mount in enumerate(mounts)))
    return str(fake)


def test_an_overlay_is_local_only_with_every_layer_local(
        tmp_path: Path, new_opener: OpenerFactory) -> None:
    """An overlay's reads wait on its layers: one lower layer on FUSE or NFS makes it
    remote (issue 31, item 1); overlays of overlays are followed, a bounded depth."""
    def local(*mounts: tuple[str, str] | tuple[str, str, str]) -> bool:
        return new_opener(_table(tmp_path, *mounts))._root_is_local("/ws/project")

    layers = "rw,lowerdir=/l1:/l2::/data,upperdir=/up,workdir=/work"
    assert local(("/", "ext4"), ("/ws", "overlay", layers))
    assert not local(("/", "ext4"), ("/l2", "fuse.sshfs"), ("/ws", "overlay", layers))
    assert not local(("/", "ext4"), ("/data", "nfs4"), ("/ws", "overlay", layers))
    assert not local(("/", "ext4"), ("/up", "nfs"), ("/ws", "overlay", layers))
    # A layer path with a colon or a space, escaped by the kernel.
    escaped = "rw,lowerdir=/a\\072b:/c\\040d,upperdir=/up,workdir=/work"
    assert new_opener(_table(tmp_path, ("/", "ext4"), ("/ws", "overlay", escaped))
                      )._mount_table()[1][2] == ("/a:b", "/c d", "/up", "/work")
    assert not local(("/", "ext4"), ("/a:b", "nfs"), ("/ws", "overlay", escaped))
    # Overlays of overlays: followed; too deep, or a layer not absolute, is not local.
    assert local(("/", "ext4"), ("/l1", "overlay", "rw,lowerdir=/x:/y"),
                 ("/ws", "overlay", layers))
    assert not local(("/", "ext4"), ("/x", "nfs"), ("/l1", "overlay", "rw,lowerdir=/x:/y"),
                     ("/ws", "overlay", layers))
    assert not local(("/", "overlay", "rw,lowerdir=/:/b"))
    assert not local(("/", "ext4"), ("/ws", "overlay", "rw,lowerdir=rel:/b"))
    assert not local(("/", "ext4"), ("/ws", "overlay", "rw"))


def test_a_root_on_a_file_system_not_known_local_is_left_to_the_thread(
        tmp_path: Path, new_opener: OpenerFactory) -> None:
    (tmp_path / "f").write_text("x")
    assert new_opener(_table(tmp_path, ("/", "nfs4"))).open_small(
        str(tmp_path), "f", 100) is None
    fd = new_opener(_table(tmp_path, ("/", "ext4"))).open_small(str(tmp_path), "f", 100)
    assert fd is not None
    os.close(fd)


def test_a_root_below_a_network_mount_is_left_to_the_thread(
        tmp_path: Path, new_opener: OpenerFactory) -> None:
    """The walk to the root passes through every mount on its ancestors."""
    (tmp_path / "f").write_text("x")
    table = _table(tmp_path, ("/", "ext4"), (str(tmp_path.parent), "fuse.sshfs"),
                   (str(tmp_path), "tmpfs"))
    assert new_opener(table).open_small(str(tmp_path), "f", 100) is None
    beside = _table(tmp_path, ("/", "ext4"), (str(tmp_path) + "-other", "nfs"))
    fd = new_opener(beside).open_small(str(tmp_path), "f", 100)
    assert fd is not None  # a mount named like the root's prefix is not on its path
    os.close(fd)


def test_mount_points_are_read_unescaped(tmp_path: Path, new_opener: OpenerFactory) -> None:
    table = _table(tmp_path, ("/", "ext4"), ("/srv/a b", "nfs"))
    assert new_opener(table)._mount_table() == [("/", "ext4", ()), ("/srv/a b", "nfs", ())]
    assert not new_opener(table)._root_is_local("/srv/a b/ws")
    assert new_opener(table)._root_is_local("/srv/a")


def test_a_root_no_mount_is_known_for_is_not_local(
        tmp_path: Path, new_opener: OpenerFactory) -> None:
    (tmp_path / "f").write_text("x")
    assert new_opener(_table(tmp_path)).open_small(str(tmp_path), "f", 100) is None


@needs_local_tmp
def test_a_kernel_without_openat2_turns_the_loop_path_off(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, new_opener: OpenerFactory) -> None:
    opener = new_opener()
    (tmp_path / "f").write_text("x")
    opener._load()
    monkeypatch.setattr(opener, "_syscall", lambda dir_fd, path, how: -errno.ENOSYS)
    assert opener.open_small(str(tmp_path), "f", 100) is None
    assert not opener.enabled


@needs_local_tmp
def test_only_a_refused_root_turns_the_loop_path_off(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, new_opener: OpenerFactory) -> None:
    """``EPERM`` for one file (a security module's answer) is that file's; for the root's
    plain path open it is a policy refusing ``openat2`` itself."""
    opener = new_opener()
    (tmp_path / "f").write_text("x")
    opener._load()
    real = opener._syscall
    monkeypatch.setattr(opener, "_syscall", lambda dir_fd, path, how: (
        -errno.EPERM if how == localopen._BENEATH else real(dir_fd, path, how)))
    assert opener.open_small(str(tmp_path), "f", 100) is None
    assert opener.enabled
    monkeypatch.setattr(opener, "_syscall", lambda dir_fd, path, how: -errno.EPERM)
    assert opener.open_small(str(tmp_path), "f", 100) is None
    assert not opener.enabled


_MOUNT_PROBE = r"""
import os, subprocess, sys
from host import localopen
root = sys.argv[1]
opener = localopen.LocalOpener()
os.mkdir(os.path.join(root, "mnt"))
open(os.path.join(root, "mnt", "under"), "w").write("u")
fd = opener.open_small(root, "mnt/under", 100)
assert fd is not None, "before the mount"
os.close(fd)
localopen.MOUNTS_RECHECK = 1e9  # the table is not looked at again
subprocess.run(["mount", "-t", "tmpfs", "none", os.path.join(root, "mnt")], check=True)
assert not opener._mounts_changed(), "not looked at again so soon"
localopen.MOUNTS_RECHECK = 0.0  # looked at every time
assert opener._mounts_changed(), "a mount is seen as a change"
assert not opener._mounts_changed(), "once"
open(os.path.join(root, "mnt", "f"), "w").write("x")
assert opener.open_small(root, "mnt/f", 100) is None, "a mount point is not crossed"
open(os.path.join(root, "f"), "w").write("x")
fd = opener.open_small(root, "f", 100)
assert fd is not None
os.close(fd)
localopen.MOUNTS_RECHECK = 1e9
subprocess.run(["mount", "-t", "tmpfs", "none", root], check=True)
open(os.path.join(root, "f"), "w").write("over")
assert opener.open_small(root, "f", 100) is None, "a mount on the root, seen at once"
print("ok")
"""


def test_a_mount_inside_the_workspace_is_not_crossed_and_is_seen(
        tmp_path: Path, new_opener: OpenerFactory) -> None:
    """In a private mount namespace of its own (it ends with the process): a tmpfs mounted
    inside the root is not entered, and the mount table's change is noticed."""
    unshare = shutil.which("unshare")
    if unshare is None or os.geteuid() != 0:
        pytest.skip("needs unshare and root")
    root = os.path.realpath(tmp_path)
    if not new_opener()._root_is_local(root):
        pytest.skip("the temporary directory is not on a local file system")
    probe = subprocess.run(
        [unshare, "--mount", "--propagation", "private", sys.executable, "-c", _MOUNT_PROBE,
         root], capture_output=True, text=True, timeout=30,
        cwd=Path(localopen.__file__).parent.parent)
    if probe.returncode != 0 and "unshare failed" in probe.stderr:
        pytest.skip(f"no mount namespace here: {probe.stderr.strip()}")
    assert probe.returncode == 0 and probe.stdout.strip() == "ok", probe.stderr
