"""``python -m runtime ops …`` as a subprocess, against an ops socket served in the test."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import time
from typing import Any

import trio

from protocol.causes import OperatorCause
from protocol.messages.events import ToolResultEvent, TurnEnd, TurnOutcome
from runtime.daemon.ops.pidfile import PidFile, write_pid_file
from runtime.daemon.ops.server import OpsServer
from tests.ops.support import FakeBackend, tool_call, turn_start

PID = os.getpid()


async def ops(*args: str, within: float = 15.0) -> subprocess.CompletedProcess[bytes]:
    with trio.fail_after(within):
        return await trio.run_process([sys.executable, "-m", "runtime", "ops", *args],
                                      capture_stdout=True, capture_stderr=True, check=False)


def out(done: subprocess.CompletedProcess[bytes]) -> str:
    return done.stdout.decode()


def err(done: subprocess.CompletedProcess[bytes]) -> str:
    return done.stderr.decode()


def as_json(done: subprocess.CompletedProcess[bytes]) -> Any:
    assert done.returncode == 0, err(done)
    return json.loads(done.stdout)


async def serve(nursery: trio.Nursery, backend: FakeBackend) -> pathlib.Path:
    path: pathlib.Path = await nursery.start(
        OpsServer(backend, data_dir=pathlib.Path("/data/q")).serve)
    return path


async def test_ls_and_show(nursery: trio.Nursery, xdg: pathlib.Path) -> None:
    path = await serve(nursery, FakeBackend())
    done: dict[str, subprocess.CompletedProcess[bytes]] = {}

    async def run(name: str, *args: str) -> None:
        done[name] = await ops(*args)

    async with trio.open_nursery() as runs:  # independent processes: run them at once
        runs.start_soon(run, "ls", "ls")
        runs.start_soon(run, "ls-json", "ls", "--json")
        runs.start_soon(run, "show-session", "show", "s-stuck")
        runs.start_soon(run, "show-pid", "show", str(PID), "--json")
        runs.start_soon(run, "show-missing", "show", "s-nope")
        runs.start_soon(run, "ls-pid", "ls", "20943")

    # A misused subcommand gets its own usage, and a hint, not the top level's.
    assert done["ls-pid"].returncode == 2
    assert err(done["ls-pid"]).startswith("usage: quiesce ops ls")
    assert "unrecognized arguments: 20943" in err(done["ls-pid"])
    assert "quiesce ops show PID" in err(done["ls-pid"])
    lines = out(done["ls"]).splitlines()
    # Which daemon is which: what it runs, who started it, since when, its data directory.
    identity = lines.pop(0)
    assert identity.startswith(f"daemon {PID}: quiesce daemon, started by pid {os.getppid()} ")
    assert ", since " in identity and identity.endswith("data /data/q"), identity
    assert lines.pop(0) == ""
    assert lines[0].split() == ["PID", "SESSION", "PHASE", "TURN", "AGE", "CALLS", "INBOX",
                                "STOP", "WAIT"]
    assert lines[1].split() == [str(PID), "s-stuck", "running", "t-7", "1m35s", "2", "1",
                                "1m04s", "STUCK"]
    assert lines[2].split() == [str(PID), "s-idle", "idle", "-", "-", "0", "0", "-"]

    [daemon] = as_json(done["ls-json"])
    assert daemon["pid"] == PID and daemon["socket"] == str(path)
    assert daemon["dataDir"] == "/data/q"
    assert daemon["client"]["parentPid"] == os.getppid()
    assert [s["sessionId"] for s in daemon["sessions"]] == ["s-stuck", "s-idle"]
    # Every field, defaults included: an idle session says so, it does not omit keys.
    idle = daemon["sessions"][1]
    assert idle == {"sessionId": "s-idle", "workspace": idle["workspace"], "phase": "idle",
                    "turnId": None, "turnAgeS": None, "stopWaitingS": None, "stuck": False,
                    "inbox": 0, "calls": [], "usage": None}
    assert daemon["sessions"][0]["calls"][0] == {
        "callId": "t-7.write-1", "tool": "Write", "class": "mutating", "state": "aborting",
        "ageS": 63.5, "hook": None}

    text = out(done["show-session"])
    assert done["show-session"].returncode == 0, err(done["show-session"])
    assert "STUCK" in text and "waiting 1m04s" in text
    assert any(line.split() == ["t-7.write-1", "Write", "mutating", "aborting", "1m03s"]
               for line in text.splitlines())

    shown = as_json(done["show-pid"])
    assert shown["pid"] == PID and len(shown["sessions"]) == 2

    assert done["show-missing"].returncode == 1
    assert "no running daemon has session 's-nope'" in err(done["show-missing"])


async def test_abort_force_restart_and_stats(nursery: trio.Nursery, xdg: pathlib.Path) -> None:
    backend = FakeBackend()
    await serve(nursery, backend)
    done: dict[str, subprocess.CompletedProcess[bytes]] = {}

    async def run(name: str, *args: str) -> None:
        done[name] = await ops(*args)

    async with trio.open_nursery() as runs:
        runs.start_soon(run, "abort", "abort", "s-stuck", "--json")
        runs.start_soon(run, "force", "force", "s-stuck", "t-7.write-1")
        runs.start_soon(run, "not-forced", "force", "s-stuck", "t-7.grep-2", "--json")
        runs.start_soon(run, "restart", "restart-host")
        runs.start_soon(run, "stats", "stats", str(PID))
        runs.start_soon(run, "stats-json", "stats", "--json")

    aborted = as_json(done["abort"])
    assert aborted["outcome"] == "aborted"
    assert aborted["cause"] == {"kind": "operator"}
    assert backend.aborts == ["s-stuck"]
    assert done["force"].returncode == 0
    assert "t-7.write-1: forced" in out(done["force"])
    assert done["not-forced"].returncode == 1
    assert json.loads(done["not-forced"].stdout) == {"forced": False,
                                                     "detail": "t-7.grep-2 is not stuck"}
    assert sorted(backend.forced) == [("s-stuck", "t-7.grep-2"), ("s-stuck", "t-7.write-1")]
    assert "host restarted, pid 4100 -> 4200" in out(done["restart"])
    assert backend.restarts == 1
    stats = out(done["stats"])
    assert "median 21.0 ms, p90 48.5 ms, max 64000.0 ms" in stats
    assert "pid 4200, 1 restart(s), 0 crash(es)" in stats
    assert "finished, 0 running" in stats  # says what it counts
    figures = as_json(done["stats-json"])
    assert {"hostCrashes", "tombstones", "turnsRunning", "callsInFlight"} <= set(figures)


async def test_abort_that_does_not_settle_in_time(nursery: trio.Nursery,
                                                  xdg: pathlib.Path) -> None:
    backend = FakeBackend(abort_gate=trio.Event())
    await serve(nursery, backend)
    done = await ops("abort", "s-stuck", "--timeout", "1")
    assert done.returncode == 3
    assert "stays requested" in err(done) and "quiesce ops show s-stuck" in err(done)
    assert backend.aborts == ["s-stuck"]  # the stop reached the daemon
    as_json_too = await ops("abort", "s-stuck", "--timeout", "1", "--json")
    assert as_json_too.returncode == 3
    reported = json.loads(as_json_too.stdout)  # --json: stdout is JSON even on a timeout
    assert reported["exit"] == 3 and "stays requested" in reported["error"]
    unknown = await ops("abort", "s-nope", "--json")
    assert unknown.returncode == 1 and "error" in json.loads(unknown.stdout)
    assert backend.abort_gate is not None
    backend.abort_gate.set()


async def test_tail_a_session(nursery: trio.Nursery, xdg: pathlib.Path) -> None:
    backend = FakeBackend()
    await serve(nursery, backend)
    async with trio.open_nursery() as runs:
        results: list[subprocess.CompletedProcess[bytes]] = []

        async def tail(*args: str) -> None:
            results.append(await ops("tail", *args))

        runs.start_soon(tail, "s-stuck", "--count", "3", "--json")
        await backend.wait_listeners(1, within=10)
        backend.emit("s-stuck", turn_start(1))
        backend.emit("s-idle", turn_start(1, "t-1"))  # another session: filtered out
        backend.emit("s-stuck", tool_call(2))
        backend.emit("s-stuck", ToolResultEvent(3, "t-7", 1, "t-7.write-1", True, "ABORTED",
                                                (), {"forced": True}))
    [done] = results
    events = [json.loads(line) for line in out(as_done(done)).splitlines()]
    assert [(e["pid"], e["sessionId"], e["event"]["kind"]) for e in events] == [
        (PID, "s-stuck", "turn/start"), (PID, "s-stuck", "tool/call"),
        (PID, "s-stuck", "tool/result")]
    assert events[2]["event"]["details"] == {"forced": True}
    await backend.wait_listeners(0)  # the CLI left: its listener is gone

    async with trio.open_nursery() as runs:
        runs.start_soon(tail, "--count", "2")
        await backend.wait_listeners(1, within=10)
        backend.emit("s-idle", turn_start(1, "t-1"))
        backend.emit("s-idle", TurnEnd(2, "t-1", TurnOutcome("aborted", OperatorCause()),
                                       "cancelled"))
    lines = out(as_done(results[1])).splitlines()
    assert lines[0].split()[1:] == [str(PID), "s-idle", "t-1", "turn/start"]
    assert lines[1].split()[1:] == [str(PID), "s-idle", "t-1", "turn/end", "aborted",
                                    "(operator),", "stop", "reason", "cancelled"]


def as_done(done: subprocess.CompletedProcess[bytes]) -> subprocess.CompletedProcess[bytes]:
    assert done.returncode == 0, err(done)
    return done


async def test_stale_files_cleaned_and_an_unsafe_directory_refused(
        nursery: trio.Nursery, xdg: pathlib.Path) -> None:
    run_dir = xdg / "quiesce"
    assert "no quiesce daemon is running" in out(await ops("ls"))
    run_dir.mkdir(mode=0o700)
    stale = os.getppid()
    write_pid_file(run_dir, PidFile(stale, str(run_dir / f"{stale}.sock"), time.time()))
    await serve(nursery, FakeBackend())
    done = await ops("stats")  # the only live daemon is chosen without a pid
    assert done.returncode == 0, err(done)
    assert f"removed the stale files of daemon {stale} (socket refuses" in err(done)
    assert not (run_dir / f"{stale}.json").exists()
    run_dir.chmod(0o755)
    try:
        refused = await ops("ls")
    finally:
        run_dir.chmod(0o700)
    assert refused.returncode == 1 and "refusing it" in err(refused)


async def test_force_without_a_call_names_what_the_stop_waits_on_then_forces_it(
        nursery: trio.Nursery, xdg: pathlib.Path) -> None:
    backend = FakeBackend()
    await serve(nursery, backend)
    done = await ops("force", "s-stuck")
    assert done.returncode == 0, err(done)
    named, forced = out(done).splitlines()
    # The stopped Write (mutating) is what the stop waits on; the queued Grep is not.
    assert named == ("s-stuck: the stop has waited 1m04s on t-7.write-1 (Write, mutating, "
                     "aborting 1m03s): forcing it")
    assert forced.startswith("s-stuck t-7.write-1: forced")
    assert backend.forced == [("s-stuck", "t-7.write-1")]
    idle = await ops("force", "s-idle")
    assert idle.returncode == 1
    assert out(idle).strip() == "s-idle: nothing to force: no stop is waiting"
    assert backend.forced == [("s-stuck", "t-7.write-1")]
