"""Stop latency: ``agent.abort`` sent until its answer, per tool class (the floors beside
it are :mod:`benchlib.floors`).

Every repetition is a fresh prompt in one session of the same daemon (the
session's script holds one response per repetition). The abort is sent only
once the tool is provably running: for Bash, once its progress output says the
tree is up *and* the expected members are seen with psutil; for Grep, on its
``tool/call`` event plus a short delay (and the host's answer to
``tools.abort``, reported in the ``tool/abort`` event, must say the body was
running, or the repetition is flagged). After each process-tree repetition,
every process carrying the run's marker (other than daemon and host) is a
survivor and is reported.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import trio

from benchlib.harness import ABORT_TIMEOUT, Bench, Member, Session, kill_all
from benchlib.stats import Goal, Series
from host.tools.context import HostToolConfig
from protocol.messages.client import AgentAbortResult, AgentPromptResult
from protocol.messages.events import (
    ToolAbortEvent,
    ToolCallEvent,
    ToolProgressEvent,
    TurnEnd,
)

GREP_FILE_BYTES = 256 * 1024**3
GREP_PATTERN = "zzz"
"""ripgrep reading a sparse file (named explicitly, so read whole) finds nothing for
minutes: a Grep that is in flight when stopped, in a process of its own."""
SIDE_BY_SIDE = ("side by side with commit e33c36a (before the small local Read on the loop "
                "and the instant handlers), `--only` runs alternating on this machine on "
                "2026-12-02 between 05:25 and 06:23 UTC, {} pairs, their medians: ")
GREP_DELAY = 0.2
"""Seconds between the Grep's ``tool/call`` event and the abort (the call reaches the host)."""

# A TERM-honouring tree: a background job, a setsid'd member, a double fork (orphaned to
# the host, a subreaper), a nohup'd job, and the foreground member. The progress marker
# is printed once every member has been started.
HONOURING_TREE = ("sleep 60 & setsid sleep 60 & ( sleep 60 & ) ; "
                  "nohup sleep 60 >/dev/null 2>&1 & echo tree-started; sleep 60")
HONOURING_SLEEPS = 5
# A tree with one member that ignores TERM (the ignored disposition survives its exec).
IGNORING_TREE = ("( trap '' TERM; exec sleep 60 ) & sleep 60 & setsid sleep 60 & "
                 "echo tree-started; sleep 60")
IGNORING_SLEEPS = 4

READ_ONLY_GOAL = Goal(10.0, "median < 10 ms")
HONOURING_GOAL = Goal(10.0, "median < 10 ms incl. reaping every descendant")
SIBLINGS_GOAL = Goal(5.0, "< 5 ms")


def kill_grace() -> float:
    """The host's kill grace: ``quiesce serve`` starts its host with the default config."""
    return HostToolConfig().kill_grace


@dataclass
class Rep:
    """One stopped turn: the client's round trip and what the daemon answered."""

    rtt_ms: float
    answer: AgentAbortResult
    prompt: AgentPromptResult | None


async def stop_one(bench: Bench, session: Session, text: str,
                   ready: Callable[[], Awaitable[None]]) -> Rep:
    """Prompt; once ``ready`` returns, send ``agent.abort`` and time it; await the prompt."""
    prompts: list[AgentPromptResult] = []
    answered = trio.Event()

    async def prompt() -> None:
        prompts.append(await bench.prompt(session, text))
        answered.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(prompt)
        await ready()
        try:
            with trio.fail_after(ABORT_TIMEOUT):
                rtt, answer = await bench.timed("agent.abort", bench.abort_params(session))
        except trio.TooSlowError:
            raise TimeoutError(f"agent.abort did not answer within {ABORT_TIMEOUT:g} s") from None
        with trio.move_on_after(ABORT_TIMEOUT):
            await answered.wait()
        nursery.cancel_scope.cancel()
    return Rep(rtt, answer, prompts[0] if prompts else None)


def check_answer(series: Series, rep: Rep, i: int, expected: dict[str, str]) -> None:
    """Record an anomaly if the stop did not do what the scenario claims to measure."""
    answer = rep.answer
    if answer.outcome != "aborted":
        series.anomalies.append(f"rep {i}: outcome {answer.outcome!r}, not 'aborted'")
        return
    codes = {c.call_id: c.code for c in answer.tool_calls}
    if codes != expected:
        series.anomalies.append(f"rep {i}: call codes {codes}, expected {expected}")
    if rep.prompt is None:
        series.anomalies.append(f"rep {i}: agent.prompt did not answer after the stop")
    elif rep.prompt.stop_reason != "cancelled":
        series.anomalies.append(f"rep {i}: the prompt answered {rep.prompt.stop_reason!r}")


def host_states(session: Session, turn_id: str | None) -> dict[str, tuple[str, bool]]:
    return {e.call_id: (e.host_state, e.body_invoked) for e in session.events
            if isinstance(e, ToolAbortEvent) and e.turn_id == turn_id}


def turn_end_seen(session: Session, turn_id: str | None) -> bool:
    return any(isinstance(e, TurnEnd) and e.turn_id == turn_id for e in session.events)


async def _stop_grep(bench: Bench, series: Series, n: int, warmup: int) -> None:
    workspace = bench.workdir / f"ws-{series.key}"
    workspace.mkdir()
    (workspace / "big.txt").write_bytes(b"")
    os.truncate(workspace / "big.txt", GREP_FILE_BYTES)  # sparse: no disk used
    script = [[{"toolCall": {"id": f"g{i}", "name": "Grep",
                             "args": {"pattern": GREP_PATTERN, "path": "big.txt"}}}]
              for i in range(warmup + n)]
    session = await bench.new_session(workspace, script)
    for i in range(warmup + n):
        call_id = f"g{i}"

        async def ready(call_id: str = call_id) -> None:
            await bench.wait_for(lambda: any(
                isinstance(e, ToolCallEvent) and e.call_id == call_id for e in session.events),
                what=f"tool/call {call_id}")
            await trio.sleep(GREP_DELAY)

        rep = await stop_one(bench, session, f"grep {i}", ready)
        check_answer(series, rep, i, {call_id: "ABORTED"})
        # A read-only stop does not wait for the host's answer to tools.abort; the
        # tool/abort event that reports it follows the agent.abort answer.
        turn_id = rep.answer.turn_id
        with trio.move_on_after(2.0):
            await bench.wait_for(
                lambda c=call_id, t=turn_id: c in host_states(session, t),  # type: ignore[misc]
                what=f"tool/abort {call_id}")
        state = host_states(session, turn_id).get(call_id)
        if state is None or not state[1]:
            series.anomalies.append(f"rep {i}: the host did not report the Grep body running "
                                    f"({state})")
        if not turn_end_seen(session, rep.answer.turn_id):
            series.anomalies.append(f"rep {i}: agent.abort answered before turn/end")
        if i >= warmup:
            series.samples.append(rep.rtt_ms)
            series.add_extra("settledMs", rep.answer.settled_ms)


async def stop_read_only(bench: Bench, n: int, warmup: int) -> Series:
    series = Series("stop-read-only", "stop: stuck read-only call (Grep: ripgrep reading a "
                    f"sparse {GREP_FILE_BYTES // 1024**3} GiB file)", goal=READ_ONLY_GOAL)
    series.notes.append(SIDE_BY_SIDE.format(9) + "e33c36a 5.66 to 11.5 ms (median of the 9: 6.20), "
                        "this code 5.30 to 8.03 ms (5.68)")
    await _stop_grep(bench, series, n, warmup)
    return series


def _sleeps(count: int) -> Callable[[list[Member]], bool]:
    def enough(members: list[Member]) -> bool:
        return sum(1 for m in members if m.name == "sleep" and m.status != "zombie") >= count
    return enough


def _has_term_ignoring(count: int) -> Callable[[list[Member]], bool]:
    def enough(members: list[Member]) -> bool:
        return _sleeps(count)(members) and any(m.term_ignored for m in members)
    return enough


async def _stop_tree(bench: Bench, series: Series, n: int, warmup: int, *, name: str,
                     command: str, members_ready: Callable[[list[Member]], bool],
                     sandbox: str | None = None) -> None:
    workspace = bench.workdir / f"ws-{name}"
    workspace.mkdir()
    script = [[{"toolCall": {"id": f"b{i}", "name": "Bash", "args": {"command": command}}}]
              for i in range(warmup + n)]
    session = await bench.new_session(workspace, script, sandbox=sandbox)
    survivors_total = 0
    for i in range(warmup + n):
        call_id = f"b{i}"
        seen: list[int] = []

        async def ready(call_id: str = call_id, seen: list[int] = seen) -> None:
            await bench.wait_for(lambda: "tree-started" in "".join(
                e.text for e in session.events
                if isinstance(e, ToolProgressEvent) and e.call_id == call_id),
                what=f"tree-started from {call_id}")
            members = await bench.wait_members(members_ready, what=f"the tree of {call_id}")
            seen.append(len(members))

        rep = await stop_one(bench, session, f"{name} {i}", ready)
        after = await trio.to_thread.run_sync(bench.members)
        check_answer(series, rep, i, {call_id: "ABORTED"})
        if not turn_end_seen(session, rep.answer.turn_id):
            series.anomalies.append(f"rep {i}: agent.abort answered before turn/end")
        if after:
            survivors_total += len(after)
            series.anomalies.append(f"rep {i}: {len(after)} tree member(s) present right after "
                                    f"agent.abort answered: {[m.describe() for m in after]}")
            kill_all(after)
        result = session.tool_result(rep.answer.turn_id, call_id)
        details = result.details if result is not None else {}
        if details.get("survivors"):
            series.anomalies.append(f"rep {i}: the host reported survivors {details['survivors']}")
        if i >= warmup:
            series.samples.append(rep.rtt_ms)
            series.add_extra("settledMs", rep.answer.settled_ms)
            series.add_extra("members", float(seen[0] if seen else 0))
            for key in ("killMs", "processesKilled", "killedAfterGrace"):
                value = details.get(key)
                if isinstance(value, int | float):
                    series.add_extra(key, float(value))
    series.notes.append(f"survivors seen by psutil right after the answers: {survivors_total}")


async def stop_term_honouring(bench: Bench, n: int, warmup: int) -> Series:
    series = Series("stop-tree-term", "stop: TERM-honouring process tree (Bash: `&`, setsid, "
                    "double fork, nohup)", goal=HONOURING_GOAL)
    series.notes.append("before the first tree-stop work (commit 5326022, the same command "
                        "and machine on 2026-12-01, load average ~4): median 107.2 ms, "
                        "max 158.7 ms (n=15); "
                        "before the second tree-stop work (commit dcb15c8, load average 7 to "
                        "10): median 15.6 ms (n=15); before the TERM sent as the abort "
                        "arrives and the cgroup's rmdir left unawaited (commit 31fb6ad, the "
                        "full run of 2026-12-02 00:57 UTC): median 11.5 ms (n=15)")
    series.notes.append(SIDE_BY_SIDE.format(9) + "e33c36a 8.05 to 11.4 ms (median of the 9: 9.30), "
                        "this code 7.57 to 11.0 ms (8.70)")
    await _stop_tree(bench, series, n, warmup, name="tree-term", command=HONOURING_TREE,
                     members_ready=_sleeps(HONOURING_SLEEPS))
    return series


async def stop_term_honouring_sandboxed(bench: Bench, n: int, warmup: int) -> Series:
    """``stop-tree-term``'s tree in a sandboxed session: the stop path is the same (TERM,
    ``cgroup.kill``); only the spawn differs (forked, confined by Landlock)."""
    series = Series("stop-tree-term-sandboxed", "stop: TERM-honouring process tree, "
                    "sandboxed (workspace-write)", goal=HONOURING_GOAL)
    await _stop_tree(bench, series, n, warmup, name="tree-term-sandboxed",
                     command=HONOURING_TREE, members_ready=_sleeps(HONOURING_SLEEPS),
                     sandbox="workspace-write")
    return series


async def stop_term_ignoring(bench: Bench, n: int, warmup: int) -> Series:
    grace = kill_grace()
    goal = Goal(grace * 1000 + 50.0, f"kill grace ({grace:g} s) + 50 ms")
    series = Series("stop-tree-ignoring", "stop: process tree with a TERM-ignoring member "
                    "(`trap '' TERM`)", goal=goal)
    series.notes.append(f"kill grace: {grace:g} s (the host's default `HostToolConfig."
                        "kill_grace`; `quiesce serve` passes no host config)")
    await _stop_tree(bench, series, n, warmup, name="tree-ignoring", command=IGNORING_TREE,
                     members_ready=_has_term_ignoring(IGNORING_SLEEPS))
    series.extra["overGraceMs"] = [s - grace * 1000 for s in series.samples]
    return series


async def stop_permission_siblings(bench: Bench, n: int, warmup: int) -> Series:
    """A Write pending permission, with a Write and a Read behind it never dispatched."""
    series = Series("stop-undispatched", "stop: permission-pending Write + 2 undispatched "
                    "siblings (mode `ask`)", goal=SIBLINGS_GOAL)
    series.notes.append(SIDE_BY_SIDE.format(11) + "e33c36a 3.96 to 8.23 ms (median of the "
                        "11: 5.13), this code 3.44 to 9.01 ms (4.70)")
    workspace = bench.workdir / "ws-permission"
    workspace.mkdir()
    script = [[{"toolCall": {"id": f"w{i}", "name": "Write",
                             "args": {"path": f"x{i}.txt", "content": "no"}}},
               {"toolCall": {"id": f"v{i}", "name": "Write",
                             "args": {"path": f"y{i}.txt", "content": "no"}}},
               {"toolCall": {"id": f"r{i}", "name": "Read", "args": {"path": f"x{i}.txt"}}}]
              for i in range(warmup + n)]
    session = await bench.new_session(workspace, script, mode="ask")
    for i in range(warmup + n):
        asked = len(session.permission_requests)

        async def ready(asked: int = asked) -> None:
            await bench.wait_for(lambda: len(session.permission_requests) > asked,
                                 what="a permission request")

        rep = await stop_one(bench, session, f"write {i}", ready)
        check_answer(series, rep, i, {f"w{i}": "ABORTED_BEFORE_DISPATCH",
                                      f"v{i}": "ABORTED_BEFORE_DISPATCH",
                                      f"r{i}": "ABORTED_BEFORE_DISPATCH"})
        withdrawn = session.permission_requests[asked].request_id
        with trio.move_on_after(5):
            while withdrawn not in session.withdrawn:
                await bench.changed.wait()
        if withdrawn not in session.withdrawn:
            series.anomalies.append(f"rep {i}: permission request {withdrawn} never withdrawn")
        if any((workspace / f"{p}{i}.txt").exists() for p in ("x", "y")):
            series.anomalies.append(f"rep {i}: a Write ran")
        if i >= warmup:
            series.samples.append(rep.rtt_ms)
            series.add_extra("settledMs", rep.answer.settled_ms)
    return series
