#!/usr/bin/env python3
"""Crash test of the session logs: SIGKILL a busy ``quiesce serve`` at random moments.

Each round starts a daemon on one data directory, loads every session the earlier rounds
left (checking each), opens new ones up to ``--sessions``, and runs a prompt loop in every
session (Read, Glob and Write calls, text, now and then a stop) until, at a moment the
seeded random generator picks (counted from when every session has begun a turn), the
daemon is killed with SIGKILL. A last daemon then loads every session and checks it, and
shuts down in order.

The checks of a load: ``session.list`` lists every session, none with an error; the log
loads; what was on disk before the load is unchanged; the load added only the repair of
the turns the crash left open (a ``recovered`` result for each unanswered call, one
``turn/end`` ``interrupted``), and of no other turn; every turn has exactly one end and
nothing after it; every call exactly one result, in its turn and step; seqs count up from
0 with no gap. Exit status 1 on any failure. The test suite runs a short mode
(``tests/e2e/test_crash_logs.py``); run it longer by hand, e.g.
``scripts/crashtest --rounds 20 --sessions 8``.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import random
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import trio

from protocol.errors import RemoteError
from protocol.messages.client import (
    AgentAbortParams,
    AgentPromptParams,
    ScriptedProviderConfig,
    SessionLoadParams,
    SessionNewParams,
)
from protocol.messages.common import Empty
from protocol.messages.events import DurableEvent
from protocol.transcript import repair_problems
from runtime.agent.sessionlog import LogContents, read_log
from runtime.clients.daemon_client import DaemonClient, serve_command, spawn_daemon
from runtime.link import ConnectionClosed

TURNS_PER_SCRIPT = 200


@dataclass
class Report:
    seed: int
    rounds: int = 0
    sessions: int = 0
    loads: int = 0
    repaired_turns: int = 0
    kill_delays_s: list[float] = field(default_factory=list)
    prompts_answered: int = 0
    stops_sent: int = 0
    problems: list[str] = field(default_factory=list)


def script(session_no: int) -> list[list[dict[str, Any]]]:
    """Responses for many turns: reads, a write, a text answer, with short model pauses."""
    responses: list[list[dict[str, Any]]] = []
    for n in range(TURNS_PER_SCRIPT):
        responses += [
            [{"toolCall": {"id": f"r{n}", "name": "Read", "args": {"path": "a.txt"}}},
             {"toolCall": {"id": f"g{n}", "name": "Glob", "args": {"pattern": "*.txt"}}}],
            [{"sleepMs": 5},
             {"toolCall": {"id": f"w{n}", "name": "Write",
                           "args": {"path": f"out-{session_no}.txt", "content": f"{n}\n"}}}],
            [{"text": f"turn {n} done "}, {"sleepMs": 10}, {"text": "ok"}],
        ]
    return responses


def check_log(session_id: str, before: LogContents, after: Sequence[DurableEvent]) -> list[str]:
    """What a load may and must have done to one log (see the module's docstring): the
    transcript rulebook's repair, nothing else, and a log that keeps every rule."""
    return [f"{session_id}: {p}" for p in repair_problems(before.events, after)]


async def load_all(daemon: DaemonClient, data_dir: pathlib.Path, known: Sequence[str],
                   report: Report) -> None:
    listed = await daemon.request("session.list", Empty())
    by_id = {s.session_id: s for s in listed.sessions}
    for session_id in known:
        info = by_id.get(session_id)
        if info is None:
            report.problems.append(f"{session_id}: not listed")
            continue
        if info.error is not None:
            report.problems.append(f"{session_id}: listed unreadable: {info.error}")
            continue
        path = data_dir / "sessions" / f"{session_id}.jsonl"
        before = read_log(path)
        try:
            loaded = await daemon.request("session.load", SessionLoadParams(session_id))
        except RemoteError as exc:
            report.problems.append(f"{session_id}: session.load failed: {exc}")
            continue
        report.loads += 1
        after = read_log(path)
        if after.torn_bytes:
            report.problems.append(f"{session_id}: a torn line left after the load")
        if loaded.recovered != bool(before.open_turns()):
            report.problems.append(f"{session_id}: recovered={loaded.recovered} with "
                                   f"{len(before.open_turns())} open turn(s)")
        report.repaired_turns += len(before.open_turns())
        report.problems += check_log(session_id, before, after.events)


async def busy(daemon: DaemonClient, session_id: str, rng: random.Random,
               report: Report) -> None:
    """Prompt after prompt, some stopped after a random delay, until the daemon dies (its
    connection closes). An error answer is a problem, and ends this session's loop."""
    dead = False
    while not dead:
        try:
            async with trio.open_nursery() as nursery:
                async def prompt() -> None:
                    await daemon.request("agent.prompt", AgentPromptParams(session_id, "go"))
                    report.prompts_answered += 1

                nursery.start_soon(prompt)
                if rng.random() < 0.3:
                    await trio.sleep(rng.uniform(0, 0.05))
                    report.stops_sent += 1
                    await daemon.request("agent.abort", AgentAbortParams(session_id))
        except* RemoteError as errors:
            report.problems += [f"{session_id}: answered {exc}" for exc in errors.exceptions]
            dead = True
        except* (ConnectionClosed, trio.BrokenResourceError, trio.ClosedResourceError):
            dead = True


async def one_round(n: int, args: argparse.Namespace, rng: random.Random, env: dict[str, str],
                    data_dir: pathlib.Path, workspace: pathlib.Path, known: list[str],
                    report: Report) -> None:
    async with spawn_daemon(serve_command(), env=env, stderr=args.daemon_log) as daemon:
        await daemon.initialize()
        await load_all(daemon, data_dir, known, report)
        while len(known) < args.sessions * (n + 1) // args.rounds or len(known) < 1:
            result = await daemon.request("session.new", SessionNewParams(
                str(workspace), "auto", ScriptedProviderConfig(script=script(len(known)))))
            known.append(result.session_id)
        delay = rng.uniform(args.min_delay, args.max_delay)
        report.kill_delays_s.append(round(delay, 3))
        logs = [data_dir / "sessions" / f"{session_id}.jsonl" for session_id in known]
        sizes = [log.stat().st_size for log in logs]
        async with trio.open_nursery() as nursery:
            for session_id in known:
                nursery.start_soon(busy, daemon, session_id, random.Random(rng.random()),
                                   report)
            with trio.fail_after(30):  # the delay counts once every session is in a turn
                while True:  # polled: the logs are the daemon's, not ours to be told of
                    if all(log.stat().st_size > size
                           for log, size in zip(logs, sizes, strict=True)):
                        break
                    await trio.sleep(0.005)
            await trio.sleep(delay)
            daemon.process.send_signal(signal.SIGKILL)
            with trio.fail_after(10):
                await daemon.process.wait()
            nursery.cancel_scope.cancel()
    report.rounds += 1


async def run(args: argparse.Namespace, root: pathlib.Path, report: Report) -> None:
    data_dir, workspace, run_dir = root / "data", root / "workspace", root / "run"
    workspace.mkdir()
    run_dir.mkdir(mode=0o700)
    (workspace / "a.txt").write_text("some text\n" * 20)
    env = dict(os.environ, QUIESCE_DATA_DIR=str(data_dir), XDG_RUNTIME_DIR=str(run_dir))
    env.pop("QUIESCE_LOG_FAULTS", None)
    rng = random.Random(args.seed)
    known: list[str] = []
    for n in range(args.rounds):
        await one_round(n, args, rng, env, data_dir, workspace, known, report)
    async with spawn_daemon(serve_command(), env=env, stderr=args.daemon_log) as daemon:
        await daemon.initialize()
        await load_all(daemon, data_dir, known, report)
    report.sessions = len(known)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/crashtest", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=10, help="daemons killed (default 10)")
    parser.add_argument("--sessions", type=int, default=6,
                        help="sessions by the last round, opened over the rounds (default 6)")
    parser.add_argument("--seed", type=int, default=None, help="random seed (default: time)")
    parser.add_argument("--min-delay", type=float, default=0.2,
                        help="shortest busy time before the kill, s (default 0.2)")
    parser.add_argument("--max-delay", type=float, default=2.0,
                        help="longest busy time before the kill, s (default 2.0)")
    parser.add_argument("--json", type=pathlib.Path, help="write the report here too")
    parser.add_argument("--keep", action="store_true", help="keep the data directory")
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.sessions < 1 or not 0 <= args.min_delay <= args.max_delay:
        parser.error("--rounds and --sessions must be at least 1, and "
                     "0 <= --min-delay <= --max-delay")
    seed = args.seed if args.seed is not None else int(time.time())
    report = Report(seed)
    root = pathlib.Path(tempfile.mkdtemp(prefix="quiesce-crash-"))
    with (root / "daemons.log").open("wb") as args.daemon_log:
        try:
            trio.run(run, args, root, report)
        finally:
            if args.keep:
                print(f"kept {root}", file=sys.stderr)
            else:
                shutil.rmtree(root, ignore_errors=True)
    data = asdict(report)
    if args.json:
        args.json.write_text(json.dumps(data, indent=2) + "\n")
    print(f"crashtest seed {seed}: {report.rounds} kills, {report.sessions} sessions, "
          f"{report.loads} loads, {report.repaired_turns} turns repaired, "
          f"{report.prompts_answered} prompts answered, {report.stops_sent} stops; "
          f"{len(report.problems)} problem(s)")
    for problem in report.problems:
        print(f"  {problem}")
    return 1 if report.problems else 0


if __name__ == "__main__":
    sys.exit(main())
