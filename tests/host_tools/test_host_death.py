"""What a real host's process trees do when the host dies, and escapees it adopts.

- Parent-death signal: a tool root (the host's direct child) dies with the host,
  with nobody sweeping after it (here the test process is the "runtime" and does
  no cleanup). Only direct children get the signal; descendants rely on the group
  and marker kill.
- Adopted orphans: a member that clears its environment and calls ``setsid``
  carries no marker and leaves the tree's session; once orphaned it is the host's
  child (the host is a child subreaper), and the host kills it when a tree stops,
  sparing the live tool roots of other calls.
"""

from __future__ import annotations

import os
import pathlib
import random
import signal
from collections.abc import Iterator

import psutil  # type: ignore[import-untyped, unused-ignore]
import pytest
import trio

from runtime.link import ConnectionClosed
from runtime.proc.proctree import ENV_MARKER
from tests.conftest import Marked
from tests.kit.host import Host, running_host
from tests.kit.waiters import wait_until
from tests.support import command_line

FAST = {"tools": {"kill_grace": 0.3}}


def _dead(proc: psutil.Process) -> bool:
    try:
        return bool(proc.status() == psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return True


def _reap_if_ours(proc: psutil.Process) -> None:
    try:
        if proc.ppid() == os.getpid():
            os.waitpid(proc.pid, 0)
    except (psutil.NoSuchProcess, ChildProcessError):
        pass


def _with_args(argv: list[str]) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        if proc.info["cmdline"] == argv and not _dead(proc):
            found.append(proc)
    return found


@pytest.fixture
def escapee() -> Iterator[list[str]]:
    """The command line of an escapee nobody can find by marker; killed if it survives."""
    argv = ["sleep", f"{random.randrange(3000, 9000)}.{random.randrange(10**6):06d}"]
    yield argv
    for proc in _with_args(argv):
        proc.kill()
        _reap_if_ours(proc)


async def _run(host: Host, call_id: str, command: str, results: dict[str, object]) -> None:
    results[call_id] = await host.execute(call_id, "Bash", {"command": command})


async def _wait_output(host: Host, call_id: str, text: str) -> None:
    await wait_until(lambda: text in host.output_text(call_id), 10)


async def test_a_tool_root_dies_with_its_host(tmp_path: pathlib.Path, marked: Marked) -> None:
    async with running_host(str(tmp_path), marked.env(), config=FAST) as host:
        host_pid = host.link.pid
        assert host_pid is not None
        crashed: list[bool] = []

        async def run() -> None:
            with pytest.raises(ConnectionClosed):
                await host.execute("b1", "Bash", {"command": "echo up; exec sleep 300"})
            crashed.append(True)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(run)
            await _wait_output(host, "b1", "up")
            # The tree is its root alone, so the parent-death signal is all that can kill it.
            (root,) = psutil.Process(host_pid).children()
            await wait_until(lambda: command_line(root) == "sleep 300", 5)
            os.kill(host_pid, signal.SIGKILL)
            await wait_until(lambda: _dead(root), 2)
        assert crashed == [True]
    _reap_if_ours(root)  # the test process is a subreaper: the dead root came to us


async def test_an_env_cleared_setsid_orphan_dies_with_the_stop(
        tmp_path: pathlib.Path, marked: Marked, escapee: list[str]) -> None:
    hide = f"env -i setsid sh -c '{' '.join(escapee)} &'"
    results: dict[str, object] = {}
    async with running_host(str(tmp_path), marked.env(), config=FAST) as host:
        host_pid = host.link.pid
        async with trio.open_nursery() as nursery:
            # Another call's live tree: its root, a background job, a setsid child, and an
            # env-cleared orphan still in its session (so attributable: it is spared).
            nursery.start_soon(_run, host, "other", "sleep 301 & setsid sleep 302 & "
                               "env -i sh -c 'sleep 304 &'; echo up; sleep 303", results)
            await _wait_output(host, "other", "up")
            await wait_until(lambda: any(  # its shell exits without waiting: let it exec
                command_line(p) == "sleep 304" and p.ppid() == host_pid
                for p in psutil.Process(host_pid).children(recursive=True)), 5)
            other = {p.pid: p for p in psutil.Process(host_pid).children(recursive=True)}
            nursery.start_soon(_run, host, "b1", f"{hide}; echo up; sleep 300", results)
            await _wait_output(host, "b1", "up")
            await wait_until(lambda: len(_with_args(escapee)) == 1, 5)
            (orphan,) = _with_args(escapee)
            assert orphan.ppid() == host_pid  # adopted by the host, a subreaper
            assert ENV_MARKER not in orphan.environ()  # no marker, and not in any tool
            roots = [p for p in psutil.Process(host_pid).children()
                     if p != orphan and command_line(p) != "sleep 304"]
            assert len(roots) == 2  # b1's and other's: the orphan is in neither session
            assert os.getsid(orphan.pid) not in {os.getsid(p.pid) for p in roots}
            await host.abort("b1", "Bash")
            await wait_until(lambda: "b1" in results, 5)
            assert _dead(orphan), "the escapee outlived its call's result"
            assert all(not _dead(p) for p in other.values()), "another call's tree was hit"
            await host.abort("other", "Bash")
        assert [p.pid for p in psutil.Process(host_pid).children()] == []


async def test_an_env_cleared_setsid_orphan_dies_with_a_normal_end(
        tmp_path: pathlib.Path, marked: Marked, escapee: list[str]) -> None:
    command = f"env -i setsid sh -c '{' '.join(escapee)} &'; echo done"
    async with running_host(str(tmp_path), marked.env(), config=FAST) as host:
        result = await host.execute("b1", "Bash", {"command": command})
        assert result.code is None and "done" in str(result.content)
        assert _with_args(escapee) == [], "the escapee outlived its call's result"
        host_pid = host.link.pid
        assert host_pid is not None
        assert psutil.Process(host_pid).children() == []
