"""Phase A of the load test: every session stopped at once, each with a call of every host
class in flight.

``sessions`` sessions, each prompted with one step holding a call of every host
class (Bash, Grep, Write, Read). The scheduler runs an exclusive call (Bash, Write)
alone and starts calls in model order, so each session puts its call of interest
first, by role:

- ``process`` (mode ``auto``): ``[Bash tree, Grep, Write, Read]``, the tree running
  (or queued in the host's admission beyond its process slots);
- ``read-only`` (mode ``auto``): ``[Grep, Read, Bash, Write]``, the Grep (a
  catastrophic regular expression over a large file) running beside the Read;
- ``permission`` (mode ``ask``): ``[Write, Bash, Grep, Read]``, the Write waiting in
  a permission prompt the client never answers;
- ``plugin`` (mode ``auto``, its own workspace and MCP server, the SDK test server of
  ``tests/plugins``): ``[plugin wait, Write, Bash, Grep, Read]``, the plugin call
  running in its server (which left its pid in a file), or queued in the host's
  admission beyond its plugin slots, when the stop comes; the stop must cancel every
  running one at its server (the server leaves a file saying so), and once the
  session is closed its server must be gone.

Once every call is provably in flight (``tool/call`` events, the trees' progress
marker and their processes seen with psutil, the permission requests received), one
``agent.abort`` per session is released at once. Every answer must be ``aborted``
with the codes the calls' states call for; every prompt must answer ``cancelled``;
every permission prompt must be withdrawn and no Write run; no process carrying the
run's marker may be left right after the answers; every transcript on disk must
balance.
"""

from __future__ import annotations

import os
import pathlib
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import trio

from benchlib.harness import Bench, Session, now_ms, scripted_call
from benchlib.load_leftovers import Leftovers, session_log, transcript_problems
from benchlib.load_plugins import (
    PLUGIN_SLOTS,
    PLUGIN_TOOL,
    close_plugin_sessions,
    new_plugin_session,
    plugin_servers,
    server_pid,
)
from benchlib.load_records import ROLES, LoadConfig, PhaseA, tally, tally_pair
from host.admission import DEFAULT_PER_CLASS
from protocol.messages.client import AgentAbortResult, AgentPromptResult
from protocol.messages.events import ToolAbortEvent, ToolCallEvent, ToolProgressEvent, TurnEnd
from protocol.toolclass import ToolClass
from runtime.clients.ops.client import OpsClient

ABD = "ABORTED_BEFORE_DISPATCH"
ABORTED = "ABORTED"
"""The codes of a stopped call: never dispatched, or stopped once its body had started."""
PROCESS_SLOTS = DEFAULT_PER_CLASS[ToolClass.PROCESS]
"""Bash trees the host runs at once (its default admission limit); the rest queue."""
GREP_FILE_BYTES = 256 * 1024**3
GREP_PATTERN = "zzz"
"""ripgrep reading a sparse file of that size (named explicitly, so read whole): minutes of
work in its own process, so every Grep is in flight when stopped."""
TREE = "sleep 300 & echo tree-started; sleep 300"
TREE_SLEEPS = 2
TREE_TIMEOUT_MS = 600_000
"""Past the time phase A may take to get every call in flight (the default is 120 s)."""
GREP_SETTLE = 0.3
"""Seconds between "everything is in flight" and the stop: the Greps reach the host."""


def _phase_a_step(role: str, i: int) -> list[dict[str, Any]]:
    """The call of interest first: nothing in the session holds it back."""
    read = scripted_call("r", "Read", path="small.txt")
    bash = scripted_call("b", "Bash", command=TREE, timeoutMs=TREE_TIMEOUT_MS)
    grep = scripted_call("g", "Grep", pattern=GREP_PATTERN, path="big.txt")
    write = scripted_call("w", "Write", path=f"never-{i}.txt", content="must not be written")
    plugin = scripted_call("p", PLUGIN_TOOL)
    order = {"process": [bash, grep, write, read], "read-only": [grep, read, bash, write],
             "permission": [write, bash, grep, read],
             "plugin": [plugin, write, bash, grep, read]}
    return order[role]


def _has_call(session: Session, call_id: str) -> bool:
    return any(isinstance(e, ToolCallEvent) and e.call_id == call_id for e in session.events)


def _tree_started(session: Session) -> bool:
    return "tree-started" in "".join(e.text for e in session.events
                                     if isinstance(e, ToolProgressEvent) and e.call_id == "b")


def _expected_codes(role: str, tree_up: bool, plugin_up: bool) -> dict[str, set[str]]:
    if role == "process":
        return {"b": {ABORTED} if tree_up else {ABORTED, ABD}, "g": {ABD}, "w": {ABD},
                "r": {ABD}}
    if role == "read-only":
        # The runtime stops waiting for a read-only call at once: without the host's word
        # the body may have started, so a call still queued in the host is ABORTED too;
        # the Read beside the Grep may also have finished.
        return {"g": {ABORTED, ABD}, "r": {"ok", ABORTED}, "b": {ABD}, "w": {ABD}}
    if role == "plugin":  # running in its server (it said so): the body was invoked
        return {"p": {ABORTED} if plugin_up else {ABORTED, ABD}, "w": {ABD}, "b": {ABD},
                "g": {ABD}, "r": {ABD}}
    return {"w": {ABD}, "b": {ABD}, "g": {ABD}, "r": {ABD}}


async def phase_a(bench: Bench, cfg: LoadConfig, ops: OpsClient | None, out: PhaseA,
                  name: str = "a") -> None:
    workspace = bench.workdir / f"ws-load-{name}"
    workspace.mkdir()
    (workspace / "small.txt").write_text("a small file\n")
    (workspace / "big.txt").write_bytes(b"")
    os.truncate(workspace / "big.txt", GREP_FILE_BYTES)  # sparse: no disk used
    roles = [cfg.roles[i % len(cfg.roles)] for i in range(cfg.sessions)]
    out.sessions = cfg.sessions
    out.roles = dict(Counter(roles))
    sessions: list[Session] = []
    workspaces: list[pathlib.Path] = []  # each session's
    for i, role in enumerate(roles):
        if role == "plugin":  # its own workspace: its server's files are its own
            own = workspace / f"plugin-{i}"
            own.mkdir()
            sessions.append(await new_plugin_session(bench, own, [_phase_a_step(role, i)]))
            workspaces.append(own)
            continue
        mode = "ask" if role == "permission" else "auto"
        sessions.append(await bench.new_session(workspace, [_phase_a_step(role, i)], mode=mode))
        workspaces.append(workspace)
    by_role = {r: [s for s, role in zip(sessions, roles, strict=True) if role == r]
               for r in ROLES}
    plugin_workspaces = [w for w, role in zip(workspaces, roles, strict=True)
                         if role == "plugin"]
    want_trees = min(len(by_role["process"]), PROCESS_SLOTS)
    want_plugins = min(len(plugin_workspaces), PLUGIN_SLOTS)

    def missing() -> dict[str, int]:
        """What is not in flight yet, by what it is."""
        return {what: n for what, n in {
            "Bash calls": sum(1 for s in by_role["process"] if not _has_call(s, "b")),
            "trees": want_trees - sum(1 for s in by_role["process"] if _tree_started(s)),
            "Grep calls": sum(1 for s in by_role["read-only"] if not _has_call(s, "g")),
            "permission prompts": sum(1 for s in by_role["permission"]
                                      if not s.permission_requests),
            "plugin calls at their server": want_plugins - sum(
                1 for w in plugin_workspaces if server_pid(w) is not None),
        }.items() if n > 0}

    def ready() -> bool:
        return not missing()

    prompts: dict[str, AgentPromptResult] = {}
    all_prompted = trio.Event()

    async def prompt(session: Session) -> None:
        prompts[session.session_id] = await bench.prompt(session, "load: every class")
        if len(prompts) == len(sessions):
            all_prompted.set()

    answers: dict[str, AgentAbortResult] = {}
    release = trio.Event()
    waiting = [0]
    all_waiting = trio.Event()
    released_at = [0.0]

    async def abort(session: Session) -> None:
        waiting[0] += 1
        if waiting[0] == len(sessions):
            all_waiting.set()
        await release.wait()
        start = now_ms()
        try:
            with trio.fail_after(cfg.abort_timeout):
                answer: AgentAbortResult = await bench.request(
                    "agent.abort", bench.abort_params(session))
        except trio.TooSlowError:
            out.unanswered_aborts += 1
            out.anomalies.append(f"{session.session_id}: agent.abort did not answer within "
                                 f"{cfg.abort_timeout:g} s")
            return
        end = now_ms()
        answers[session.session_id] = answer
        out.rtt_ms.append(end - start)
        out.answered_at_ms.append(end - released_at[0])
        if answer.outcome == "aborted":
            out.settled_ms.append(answer.settled_ms)

    async with trio.open_nursery() as nursery:
        started = time.monotonic()
        for session in sessions:
            nursery.start_soon(prompt, session)
        try:
            await _poll_for(bench, ready, within=cfg.ready_timeout,
                            what="every call in flight")
            trees = sum(1 for s in by_role["process"] if _tree_started(s))
            members = await bench.wait_members(
                lambda m: sum(1 for p in m if p.name == "sleep" and p.status != "zombie")
                >= TREE_SLEEPS * trees, what="the trees' processes")
            out.ready = True
            out.tree_members = len(members)
        except TimeoutError as exc:
            out.anomalies.append(f"not every call was in flight before the stop: {exc}; "
                                 f"missing {missing()}")
        out.ready_s = time.monotonic() - started
        out.trees_running = sum(1 for s in by_role["process"] if _tree_started(s))
        await trio.sleep(GREP_SETTLE)
        if ops is not None:
            snapshot = await ops.sessions()
            for ops_session in snapshot.sessions:
                for call in ops_session.calls:
                    tally_pair(out.ops_states, call.tool, call.state)
        async with trio.open_nursery() as aborts:
            for session in sessions:
                aborts.start_soon(abort, session)
            await all_waiting.wait()
            released_at[0] = now_ms()
            release.set()
        if out.answered_at_ms:
            out.all_settled_ms = max(out.answered_at_ms)
        # A plugin server lives as long as its session: not a survivor of the stop.
        servers = await trio.to_thread.run_sync(plugin_servers, bench)
        out.leftovers = Leftovers.seen([m for m in await trio.to_thread.run_sync(bench.members)
                                        if m.pid not in servers])
        with trio.move_on_after(cfg.prompt_timeout):
            await all_prompted.wait()
        nursery.cancel_scope.cancel()

    await out.leftovers.wait_out(bench, frozenset(servers))
    await close_plugin_sessions(bench, by_role["plugin"], plugin_workspaces, servers, out)

    out.unanswered_prompts = len(sessions) - len(prompts)
    for result in prompts.values():
        tally(out.prompt_reasons, result.stop_reason)
    # Late events: the withdrawals, and the host's answers to tools.abort (a read-only
    # stop does not wait for them).
    try:
        await bench.wait_for(lambda: all(
            s.withdrawn for s in by_role["permission"]) and all(
            any(isinstance(e, ToolAbortEvent) for e in s.events) for s in sessions),
            within=5.0, what="withdrawals and tool/abort events")
    except TimeoutError:
        pass  # counted below
    out.permission_requests = sum(len(s.permission_requests) for s in sessions)
    out.withdrawn = sum(len(s.withdrawn) for s in sessions)
    out.writes_ran = sum(1 for i, w in enumerate(workspaces) if (w / f"never-{i}.txt").exists())
    for session, role, own in zip(sessions, roles, workspaces, strict=True):
        answer = answers.get(session.session_id)
        for event in session.events:
            if isinstance(event, ToolAbortEvent):
                tally_pair(out.host_states, event.tool, event.host_state)
        if answer is None:
            continue
        tally(out.outcomes, answer.outcome)
        if answer.outcome != "aborted":
            out.anomalies.append(f"{session.session_id} ({role}): outcome {answer.outcome!r}")
            continue
        expected = _expected_codes(role, _tree_started(session), server_pid(own) is not None)
        got = {c.call_id: c.code or "ok" for c in answer.tool_calls}
        for aborted_call in answer.tool_calls:
            tally_pair(out.codes, aborted_call.tool, aborted_call.code or "ok")
        if set(got) != set(expected) or any(got[c] not in expected[c] for c in got):
            out.anomalies.append(f"{session.session_id} ({role}): codes {got}, expected "
                                 f"{ {c: sorted(v) for c, v in expected.items()} }")
        prompt_answer = prompts.get(session.session_id)
        if prompt_answer is not None and (prompt_answer.stop_reason != "cancelled"
                                          or prompt_answer.turn_id != answer.turn_id):
            out.anomalies.append(f"{session.session_id}: the prompt answered "
                                 f"{prompt_answer.stop_reason!r} for {prompt_answer.turn_id}")
        log = session_log(bench, session)
        problems = transcript_problems(log)
        if not any(isinstance(e, TurnEnd) and e.turn_id == answer.turn_id
                   and e.end.kind == "aborted" for e in log):
            problems.append(f"no turn/end aborted for {answer.turn_id} on disk")
        if problems:
            out.unbalanced.append(f"{session.session_id}: {'; '.join(problems)}")


async def _poll_for(bench: Bench, predicate: Callable[[], bool], within: float,
                    what: str) -> None:
    """Like ``bench.wait_for``, also for what no event announces (a plugin server's file)."""
    try:
        with trio.fail_after(within):
            while not predicate():
                with trio.move_on_after(0.05):
                    await bench.changed.wait()
    except trio.TooSlowError:
        raise TimeoutError(f"waited {within:g} s for {what}") from None
