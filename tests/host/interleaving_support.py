"""Random interleavings of execute / abort / permission answers against a real host.

A :class:`Scenario` is one example: a permission mode and one to three calls run
concurrently in a fresh session (fresh workspace, fresh call ids). Each call has
a tool, a permission plan (how the "runtime" answers the host's prompt) and
abort operations (when, for which key, how many times). :class:`InterleavingHost`
runs scenarios one after another on one host process and records what came back,
in wire order; :func:`check` states the contract of a stop (DESIGN.md items 6,
9, 10, 11) over that record and returns every violation it finds.

The checker is deliberately independent of the host's code: the permission
policy and the tool kinds are restated here from the design, not imported.
"""

from __future__ import annotations

import itertools
import pathlib
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Literal

import msgspec
import trio
from hypothesis import strategies as st

from protocol.causes import cause_of
from protocol.envelope import IncomingResponse
from protocol.messages.host import (
    PermissionRequestParams,
    PermissionRequestResult,
    PermissionWithdrawnParams,
    SessionOpenParams,
    ToolsAbortParams,
    ToolsAbortResult,
    ToolsExecuteParams,
    ToolsOutputParams,
)
from protocol.tools import (
    ABORT_ERROR_NAME,
    ABORTED_BEFORE_DISPATCH_TEXT,
    ABORTED_TEXT,
    TextContent,
    ToolResult,
)
from runtime.link import answers_later
from runtime.supervision.link import HostLink
from tests.support import command_line, marked_processes

# -- what an example is made of ------------------------------------------------------

Mode = Literal["ask", "accept-edits", "auto"]
Kind = Literal["read", "glob", "grep", "slow-grep", "write", "big-write", "edit", "big-edit",
               "touch", "echo-sleep", "echo-sleep-touch"]
Answer = Literal["allow-once", "allow-session", "deny", "never",
                 "late-allow-once", "late-allow-session"]
When = Literal["before", "now", "delay", "on-permission", "on-output", "after"]
Target = Literal["same", "other-tool", "other-session"]

TOOL_OF: dict[str, str] = {
    "read": "Read", "glob": "Glob", "grep": "Grep", "slow-grep": "Grep",
    "write": "Write", "big-write": "Write", "edit": "Edit", "big-edit": "Edit",
    "touch": "Bash", "echo-sleep": "Bash", "echo-sleep-touch": "Bash",
}
CLASS_OF: dict[str, str] = {
    "Read": "read-only", "Glob": "read-only", "Grep": "read-only",
    "Write": "mutating", "Edit": "mutating", "Bash": "process",
}
# The tool an "other-tool" abort names: same call id, another tool (never the call's).
OTHER_TOOL: dict[str, str] = {
    "Read": "Grep", "Glob": "Read", "Grep": "Glob", "Write": "Edit", "Edit": "Write",
    "Bash": "Write",
}
# Kinds whose side effect is observable in the workspace.
EFFECT_KINDS = {"write", "big-write", "edit", "big-edit", "touch", "echo-sleep-touch"}
ECHO_KINDS = {"echo-sleep", "echo-sleep-touch"}
# Big enough that the body of a mutating call runs for tens of milliseconds, so a stop
# can find it running; a Write's content crosses the link, so it stays well under the
# 8 MiB frame limit.
BIG_WRITE_BYTES = 2 * 1024 * 1024
BIG_EDIT_BYTES = 12 * 1024 * 1024
SLOW_GREP_LINES = 30  # ~12 ms of regex backtracking per line: ~0.4 s in all

ABORT_CODES = {"ABORTED", "ABORTED_BEFORE_DISPATCH"}

# The host configuration the examples run under: a short permission timeout (so a
# prompt nobody answers ends in about a second), a short kill grace, and one
# admission slot for process and mutating tools (so concurrent calls queue).
PERMISSION_TIMEOUT = 1.0
# A stop sent this long before the prompt could time out cannot lose the race to it.
TIMEOUT_MARGIN = 0.5
HOST_CONFIG: dict[str, Any] = {
    "permission_timeout": PERMISSION_TIMEOUT,
    "tools": {"kill_grace": 0.5},
    "admission": {"per_class": {"process": 1, "mutating": 1}},
}


def asks(mode: Mode, tool: str) -> bool:
    """The permission policy of the design: read-only never asks; ``auto`` never
    asks; ``accept-edits`` lets Write/Edit through; ``ask`` asks for the rest."""
    cls = CLASS_OF[tool]
    if cls == "read-only" or mode == "auto":
        return False
    return not (mode == "accept-edits" and cls == "mutating")


@dataclass(frozen=True)
class Permission:
    """How the runtime answers this call's prompt (if the host asks).

    ``never``: no answer (the host's permission timeout denies, or a stop withdraws
    it). ``late-*``: answered only after the call was stopped, its prompt withdrawn
    or its result received, so the host must refuse the answer.
    """

    answer: Answer = "allow-once"
    delay: float = 0.0


@dataclass(frozen=True)
class Abort:
    """``tools.abort`` sent ``repeat`` times (each awaited) once ``when`` happens.

    before: before the execute is sent; now: right after it is sent; delay: ``delay``
    seconds after it is sent; on-permission / on-output: when the host asks / streams
    output for the call (or when its result arrives, if it never does); after: once
    the result has arrived.
    """

    when: When
    target: Target = "same"
    delay: float = 0.0
    repeat: int = 1
    cause: Literal["user", "parent", "hook", "operator"] = "user"


@dataclass(frozen=True)
class CallSpec:
    kind: Kind
    permission: Permission = Permission()
    aborts: tuple[Abort, ...] = ()
    start_delay: float = 0.0

    @property
    def tool(self) -> str:
        return TOOL_OF[self.kind]


@dataclass(frozen=True)
class Scenario:
    mode: Mode
    calls: tuple[CallSpec, ...]


# -- strategies -----------------------------------------------------------------------

KINDS: list[Kind] = ["read", "glob", "grep", "slow-grep", "write", "big-write", "edit",
                     "big-edit", "touch", "echo-sleep", "echo-sleep-touch"]
_ANSWERS: list[Answer] = ["allow-once", "allow-once", "allow-once", "allow-once", "allow-once",
                          "allow-once", "allow-session", "allow-session", "deny", "never",
                          "late-allow-once", "late-allow-session"]
_WHENS: list[When] = ["before", "now", "now", "delay", "delay", "delay", "on-permission",
                      "on-permission", "on-output", "after"]
_TARGETS: list[Target] = ["same", "same", "same", "same", "other-tool", "other-session"]


def permissions() -> st.SearchStrategy[Permission]:
    return st.builds(Permission, answer=st.sampled_from(_ANSWERS),
                     delay=st.sampled_from([0.0, 0.0, 0.02, 0.1, 0.25]))


def aborts() -> st.SearchStrategy[Abort]:
    return st.builds(
        Abort,
        when=st.sampled_from(_WHENS),
        target=st.sampled_from(_TARGETS),
        delay=st.sampled_from([0.0, 0.0, 0.005, 0.02, 0.05, 0.1, 0.15, 0.4]),
        repeat=st.sampled_from([1, 1, 2, 3]),
        cause=st.sampled_from(["user", "parent", "hook", "operator"]),
    )


def call_specs() -> st.SearchStrategy[CallSpec]:
    return st.builds(
        CallSpec,
        kind=st.sampled_from(KINDS),
        permission=permissions(),
        aborts=st.lists(aborts(), min_size=0, max_size=3).map(tuple),
        start_delay=st.sampled_from([0.0, 0.0, 0.0, 0.05]),
    )


def scenarios() -> st.SearchStrategy[Scenario]:
    return st.builds(
        Scenario,
        mode=st.sampled_from(["ask", "accept-edits", "auto"]),
        calls=st.lists(call_specs(), min_size=1, max_size=3).map(tuple),
    )


# -- what an example records ----------------------------------------------------------

@dataclass
class AbortRecord:
    op: Abort
    key: tuple[str, str, str]
    before_execute: bool  # sent before the execute request was
    after_result: bool  # sent after the call's result had arrived
    answer: ToolsAbortResult
    sent_at: float  # seconds after the execute was sent (negative: before)


@dataclass
class CallRun:
    index: int
    spec: CallSpec
    session_id: str
    call_id: str
    probe: bool = False  # a follow-up call checking that a late allow-session was refused
    result: ToolResult | None = None
    result_wire: int | None = None
    execute_sent: bool = False
    execute_at: float = 0.0  # time.monotonic() when the execute was sent
    permission_requests: list[str] = field(default_factory=list)
    answers_sent: list[str] = field(default_factory=list)
    late_answer: str | None = None
    outputs: list[tuple[int, str, int]] = field(default_factory=list)  # (seq, text, wire)
    aborts: list[AbortRecord] = field(default_factory=list)
    effect: str = "n/a"
    asked: trio.Event = field(default_factory=trio.Event)
    first_output: trio.Event = field(default_factory=trio.Event)
    done: trio.Event = field(default_factory=trio.Event)
    stop_acked: trio.Event = field(default_factory=trio.Event)
    withdrawn: trio.Event = field(default_factory=trio.Event)
    late_done: trio.Event = field(default_factory=trio.Event)

    @property
    def tool(self) -> str:
        return self.spec.tool


@dataclass
class Report:
    number: int
    scenario: Scenario
    runs: list[CallRun]
    withdrawn: dict[str, int]  # request id -> wire position
    request_owner: dict[str, str]  # permission request id -> call id
    stray: list[str]  # protocol-level problems seen on the link during the example
    survivors: list[str]  # processes the example's calls left alive
    leftovers: list[str]  # temporary files left in the workspace


# -- driving the host -------------------------------------------------------------------

async def wait_any(*events: trio.Event) -> None:
    if any(event.is_set() for event in events):
        return
    async with trio.open_nursery() as nursery:
        async def waiter(event: trio.Event) -> None:
            await event.wait()
            nursery.cancel_scope.cancel()

        for event in events:
            nursery.start_soon(waiter, event)


class _TaskIds:
    """Stands in for the endpoint's request-id counter and remembers which task took
    which id, so a call's execute result can be placed in wire order exactly."""

    def __init__(self, start: int, by_task: dict[object, int]) -> None:
        self._count = itertools.count(start)
        self._by_task = by_task

    def __iter__(self) -> Iterator[int]:
        return self

    def __next__(self) -> int:
        value = next(self._count)
        self._by_task[trio.lowlevel.current_task()] = value
        return value


class InterleavingHost:
    """One real host process; scenarios run on it one after another."""

    def __init__(self, root: pathlib.Path, mark: str) -> None:
        self.root = root
        self.mark = mark
        self.link: HostLink | None = None
        self.host_pid: int | None = None
        self.wire = 0  # position of the last frame the reader handled
        self.runs: dict[tuple[str, str], CallRun] = {}
        self.request_runs: dict[str, CallRun] = {}
        self.request_owner: dict[str, str] = {}
        self.withdrawn: dict[str, int] = {}
        self.response_wire: dict[object, int] = {}  # request id -> wire position
        self.response_count: Counter[object] = Counter()
        self.ids_by_task: dict[object, int] = {}
        self.stray: list[str] = []
        self.coverage: Counter[str] = Counter()
        self.examples = 0

    # link plumbing

    def instrument(self, link: HostLink) -> None:
        endpoint = link._endpoint
        assert endpoint is not None
        correlation = endpoint._correlation
        start = next(correlation.ids)
        correlation.ids = _TaskIds(start, self.ids_by_task)
        original = correlation.resolve
        pending = correlation.pending

        def resolve(response: IncomingResponse) -> None:
            self.wire += 1
            self.response_count[response.id] += 1
            if response.id not in pending:
                self.stray.append(f"response to unknown or already answered request "
                                  f"{response.id!r}")
            self.response_wire[response.id] = self.wire
            original(response)

        correlation.resolve = resolve  # type: ignore[method-assign]

    async def on_permission(self, params: PermissionRequestParams) -> PermissionRequestResult:
        run = self.runs.get((params.session_id, params.call_id))
        if run is None:
            self.stray.append(f"permission.request for unknown call {params.call_id!r}")
            return PermissionRequestResult("deny")
        run.permission_requests.append(params.request_id)
        self.request_runs[params.request_id] = run
        self.request_owner[params.request_id] = run.call_id
        if params.request_id in self.withdrawn:
            run.withdrawn.set()
        run.asked.set()
        plan = run.spec.permission
        if plan.answer in ("allow-once", "allow-session", "deny"):
            await trio.sleep(plan.delay)
            run.answers_sent.append(plan.answer)
            return PermissionRequestResult(plan.answer)
        if plan.answer == "never":
            await trio.sleep_forever()
        try:
            await wait_any(run.stop_acked, run.withdrawn, run.done)
            await trio.sleep(plan.delay)
            decision = plan.answer.removeprefix("late-")
            run.late_answer = decision
            return PermissionRequestResult(decision)  # type: ignore[arg-type]
        finally:
            run.late_done.set()

    def on_withdrawn(self, params: PermissionWithdrawnParams) -> None:
        self.wire += 1
        self.withdrawn[params.request_id] = self.wire
        run = self.request_runs.get(params.request_id)
        if run is not None:
            run.withdrawn.set()

    def on_output(self, params: ToolsOutputParams) -> None:
        self.wire += 1
        run = self.runs.get((params.session_id, params.call_id))
        if run is None:
            self.stray.append(f"tools.output for unknown call {params.call_id!r}")
            return
        run.outputs.append((params.seq, params.text, self.wire))
        run.first_output.set()

    # one example

    async def run_scenario(self, scenario: Scenario) -> Report:
        link = self.link
        assert link is not None
        self.examples += 1
        number = self.examples
        session_id = f"s{number}"
        workspace = self.root / session_id
        workspace.mkdir()
        runs = [CallRun(i, spec, session_id, f"x{number}-{i}")
                for i, spec in enumerate(scenario.calls)]
        for run in runs:
            prepare(workspace, run)
            self.runs[(session_id, run.call_id)] = run
        stray_before = len(self.stray)
        withdrawn_before = set(self.withdrawn)
        await link.request("session.open", SessionOpenParams(
            session_id, str(workspace), scenario.mode))
        async with trio.open_nursery() as nursery:
            for run in runs:
                nursery.start_soon(self._drive, run)
        # A round trip, so every prompt the host sent has reached its handler.
        await self._barrier(session_id, f"x{number}-barrier1")
        # Late answers go out once their call was stopped or settled; wait for them,
        # then check that a refused late allow-session was not remembered.
        for run in runs:
            if run.permission_requests and run.spec.permission.answer.startswith("late-"):
                await run.late_done.wait()
        for probe in probes(scenario, runs, session_id, number):
            prepare(workspace, probe)
            self.runs[(session_id, probe.call_id)] = probe
            runs.append(probe)
            await self._drive(probe)
        # A duplicate answer to anything above would have arrived by now.
        await self._barrier(session_id, f"x{number}-barrier2")
        for run in runs:
            run.effect = observe(workspace, run)
        survivors: list[str] = []
        if any(run.tool == "Bash" for run in runs):
            survivors = [f"{p.pid} {cmd}" for p in marked_processes(self.mark)
                         if p.pid != self.host_pid and (cmd := command_line(p))]
        leftovers = [str(p.relative_to(workspace)) for p in workspace.rglob("*.tmp")]
        for rid in set(self.withdrawn) - withdrawn_before:
            if rid not in self.request_owner:
                self.stray.append(f"permission.withdrawn for a request never sent: {rid}")
        report = Report(number, scenario, runs, dict(self.withdrawn), dict(self.request_owner),
                        self.stray[stray_before:], survivors, leftovers)
        for run in runs:
            self.coverage[coverage_label(run)] += 1
        return report

    async def _barrier(self, session_id: str, name: str) -> None:
        """A round trip through the host (an abort of a call that never exists)."""
        assert self.link is not None
        await self.link.request("tools.abort", ToolsAbortParams(session_id, name, "Read"))
        self.ids_by_task.pop(trio.lowlevel.current_task(), None)

    async def _drive(self, run: CallRun) -> None:
        await trio.sleep(run.spec.start_delay)
        async with trio.open_nursery() as nursery:
            for op in run.spec.aborts:
                if op.when == "before":
                    for _ in range(op.repeat):
                        await self._abort(run, op)
            await nursery.start(self._execute, run)
            for op in run.spec.aborts:
                if op.when != "before":
                    nursery.start_soon(self._abort_when, run, op)

    async def _execute(self, run: CallRun,
                       task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        assert self.link is not None
        run.execute_sent = True
        run.execute_at = time.monotonic()
        # started() first: this task runs on into request(), which puts the execute
        # on the wire before its first checkpoint, so before the caller resumes.
        task_status.started()
        result: ToolResult = await self.link.request("tools.execute", ToolsExecuteParams(
            run.session_id, run.call_id, run.tool, arguments(run)))
        request_id = self.ids_by_task.pop(trio.lowlevel.current_task())
        run.result = result
        run.result_wire = self.response_wire.get(request_id)
        if self.response_count[request_id] != 1:
            self.stray.append(f"execute {run.call_id}: {self.response_count[request_id]} "
                              "responses")
        run.done.set()

    async def _abort_when(self, run: CallRun, op: Abort) -> None:
        if op.when == "delay":
            await trio.sleep(op.delay)
        elif op.when == "on-permission":
            await wait_any(run.asked, run.done)
        elif op.when == "on-output":
            await wait_any(run.first_output, run.done)
        elif op.when == "after":
            await run.done.wait()
        for _ in range(op.repeat):
            await self._abort(run, op)

    async def _abort(self, run: CallRun, op: Abort) -> None:
        assert self.link is not None
        if op.target == "same":
            key = (run.session_id, run.call_id, run.tool)
        elif op.target == "other-tool":
            key = (run.session_id, run.call_id, OTHER_TOOL[run.tool])
        else:
            key = (run.session_id + "-other", run.call_id, run.tool)
        before, after = not run.execute_sent, run.done.is_set()
        sent_at = time.monotonic()
        answer: ToolsAbortResult = await self.link.request(
            "tools.abort", ToolsAbortParams(*key, cause_of(op.cause, "a test's hook")))
        self.ids_by_task.pop(trio.lowlevel.current_task(), None)
        sent_at = sent_at - run.execute_at if run.execute_sent and not before else -1.0
        run.aborts.append(AbortRecord(op, key, before, after, answer, sent_at))
        if op.target == "same" and answer.found and answer.state != "settled":
            run.stop_acked.set()


@asynccontextmanager
async def interleaving_host(root: pathlib.Path, mark: str,
                            env: dict[str, str]) -> AsyncIterator[InterleavingHost]:
    host = InterleavingHost(root, mark)
    command = [sys.executable, "-m", "host", "--config",
               msgspec.json.encode(HOST_CONFIG).decode()]
    link = HostLink(command=command, env=env,
                    # A client answering later: the link reads on.
                    handlers={"permission.request": answers_later(host.on_permission)},
                    notification_handlers={"permission.withdrawn": host.on_withdrawn,
                                           "tools.output": host.on_output})
    async with trio.open_nursery() as nursery:
        with trio.fail_after(30):
            await link.start(nursery)
        host.link = link
        host.host_pid = link.pid
        host.instrument(link)
        try:
            yield host
        finally:
            await link.stop()
            nursery.cancel_scope.cancel()  # "never" answers still wait; they end here


# -- workspace set-up and observation -------------------------------------------------------

def _content(run: CallRun) -> str:
    head = f"written {run.call_id}\n"
    return head + ("x" * BIG_WRITE_BYTES if run.spec.kind == "big-write" else "")


def _edit_text(run: CallRun, word: str) -> str:
    tail = "y" * BIG_EDIT_BYTES if run.spec.kind == "big-edit" else ""
    return f"{word} {run.call_id}\n{tail}"


def prepare(workspace: pathlib.Path, run: CallRun) -> None:
    cid = run.call_id
    kind = run.spec.kind
    if kind == "read":
        (workspace / f"read-{cid}.txt").write_text(f"hello {cid}\n")
    elif kind in ("grep", "glob"):
        (workspace / f"grep-{cid}.txt").write_text(f"hello {cid}\n")
    elif kind == "slow-grep":
        (workspace / f"slow-{cid}.txt").write_text(("a" * 22 + "\n") * SLOW_GREP_LINES)
    elif kind in ("edit", "big-edit"):
        (workspace / f"edit-{cid}.txt").write_text(_edit_text(run, "old"))


def arguments(run: CallRun) -> dict[str, Any]:
    cid = run.call_id
    kind = run.spec.kind
    if kind == "read":
        return {"path": f"read-{cid}.txt"}
    if kind == "glob":
        return {"pattern": "*.txt"}
    if kind == "grep":
        return {"pattern": f"hello {cid}"}
    if kind == "slow-grep":
        return {"pattern": "(a|aa)*c", "path": f"slow-{cid}.txt"}
    if kind in ("write", "big-write"):
        return {"path": f"out/file-{cid}.txt", "content": _content(run)}
    if kind in ("edit", "big-edit"):
        return {"path": f"edit-{cid}.txt", "old_string": f"old {cid}",
                "new_string": f"new {cid}"}
    if kind == "touch":
        return {"command": f"touch marker-{cid}"}
    if kind == "echo-sleep":
        return {"command": f"echo out-{cid}; sleep 0.3"}
    assert kind == "echo-sleep-touch"
    return {"command": f"echo out-{cid}; sleep 0.3; touch marker-{cid}"}


def observe(workspace: pathlib.Path, run: CallRun) -> str:
    """``absent`` (no side effect), ``done`` (the whole effect), or what is wrong."""
    cid = run.call_id
    kind = run.spec.kind
    if kind in ("write", "big-write"):
        path = workspace / "out" / f"file-{cid}.txt"
        if not path.exists():
            return "absent"
        data = path.read_text()
        return "done" if data == _content(run) else f"torn ({len(data)} chars)"
    if kind in ("edit", "big-edit"):
        data = (workspace / f"edit-{cid}.txt").read_text()
        if data == _edit_text(run, "old"):
            return "absent"
        return "done" if data == _edit_text(run, "new") else f"torn ({data[:20]!r}...)"
    if kind in ("touch", "echo-sleep-touch"):
        return "done" if (workspace / f"marker-{cid}").exists() else "absent"
    return "n/a"


def probes(scenario: Scenario, runs: list[CallRun], session_id: str,
           number: int) -> list[CallRun]:
    """After a late allow-session, one more call of that tool must still ask."""
    found: list[CallRun] = []
    for run in runs:
        if run.late_answer != "allow-session" or not asks(scenario.mode, run.tool):
            continue
        if any(r.tool == run.tool and r.spec.permission.answer == "allow-session"
               for r in runs):
            continue  # an in-time allow-session for the tool: the probe proves nothing
        kind: Kind = {"Write": "write", "Edit": "edit", "Bash": "touch"}[run.tool]  # type: ignore[assignment]
        found.append(CallRun(len(runs) + len(found), CallSpec(kind, Permission("deny")),
                             session_id, f"x{number}-probe{run.index}", probe=True))
    return found


def coverage_label(run: CallRun) -> str:
    same = [a.answer for a in run.aborts if a.op.target == "same"]
    if any(not a.answer.found for a in run.aborts
           if a.op.target == "same" and not a.after_result):
        stopped = "tombstone"
    else:
        live = [a.state for a in same if a.state != "settled"]
        stopped = live[0] if live else ("after-settle" if same else "no-stop")
    code = run.result.code if run.result is not None and run.result.code else "ok"
    if run.result is not None and run.result.details.get("completed") is True:
        code += " (completed first)"
    return f"{CLASS_OF[run.tool]} / {stopped} / {code}"


# -- the contract ----------------------------------------------------------------------------

def _text(result: ToolResult) -> str:
    return "\n".join(c.text for c in result.content if isinstance(c, TextContent))


def check(report: Report) -> list[str]:
    problems = [f"link: {s}" for s in report.stray]
    problems += [f"process left alive after its call's result: {s}" for s in report.survivors]
    problems += [f"temporary file left in the workspace: {s}" for s in report.leftovers]
    for run in report.runs:
        problems += [f"{run.call_id} ({run.spec.kind}): {p}" for p in check_call(report, run)]
    return problems


def check_call(report: Report, run: CallRun) -> list[str]:
    p: list[str] = []
    r = run.result
    if r is None:
        return ["no result"]
    code = r.code
    mode = report.scenario.mode
    plan = run.spec.permission.answer
    same = [a for a in run.aborts if a.op.target == "same"]
    foreign = [a for a in run.aborts if a.op.target != "same"]
    asked = run.permission_requests
    my_withdrawn = [rid for rid in asked if rid in report.withdrawn]
    streamed = "".join(text for _, text, _ in run.outputs)

    # Exactly one result; nothing about the call after it.
    assert run.result_wire is not None
    late_output = [seq for seq, _, wire in run.outputs if wire > run.result_wire]
    if late_output:
        p.append(f"tools.output seq {late_output} arrived after the result")
    seqs = [seq for seq, _, _ in run.outputs]
    if seqs != list(range(1, len(seqs) + 1)):
        p.append(f"tools.output seqs not 1..n in order: {seqs}")
    for rid in my_withdrawn:
        if report.withdrawn[rid] > run.result_wire:
            p.append(f"prompt {rid} withdrawn only after the call's result")
    if len(asked) > 1:
        p.append(f"asked permission {len(asked)} times")

    # The two abort codes keep their model texts and error name.
    if code in ABORT_CODES:
        expected_text = ABORTED_BEFORE_DISPATCH_TEXT if code == "ABORTED_BEFORE_DISPATCH" \
            else ABORTED_TEXT
        first = r.content[0]
        if not isinstance(first, TextContent) or first.text != expected_text:
            p.append(f"{code} with model text {first!r}")
        if r.error is None or r.error.info.name != ABORT_ERROR_NAME:
            p.append(f"{code} with error name {r.error and r.error.info.name!r}")
    # ABORTED_BEFORE_DISPATCH only when the body provably never ran; ABORTED only when
    # it did. A denial never runs the body either.
    if code in ("ABORTED_BEFORE_DISPATCH", "TOOL_DENIED"):
        if r.body_invoked:
            p.append(f"{code} with body_invoked true")
        if run.effect not in ("absent", "n/a"):
            p.append(f"{code} but the side effect happened: {run.effect}")
        if run.outputs:
            p.append(f"{code} but the call streamed output {streamed!r}")
    if code == "ABORTED" and not r.body_invoked:
        p.append("ABORTED with body_invoked false")
    if run.effect.startswith("torn"):
        p.append(f"the file is neither the old nor the new content: {run.effect}")
    if my_withdrawn and not r.is_error:
        p.append("prompt withdrawn, yet the call succeeded")

    # Aborts that name another tool or another session never touch the call.
    for a in foreign:
        if a.answer != ToolsAbortResult(False, "tombstoned"):
            p.append(f"abort of {a.key} (not this call) answered {a.answer}")
    for a in same:
        if a.before_execute and a.answer != ToolsAbortResult(False, "tombstoned"):
            p.append(f"abort before the execute answered {a.answer}")

    # Tombstone: an abort the host did not find left a tombstone, and the call met it.
    in_flight = [a for a in same if not a.after_result]
    if any(not a.answer.found for a in in_flight):
        if code != "ABORTED_BEFORE_DISPATCH" or r.details.get("tombstone") is not True:
            p.append(f"an abort left a tombstone, yet the result is {code} {r.details}")
        if asked:
            p.append("tombstoned, yet the host asked permission")
        for a in in_flight:
            # A tombstoned execute settles at once: an abort sent after it may find it
            # settled (the host remembers a consumed tombstone as a settled call).
            settled_after = not a.before_execute and a.answer == ToolsAbortResult(True, "settled")
            if a.answer != ToolsAbortResult(False, "tombstoned") and not settled_after:
                p.append(f"abort of a tombstoned call answered {a.answer} "
                         f"(others: {[b.answer for b in in_flight]})")
        for a in same:
            # The host remembers a consumed tombstone as a settled call.
            if a.after_result and a.answer not in (ToolsAbortResult(False, "tombstoned"),
                                                   ToolsAbortResult(True, "settled")):
                p.append(f"abort after a tombstoned call's result answered {a.answer}")
        return p
    if r.details.get("tombstone"):
        p.append("met a tombstone no abort of ours left")

    # Who asks: the mode's policy; a sibling's in-time allow-session may spare an ask.
    must_ask = asks(mode, run.tool)
    spared = any(o is not run and o.tool == run.tool and not o.probe
                 and o.spec.permission.answer == "allow-session" for o in report.runs)
    if asked and not must_ask:
        p.append(f"asked permission in mode {mode!r}")
    # A stop that lands before the prompt goes out (the path is checked first, in a
    # worker thread) ends the call before anyone is asked.
    stopped_before_prompt = code == "ABORTED_BEFORE_DISPATCH" and any(
        a.answer.found and a.answer.state == "admission" for a in same if not a.after_result)
    if must_ask and not asked and not spared and not stopped_before_prompt:
        p.append(f"did not ask permission in mode {mode!r}")

    # Abort answers: found, one phase for every answer before the settle, then settled.
    for a in same:
        if a.after_result and a.answer != ToolsAbortResult(True, "settled"):
            p.append(f"abort after the result answered {a.answer}")
    live = [a.answer for a in same if a.answer.state != "settled"]
    if any(a != live[0] for a in live):
        p.append(f"repeated aborts answered differently: {live}")
    settled_answers = [a.answer for a in same if a.answer.state == "settled"]
    if any(a != ToolsAbortResult(True, "settled") for a in settled_answers):
        p.append(f"settled answers carry more than found/state: {settled_answers}")

    if not live:  # no stop reached the call in flight: the natural outcome
        if code in ABORT_CODES:
            p.append(f"{code} although no abort found the call in flight "
                     f"(answers {[a.answer for a in run.aborts]})")
        p += _natural(run, r, asked, my_withdrawn, plan)
        return p

    stop = live[0]
    first_sent = min(a.sent_at for a in same if a.answer.state != "settled")
    if stop.state in ("permission-pending", "admission"):
        if stop.body_invoked:
            p.append(f"stopped in {stop.state} with body_invoked true")
        allowed = {"ABORTED_BEFORE_DISPATCH"}
        if asked and plan == "deny":
            allowed.add("TOOL_DENIED")  # a denial is more specific than a stop and wins
        if (asked and plan in ("never", "late-allow-once", "late-allow-session")
                and first_sent > PERMISSION_TIMEOUT - TIMEOUT_MARGIN):
            allowed.add("TOOL_DENIED")  # the stop may have raced the prompt's timeout
        if code not in allowed:
            p.append(f"stopped in {stop.state} before the body: expected one of "
                     f"{sorted(allowed)}, got {code} (body_invoked={r.body_invoked})")
        if stop.state == "permission-pending" and not asked:
            p.append("stopped in permission-pending but no prompt was sent")
        if (code == "ABORTED_BEFORE_DISPATCH" and asked and plan.startswith(("never", "late"))
                and not my_withdrawn):
            p.append("stopped during an unanswered prompt, but the prompt was not withdrawn")
    elif stop.state == "running":
        if not stop.body_invoked:
            p.append("stopped while running with body_invoked false")
        if code != "ABORTED" or not r.body_invoked:
            p.append(f"stopped while running: expected ABORTED with body_invoked, got {code} "
                     f"body_invoked={r.body_invoked}")
        cls = CLASS_OF[run.tool]
        completed = r.details.get("completed") is True
        if cls == "mutating":
            if not completed or run.effect != "done":
                p.append(f"a started mutating operation must complete and say so: "
                         f"completed={completed}, effect={run.effect}")
        elif cls == "read-only":
            if completed or r.details.get("discarded") is not True:
                p.append(f"a stopped read-only call's result must be dropped: {r.details}")
        else:
            if completed and run.spec.kind in EFFECT_KINDS and run.effect != "done":
                p.append("Bash finished before the stop, yet its marker is missing")
            if r.details.get("started") is False and run.effect != "absent":
                p.append("Bash stopped before starting, yet its marker exists")
            result_text = _text(r) + str(r.details.get("output", ""))
            for _, text, _ in run.outputs:
                if text.strip() and text.strip() not in result_text:
                    p.append(f"streamed output {text!r} missing from the stopped result")
    else:
        p.append(f"abort found the call in state {stop.state!r}")
    return p


def _natural(run: CallRun, r: ToolResult, asked: list[str], withdrawn: list[str],
             plan: str) -> list[str]:
    p: list[str] = []
    if asked and plan == "deny":
        if r.code != "TOOL_DENIED":
            p.append(f"denied, yet the result is {r.code}")
        if withdrawn:
            p.append("an answered prompt was withdrawn")
        return p
    if asked and plan not in ("allow-once", "allow-session"):  # never answered in time
        if r.code != "TOOL_DENIED":
            p.append(f"unanswered prompt: expected TOOL_DENIED after the timeout, got {r.code}")
        if not withdrawn:
            p.append("a timed-out prompt was not withdrawn")
        return p
    if r.is_error or not r.body_invoked:
        p.append(f"expected success, got {r.code} body_invoked={r.body_invoked}: {_text(r)!r}")
        return p
    kind = run.spec.kind
    if kind in EFFECT_KINDS and run.effect != "done":
        p.append(f"succeeded, yet the side effect is {run.effect}")
    if kind in ECHO_KINDS and f"out-{run.call_id}" not in _text(r):
        p.append(f"succeeded, yet the output is missing: {_text(r)!r}")
    if kind == "read" and f"hello {run.call_id}" not in _text(r):
        p.append(f"Read succeeded without the file's text: {_text(r)!r}")
    return p


def describe(report: Report) -> str:
    """The whole record of an example, for a failure message."""
    lines = [f"example {report.number}: mode={report.scenario.mode}"]
    for run in report.runs:
        r = run.result
        withdrawn = [rid for rid in run.permission_requests if rid in report.withdrawn]
        lines.append(
            f"  {run.call_id} {run.spec}{' (probe)' if run.probe else ''}\n"
            f"    result: {r.code if r else None} body_invoked={r.body_invoked if r else None} "
            f"details={ {k: v for k, v in (r.details if r else {}).items() if k != 'output'} }\n"
            f"    prompts={run.permission_requests} answered={run.answers_sent} "
            f"late={run.late_answer} withdrawn={withdrawn}\n"
            f"    outputs={[(s, t) for s, t, _ in run.outputs]} effect={run.effect}")
        for a in run.aborts:
            lines.append(f"    abort {a.op.when}/{a.op.target} at {a.sent_at:+.3f} s key={a.key} "
                         f"before_execute={a.before_execute} after_result={a.after_result} "
                         f"-> {a.answer}")
    return "\n".join(lines)

