"""The run directory's rules, pid files, finding daemons (and cleaning stale ones), targets."""

from __future__ import annotations

import os
import pathlib
import socket
import subprocess
import sys
import tempfile
import time

import pytest
import trio

from runtime.clients.ops.client import RunningDaemon, discover
from runtime.clients.ops.targets import TargetError, parse_target, pick_daemon
from runtime.daemon.ops.pidfile import PidFile, write_pid_file
from runtime.daemon.ops.rundir import UnsafeRunDir, check_private_dir, ensure_private_dir, run_dir
from runtime.daemon.ops.server import OpsServer
from tests.ops.support import FakeBackend


def test_run_dir_prefers_a_usable_xdg_runtime_dir(xdg: pathlib.Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    assert run_dir() == xdg / "quiesce"
    fallback = pathlib.Path(tempfile.gettempdir()) / f"quiesce-{os.getuid()}"
    for unusable in ("relative/dir", str(xdg / "missing"), ""):
        monkeypatch.setenv("XDG_RUNTIME_DIR", unusable)
        assert run_dir() == fallback
    monkeypatch.delenv("XDG_RUNTIME_DIR")
    assert run_dir() == fallback
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(xdg))
    assert run_dir(uid=os.getuid() + 1) == pathlib.Path(
        tempfile.gettempdir()) / f"quiesce-{os.getuid() + 1}"  # not that user's directory
    assert not fallback.exists() or fallback.is_dir()  # run_dir never creates anything


def test_ensure_private_dir_creates_0700_and_accepts_its_own(xdg: pathlib.Path) -> None:
    path = xdg / "quiesce"
    assert not check_private_dir(path)
    ensure_private_dir(path)
    assert (path.stat().st_mode & 0o777) == 0o700
    ensure_private_dir(path)  # an existing private directory is fine
    assert check_private_dir(path)


def test_refuses_foreign_open_symlinked_or_non_directories(xdg: pathlib.Path) -> None:
    path = xdg / "quiesce"
    path.mkdir(mode=0o700)
    with pytest.raises(UnsafeRunDir, match="owned by uid"):
        check_private_dir(path, uid=os.getuid() + 1)
    path.chmod(0o770)
    with pytest.raises(UnsafeRunDir, match="mode 0770"):
        ensure_private_dir(path)
    link = xdg / "link"
    link.symlink_to(path)
    path.chmod(0o700)
    with pytest.raises(UnsafeRunDir, match="symlink"):
        ensure_private_dir(link)
    plain = xdg / "file"
    plain.write_text("")
    with pytest.raises(UnsafeRunDir, match="not a directory"):
        ensure_private_dir(plain)


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", ""])
    proc.wait()
    return proc.pid


async def test_discover_keeps_live_daemons_and_cleans_stale_ones(
        nursery: trio.Nursery, xdg: pathlib.Path) -> None:
    path = await nursery.start(OpsServer(FakeBackend()).serve)
    directory = path.parent
    gone = dead_pid()
    (directory / f"{gone}.sock").touch()
    write_pid_file(directory, PidFile(gone, str(directory / f"{gone}.sock"), time.time()))
    alive = os.getppid()  # a live process that serves no socket
    write_pid_file(directory, PidFile(alive, str(directory / f"{alive}.sock"), time.time()))
    refusing = 1  # init is alive; its socket file exists but nobody listens
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(directory / "1.sock"))
    sock.close()
    write_pid_file(directory, PidFile(refusing, str(directory / "1.sock"), time.time()))
    (directory / "2.json").write_text("{not json")
    (directory / "notes.txt").write_text("left alone")

    found = await discover()
    assert [d.pid for d in found.daemons] == [os.getpid()]
    assert found.daemons[0].socket == path
    reasons = dict(found.removed)
    assert reasons[gone] == "process gone"
    assert reasons[alive] == reasons[1] == "socket refuses connections"
    assert reasons[2].startswith("unreadable pid file")
    assert sorted(p.name for p in directory.iterdir()) == sorted(
        [path.name, f"{os.getpid()}.json", "notes.txt"])


async def test_discover_with_no_directory_and_with_an_unsafe_one(xdg: pathlib.Path) -> None:
    found = await discover()
    assert found.daemons == [] and found.directory == xdg / "quiesce"
    assert not found.directory.exists()  # looking creates nothing
    found.directory.mkdir(mode=0o755)
    with pytest.raises(UnsafeRunDir):
        await discover()


def test_targets() -> None:
    assert parse_target(None) is None
    assert parse_target("1234") == 1234
    assert parse_target("s-1a2b") == "s-1a2b"
    d1 = RunningDaemon(PidFile(11, "/x/11.sock", 0.0), pathlib.Path("/x/11.json"))
    d2 = RunningDaemon(PidFile(22, "/x/22.sock", 0.0), pathlib.Path("/x/22.json"))
    where = pathlib.Path("/x")
    assert pick_daemon([d1], None, where) is d1
    assert pick_daemon([d1, d2], 22, where) is d2
    with pytest.raises(TargetError, match=r"2 daemons are running \(pids 11, 22\)"):
        pick_daemon([d1, d2], None, where)
    with pytest.raises(TargetError, match="no running quiesce daemon with pid 33"):
        pick_daemon([d1, d2], 33, where)
    with pytest.raises(TargetError, match="no quiesce daemon is running"):
        pick_daemon([], None, where)
