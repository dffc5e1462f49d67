"""Many process trees stopped at once: 50 sessions, each running one TERM-honouring Bash
tree (a background job, a ``setsid`` member, the foreground), every tree admitted and
seen whole, then one ``agent.abort`` per session sent together; a sample is the time
from sending them until the last answer. The scenario runs its own daemon, whose host
admits 64 process calls (the default admits 8).
"""

from __future__ import annotations

import os
import pathlib
import time

import trio

from benchlib.harness import ABORT_TIMEOUT, Bench, Member, Session, kill_all, now_ms, open_bench
from benchlib.stats import Goal, Series
from protocol.messages.events import ToolProgressEvent
from runtime.proc import cgroups

TREES = 50
MANY_TREE = "sleep 300 & setsid sleep 300 & echo tree-started; sleep 300"
SLEEPS_PER_TREE = 3
MANY_GOAL = Goal(500.0, "< 500 ms for all 50 answers, goal 200 ms")
BEFORE = ("before the first tree-stop work (commit 5326022: process-table scans per tree, polling; "
          "`./scripts/bench --only stop-tree-term --only stop-50-trees` on this machine on "
          "2026-12-01, load average ~4): median 6,654 ms, max 6,763 ms (n=5); before the "
          "second tree-stop work (commit dcb15c8, load average 7 to 10): median 371 ms (n=5); "
          "before the TERM sent as the abort arrives and the cgroup's rmdir left unawaited "
          "(commit 31fb6ad, the full run of 2026-12-02 00:57 UTC): median 217.8 ms (n=5)")
BEFORE_FALLBACK = ("before the second tree-stop work (commit dcb15c8: a full process-table scan "
                   "per tree every 50 ms, members polled every 10 ms; `./scripts/bench --only "
                   "stop-50-trees-fallback` on this machine on 2026-12-01, load average 7 to "
                   "10): median 5,150 ms, max 5,925 ms (n=5); at commit 31fb6ad (the full run "
                   "of 2026-12-02 00:57 UTC; the fallback has no early TERM since): median "
                   "307.4 ms (n=5)")
CONFIG = "[host.admission]\nper_session = 4\n[host.admission.per_class]\nprocess = 64\n"


def _prepared(workdir: pathlib.Path) -> pathlib.Path:
    workdir.mkdir()
    (workdir / "config.toml").write_text(CONFIG)
    return workdir


def _mechanism(bench: Bench) -> str:
    """What the daemon's host uses: a ``quiesce-host-<pid>`` cgroup directory is there."""
    path = None if bench.host_pid is None else cgroups.host_dir(bench.host_pid)
    return cgroups.CGROUP if path is not None and os.path.isdir(path) else cgroups.PROCESS_TREE


def _sleeps(members: list[Member]) -> int:
    return sum(1 for m in members if m.name == "sleep" and m.status != "zombie")


async def _prompt(bench: Bench, session: Session, text: str, done: list[str]) -> None:
    result = await bench.prompt(session, text)
    done.append(result.stop_reason)


async def _one_round(bench: Bench, sessions: list[Session], rep: int,
                     series: Series) -> float | None:
    stop_reasons: list[str] = []
    async with trio.open_nursery() as nursery:
        for n, session in enumerate(sessions):
            nursery.start_soon(_prompt, bench, session, f"tree {rep}.{n}", stop_reasons)
        await bench.wait_for(lambda: all(any(
            isinstance(e, ToolProgressEvent) and e.call_id == f"b{rep}"
            and "tree-started" in e.text for e in s.events) for s in sessions),
            within=60, what="every tree started")
        await bench.wait_members(lambda m: _sleeps(m) >= TREES * SLEEPS_PER_TREE,
                                 within=30, what="every tree's members")
        answers: list[str] = []

        async def abort(session: Session) -> None:
            answer = await bench.request("agent.abort", bench.abort_params(session))
            answers.append(answer.outcome)

        started = now_ms()
        with trio.fail_after(ABORT_TIMEOUT):
            async with trio.open_nursery() as aborts:
                for session in sessions:
                    aborts.start_soon(abort, session)
        elapsed = now_ms() - started
    left = await trio.to_thread.run_sync(bench.members)
    if left:
        series.anomalies.append(f"rep {rep}: {len(left)} tree member(s) left after the answers")
        kill_all(left)
    if answers.count("aborted") != TREES:
        series.anomalies.append(f"rep {rep}: outcomes {sorted(set(answers))}")
    if stop_reasons.count("cancelled") != TREES:
        series.anomalies.append(f"rep {rep}: prompts answered {sorted(set(stop_reasons))}")
    return elapsed


async def stop_many_trees(bench: Bench, n: int, warmup: int) -> Series:
    series = Series("stop-50-trees", f"stop: {TREES} TERM-honouring trees at once (`&`, "
                    "setsid, foreground; one session each), until the last answer",
                    goal=MANY_GOAL)
    series.notes.append(BEFORE)
    await _many(bench, series, n, warmup, "many-trees", {})
    return series


async def stop_many_trees_fallback(bench: Bench, n: int, warmup: int) -> Series:
    """The same, with the host's cgroups forced off (``QUIESCE_CGROUPS=off``): trees found
    by ancestry and session (``runtime.proc.proctree``)."""
    series = Series("stop-50-trees-fallback", f"stop: {TREES} TERM-honouring trees at once, "
                    "no cgroups (`QUIESCE_CGROUPS=off`: the process-tree fallback)",
                    goal=MANY_GOAL)
    series.notes.append(BEFORE_FALLBACK)
    await _many(bench, series, n, warmup, "many-trees-fallback", {"QUIESCE_CGROUPS": "off"})
    return series


async def _many(bench: Bench, series: Series, n: int, warmup: int, name: str,
                env: dict[str, str]) -> None:
    workdir = _prepared(bench.workdir / name)
    config = workdir / "config.toml"
    reps = min(n, 5) + warmup  # fifty trees a repetition: fewer repetitions
    async with open_bench(workdir, {"QUIESCE_CONFIG": str(config), **env}) as own:
        series.notes.append(f"the host's process mechanism: {_mechanism(own)}")
        sessions = []
        for k in range(TREES):
            workspace = workdir / f"ws-{k}"
            workspace.mkdir()
            script = [[{"toolCall": {"id": f"b{rep}", "name": "Bash",
                                     "args": {"command": MANY_TREE}}}] for rep in range(reps)]
            sessions.append(await own.new_session(workspace, script))
        for rep in range(reps):
            began = time.monotonic()
            elapsed = await _one_round(own, sessions, rep, series)
            if elapsed is not None and rep >= warmup:
                series.samples.append(elapsed)
            series.notes.append(f"rep {rep}: {time.monotonic() - began:.1f} s with set-up")
