"""``quiesce serve`` starts its host before its own imports and the daemon adopts it; a
host the daemon does not adopt is killed and reaped, and nothing outlives the runtime."""

from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys

import psutil
import pytest
import trio
import trio.testing

from protocol.messages.client import DebugRunToolParams, SessionNewParams
from protocol.messages.common import InitializeParams, InitializeResult, PeerInfo
from protocol.methods import CLIENT_TO_RUNTIME, RUNTIME_TO_CLIENT
from protocol.version import PROTOCOL_VERSION
from runtime.cli import _spawn_host
from runtime.clients.daemon_client import DaemonClient, serve_command, spawn_daemon
from runtime.daemon.cli_options import host_command
from runtime.daemon.daemon import Daemon
from runtime.link import Endpoint
from runtime.supervision.link import default_host_command
from runtime.supervision.popen_process import PopenProcess
from tests.conftest import Marked
from tests.support import MARK_VAR, command_line, marked_processes

ADOPTED = "adopted (started before the runtime's imports)"


def log_lines(path: pathlib.Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.startswith("{")]


def reaped(pid: int) -> bool:
    """``pid`` is not (or no longer) an unreaped child of this process."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return True
    return False


async def read_one(daemon: DaemonClient, workspace: pathlib.Path) -> None:
    new = await daemon.request("session.new", SessionNewParams(str(workspace), "auto"))
    answer = await daemon.request("debug.runTool", DebugRunToolParams(
        new.session_id, "Read", {"path": "notes.txt"}))
    assert not answer.result.is_error, answer.result
    assert "alpha" in answer.result.content[0].text


def test_serve_spawns_the_command_the_link_would() -> None:
    with _spawn_host(host_command(None)) as popen:  # closes its pipes and reaps it
        popen.kill()
        assert popen.args == default_host_command()


async def test_serve_adopts_its_early_host(tmp_path: pathlib.Path, marked: Marked) -> None:
    (tmp_path / "notes.txt").write_text("alpha\n")
    errors = tmp_path / "stderr.log"
    with trio.fail_after(30), errors.open("wb") as stderr:
        async with spawn_daemon(env=marked.env(), stderr=stderr) as daemon:
            info = await daemon.initialize()
            host_pid = info.capabilities["host"]["pid"]
            runtime = psutil.Process(daemon.process.pid)
            # One child, the host that answered initialize, adopted, not spawned later.
            assert [child.pid for child in runtime.children()] == [host_pid]
            assert info.capabilities["host"]["tools"]
            await read_one(daemon, tmp_path)
        assert daemon.process.returncode == 0
    lines = log_lines(errors)
    adopted = [line for line in lines if line.get("msg") == f"host {host_pid} {ADOPTED}"]
    assert adopted and adopted[0]["pid"] == daemon.process.pid
    assert not psutil.pid_exists(host_pid) or psutil.Process(host_pid).status() == "zombie"


async def test_a_killed_adopted_host_is_replaced(tmp_path: pathlib.Path,
                                                 marked: Marked) -> None:
    (tmp_path / "notes.txt").write_text("alpha\n")
    with trio.fail_after(30):
        async with spawn_daemon(env=marked.env()) as daemon:
            info = await daemon.initialize()
            first = info.capabilities["host"]["pid"]
            os.kill(first, signal.SIGKILL)
            while psutil.pid_exists(first):  # reaped by the runtime: its link saw it die
                await trio.sleep(0.02)
            await read_one(daemon, tmp_path)
            children = psutil.Process(daemon.process.pid).children()
            assert len(children) == 1 and children[0].pid != first
        assert daemon.process.returncode == 0


async def test_a_host_for_another_command_is_killed_and_reaped(
        tmp_path: pathlib.Path, marked: Marked, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(marked.run_dir))
    monkeypatch.setenv(MARK_VAR, marked.mark)  # the hosts inherit our environment
    popen = _spawn_host(host_command(None))  # as serve does, before trio
    early = PopenProcess(popen)
    other = [sys.executable, "-m", "runtime", "host"]  # a working host, another command
    daemon = Daemon(host_command=other, data_dir=marked.data_dir, first_host=early)
    ours, theirs = trio.testing.memory_stream_pair()
    client = Endpoint("daemon", theirs, theirs, incoming=RUNTIME_TO_CLIENT,
                      outgoing=CLIENT_TO_RUNTIME)
    served = trio.Event()

    async def serve() -> None:
        await daemon.serve(ours, ours)
        served.set()

    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(serve)
            await nursery.start(client.run)
            info: InitializeResult = await client.request("initialize", InitializeParams(
                PROTOCOL_VERSION, PeerInfo("test", "0")))
            host_pid = info.capabilities["host"]["pid"]
            assert host_pid != early.pid
            assert psutil.Process(host_pid).cmdline()[1:] == other[1:]
            # Killed and reaped before the daemon's own host was started.
            assert popen.returncode == -signal.SIGKILL
            assert reaped(early.pid)
            assert [proc.pid for proc in marked_processes(marked.mark)] == [host_pid]
            await theirs.send_stream.aclose()  # EOF: the daemon stops its host and ends
            with trio.fail_after(15):
                await served.wait()
            nursery.cancel_scope.cancel()  # the test's client endpoint
    assert not psutil.pid_exists(host_pid) or reaped(host_pid)


def test_a_failed_serve_kills_and_reaps_its_early_host(tmp_path: pathlib.Path,
                                                      marked: Marked) -> None:
    # The early host is spawned before the command line is fully checked. Its stderr is
    # the runtime's: a file, so that run() returns when the runtime exits, not the host.
    errors = tmp_path / "stderr.log"
    with errors.open("wb") as stderr:
        done = subprocess.run(serve_command("--bogus"), env=marked.env(),
                              stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                              stderr=stderr, check=False)
    # At once, not once it has read EOF after its imports: it was killed and reaped.
    assert not marked_processes(marked.mark)
    assert done.returncode == 2
    assert "unrecognized arguments: --bogus" in errors.read_text()


async def test_a_runtime_killed_before_the_handshake_leaves_no_host(marked: Marked) -> None:
    async with spawn_daemon(env=marked.env(), stderr=subprocess.DEVNULL) as daemon:
        runtime = psutil.Process(daemon.process.pid)
        with trio.fail_after(10):  # the host, by its command line: not a passing child
            while not (hosts := [child for child in runtime.children()
                                 if " -m host" in command_line(child)]):
                await trio.sleep(0.005)
        (host,) = hosts
        daemon.process.kill()
        # The host reads EOF on its stdin (the runtime held the only write end) and exits;
        # the marked fixture fails the test if it is still there.
        with trio.fail_after(10):
            while host.is_running() and host.status() != psutil.STATUS_ZOMBIE:
                await trio.sleep(0.02)
