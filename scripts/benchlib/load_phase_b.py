"""Phase B of the load test: thousands of stops interleaved with executions.

``stops`` stops interleaved with executions, spread evenly over ``b_sessions``
sessions (mode ``auto``); ``workers`` loops run in parallel, each going round its
share of the sessions: ``agent.prompt``, a random (seeded) delay of
0..``max_delay_ms``, ``agent.abort``. The scripts hold short calls (Read, Glob, Bash
``true``, Write of ``WRITE_BYTES``) and short model pauses, so stops land before a
turn, in a stream, in a call (a Write's body included), and after the turn ended
(answer ``idle``). Every file a Write targeted must hold, at the end, exactly what one
of its Writes meant to leave (a stopped Write never leaves a partial file). Every
abort and every prompt must answer (each abort under ``trio.fail_after``); an
``aborted`` answer must match a ``cancelled`` prompt of the same turn and an ``idle``
one a turn that ended by itself; every transcript must balance and the session logs
agree with the answers. Every ``sample_every`` stops the daemon's and the host's RSS,
descriptors and CPU time (psutil) and, through the daemon's ops socket, the host's
tombstones are sampled; RSS growth over the phase must stay under ``rss_bound_mb``.
"""

from __future__ import annotations

import pathlib
import random
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

import trio

from benchlib.harness import Bench, Session, now_ms, scripted_call
from benchlib.load_leftovers import Leftovers, session_log, transcript_problems
from benchlib.load_records import LoadConfig, PhaseB, tally, tally_pair
from benchlib.load_sampler import Sampler
from protocol.messages.client import AgentAbortResult, AgentPromptResult
from protocol.messages.events import (
    SessionMeta,
    ToolAbortEvent,
    ToolCallEvent,
    ToolResultEvent,
    TurnEnd,
)
from runtime.clients.ops.client import OpsClient

WRITE_BYTES = 8 * 1024
"""Phase B: the size of each Write (each is in a session's script, so kept small)."""


def _write_content(n: int) -> str:
    """What the Write of turn ``n`` leaves: ``WRITE_BYTES``, starting ``turn n``."""
    return (f"turn {n}\n" * (WRITE_BYTES // 7 + 1))[:WRITE_BYTES]


def torn_writes(workspace: pathlib.Path) -> tuple[int, list[str]]:
    """(Write targets checked, those holding anything but what one of their Writes meant
    to leave, whole: a Write is atomic even when a stop lands in its body)."""
    torn = []
    paths = sorted(workspace.glob("w*.txt"))
    for path in paths:
        text = path.read_text()
        first = text.split("\n", 1)[0]
        n = int(first[5:]) if first.startswith("turn ") and first[5:].isdigit() else -1
        if n < 0 or path.name != f"w{n % 8}.txt" or text != _write_content(n):
            torn.append(f"{path.name}: {len(text)} bytes starting {text[:20]!r}")
    return len(paths), torn


def _phase_b_script(rng: random.Random, turns: int) -> list[list[dict[str, Any]]]:
    """``turns`` pairs (a tool step, a text step), plus a margin. A turn stopped in its
    first step leaves its text step to the next turn, which then ends at once: a turn
    takes at most two responses, so the script never runs out."""
    templates = [
        lambda n: [scripted_call("c0", "Read", path="small.txt"),
                   scripted_call("c1", "Glob", pattern="*.txt")],
        lambda n: [scripted_call("c0", "Bash", command="true")],
        lambda n: [scripted_call("c0", "Read", path="small.txt"),
                   scripted_call("c1", "Bash", command="true")],
        lambda n: [scripted_call("c0", "Write", path=f"w{n % 8}.txt", content=_write_content(n)),
                   scripted_call("c1", "Read", path="small.txt")],
        lambda n: [scripted_call("c0", "Glob", pattern="*.txt"),
                   scripted_call("c1", "Read", path="small.txt"),
                   scripted_call("c2", "Write", path=f"w{n % 8}.txt", content=_write_content(n)),
                   scripted_call("c3", "Bash", command="true")],
    ]
    script: list[list[dict[str, Any]]] = []
    for n in range(turns + 1):
        step: list[dict[str, Any]] = []
        if rng.random() < 0.5:
            step.append({"sleepMs": rng.randint(1, 10)})
        step += rng.choice(templates)(n)
        text: list[dict[str, Any]] = [{"text": "done"}]
        if rng.random() < 0.3:
            text += [{"sleepMs": rng.randint(1, 5)}, {"text": " and more"}]
        script += [step, text]
    return script


async def _prompt_into(bench: Bench, session: Session, text: str,
                       box: list[AgentPromptResult], done: trio.Event) -> None:
    box.append(await bench.prompt(session, text))
    done.set()


@dataclass
class _Progress:
    total: int
    done: int = 0
    next_sample: int = 0


@dataclass
class _Lane:
    """One phase B session: its quota of stops and its own seeded delays."""

    session: Session
    quota: int
    rng: random.Random
    done: int = 0
    broken: bool = False


async def _stop_once(bench: Bench, cfg: LoadConfig, lane: _Lane, out: PhaseB,
                     aborted_by_session: Counter[str]) -> None:
    """One prompt, a random delay, one abort; both must answer and agree."""
    session, k = lane.session, lane.done
    lane.done += 1
    delay = lane.rng.uniform(0.0, cfg.max_delay_ms) / 1000.0
    prompted: list[AgentPromptResult] = []
    answered = trio.Event()
    answer: AgentAbortResult | None = None
    rtt = 0.0
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_prompt_into, bench, session, f"load {k}", prompted, answered)
        await trio.sleep(delay)
        start = now_ms()
        try:
            with trio.fail_after(cfg.abort_timeout):
                answer = await bench.request("agent.abort", bench.abort_params(session))
            rtt = now_ms() - start
        except trio.TooSlowError:
            out.unanswered_aborts.append(f"{session.session_id} stop {k}: no answer within "
                                         f"{cfg.abort_timeout:g} s")
        with trio.move_on_after(cfg.prompt_timeout):
            await answered.wait()
        nursery.cancel_scope.cancel()
    out.delays_ms.append(delay * 1000.0)
    for event in session.events:
        if isinstance(event, ToolAbortEvent):
            tally(out.host_states, event.host_state)
    session.events.clear()
    result = prompted[0] if prompted else None
    if result is None:
        out.unanswered_prompts.append(f"{session.session_id} stop {k}: agent.prompt did not "
                                      f"answer within {cfg.prompt_timeout:g} s")
    else:
        tally(out.prompt_reasons, result.stop_reason)
    if answer is None or result is None:
        lane.broken = True  # this session cannot be trusted any more; the others go on
        return
    out.stops += 1
    tally(out.outcomes, answer.outcome)
    if answer.outcome == "aborted":
        aborted_by_session[session.session_id] += 1
        out.rtt_aborted_ms.append(rtt)
        out.settled_ms.append(answer.settled_ms)
        for call in answer.tool_calls:
            tally_pair(out.codes, call.tool, call.code or "ok")
        if result.stop_reason != "cancelled" or result.turn_id != answer.turn_id:
            out.inconsistent.append(f"{session.session_id} stop {k}: abort stopped "
                                    f"{answer.turn_id}, the prompt answered "
                                    f"{result.stop_reason!r} for {result.turn_id}")
    else:
        out.rtt_idle_ms.append(rtt)
        if result.stop_reason != "end_turn":
            out.inconsistent.append(f"{session.session_id} stop {k}: abort answered idle, the "
                                    f"prompt {result.stop_reason!r}")


async def _worker(bench: Bench, cfg: LoadConfig, lanes: list[_Lane], out: PhaseB,
                  progress: _Progress, sampler: Sampler,
                  aborted_by_session: Counter[str]) -> None:
    """Round robin over this worker's sessions until each has had its quota of stops."""
    while True:
        live = [lane for lane in lanes if lane.done < lane.quota and not lane.broken]
        if not live:
            return
        for lane in live:
            await _stop_once(bench, cfg, lane, out, aborted_by_session)
            progress.done += 1
            if progress.done >= progress.next_sample:
                progress.next_sample += cfg.sample_every
                out.samples.append(await sampler.sample(progress.done))


async def phase_b(bench: Bench, cfg: LoadConfig, ops: OpsClient | None, out: PhaseB) -> None:
    count = max(1, min(cfg.b_sessions, cfg.stops))
    workers = max(1, min(cfg.workers, count))
    quotas = [cfg.stops // count + (1 if j < cfg.stops % count else 0) for j in range(count)]
    lanes: list[_Lane] = []
    for j, quota in enumerate(quotas):
        rng = random.Random(cfg.seed * 1_000_003 + j)
        workspace = bench.workdir / f"ws-load-b{j}"
        workspace.mkdir()
        (workspace / "small.txt").write_text("a small file\n")
        session = await bench.new_session(workspace, _phase_b_script(rng, quota))
        lanes.append(_Lane(session, quota, rng))
    out.sessions = count
    out.workers = workers
    sampler = Sampler(bench, ops)
    progress = _Progress(cfg.stops, next_sample=cfg.sample_every)
    out.samples.append(await sampler.sample(0))
    aborted_by_session: Counter[str] = Counter()
    started = time.monotonic()
    async with trio.open_nursery() as nursery:
        for w in range(workers):
            nursery.start_soon(_worker, bench, cfg, lanes[w::workers], out, progress, sampler,
                               aborted_by_session)
    out.duration_s = time.monotonic() - started
    out.leftovers = Leftovers.seen(await trio.to_thread.run_sync(bench.members))
    await out.leftovers.wait_out(bench)
    await trio.sleep(0.5)  # late tool/abort events of the last stops
    for lane in lanes:
        for event in lane.session.events:
            if isinstance(event, ToolAbortEvent):
                tally(out.host_states, event.host_state)
    if out.samples[-1].stops != progress.done:
        out.samples.append(await sampler.sample(progress.done))
    if ops is not None:
        stats = await ops.stats()
        out.ops_stats = {f: getattr(stats, f) for f in stats.__struct_fields__}
    for j in range(count):
        checked, torn = torn_writes(bench.workdir / f"ws-load-b{j}")
        out.write_targets += checked
        out.torn_writes += torn
    for lane in lanes:
        session = lane.session
        log = session_log(bench, session)
        out.log_events += sum(1 for e in log if not isinstance(e, SessionMeta))
        problems = transcript_problems(log)
        aborted_on_disk = 0
        for event in log:
            if isinstance(event, TurnEnd):
                tally(out.log_turns, event.end.kind)
                aborted_on_disk += event.end.kind == "aborted"
            elif isinstance(event, ToolCallEvent):
                tally(out.log_calls, event.tool)
            elif isinstance(event, ToolResultEvent):
                tally(out.log_codes, event.code or "ok")
        if aborted_on_disk != aborted_by_session[session.session_id]:
            problems.append(f"{aborted_on_disk} turns ended aborted on disk, "
                            f"{aborted_by_session[session.session_id]} aborts answered aborted")
        if problems:
            out.unbalanced.append(f"{session.session_id}: {'; '.join(problems[:5])}"
                                  + (f" (+{len(problems) - 5} more)" if len(problems) > 5
                                     else ""))
