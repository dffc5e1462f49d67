"""The wire-order property, against the real ``quiesce serve``: a model and a runner.

An example is two writes of client requests over three sessions (prompts, aborts with
and without ``keepInbox``, closes, loads, lists), each write sent back to back in one
``send_all`` without waiting; the runner waits for every answer between the writes.
Session ``i``'s turns call ``KINDS[i]`` (Write, Bash, Read) and then end.

The model is the rule itself: requests take effect in wire order, and a turn's first
step waits until the link has taken every frame it has read. So within one write no
turn makes progress: each prompt is accepted (it becomes the session's turn, or waits
in its inbox), each abort stops exactly the turn accepted before it (or answers
``idle``), and only once the write is taken do turns run: a stopped one ends aborted
without running a tool, the others (and, with ``keepInbox``, the prompts queued
behind a stopped one) run to their end. Two restrictions, both where the answer depends
on timing the model does not keep: a session closed in a write is not loaded again in
that same write (a load queued behind a close that is still settling is served after
it), and a session stopped in a write (aborted or closed) is not stopped again in that
write when other requests come between (a stopped turn settles without waiting for the
link, so a later stop may find it still settling, find the next queued prompt's turn, or
find the session gone after its close). Two stops back to back are kept: nothing can
settle between them.
"""

from __future__ import annotations

import pathlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from hypothesis import strategies as st

from protocol.messages.events import ToolResultEvent
from protocol.transcript import Transcript
from runtime.agent.sessionlog import read_log
from tests.e2e.pipeline import Pipeline

SESSIONS = 3
KINDS = ("Write", "Bash", "Read")
NOT_FOUND = -32003


@dataclass(frozen=True)
class Op:
    kind: str  # prompt | abort | close | load | list
    session: int = 0
    keep_inbox: bool = False

    def __str__(self) -> str:
        if self.kind == "list":
            return "list"
        extra = "+keep" if self.keep_inbox else ""
        return f"{self.kind}{extra}(s{self.session})"


Example = tuple[tuple[Op, ...], tuple[Op, ...]]


def _restrict(ops: list[Op]) -> tuple[Op, ...]:
    """Drop a load of a session closed earlier in the same write, and a stop of a session
    stopped earlier in it with other requests between (see the module doc)."""
    closed: set[int] = set()
    stopped: set[int] = set()
    kept: list[Op] = []
    for op in ops:
        stop = op.kind in ("abort", "close")
        if op.kind == "load" and op.session in closed:
            continue
        if stop and op.session in stopped and not (
                kept and kept[-1].kind in ("abort", "close") and kept[-1].session == op.session):
            continue
        if op.kind == "close":
            closed.add(op.session)
        if stop:
            stopped.add(op.session)
        kept.append(op)
    return tuple(kept)


_session = st.integers(0, SESSIONS - 1)
ops = st.one_of(
    st.builds(Op, st.just("prompt"), _session),
    st.builds(Op, st.just("prompt"), _session),
    st.builds(Op, st.just("abort"), _session, st.booleans()),
    st.builds(Op, st.just("close"), _session),
    st.builds(Op, st.just("load"), _session),
    st.builds(Op, st.just("list")),
)
examples = st.tuples(st.lists(ops, min_size=1, max_size=14).map(_restrict),
                     st.lists(ops, max_size=10).map(_restrict))


def script(kind: str, turns: int = 40) -> list[list[dict[str, Any]]]:
    args = {"Write": {"path": "written.txt", "content": "ran\n"},
            "Bash": {"command": "echo ran"},
            "Read": {"path": "notes.txt"}}[kind]
    return [[{"toolCall": {"id": "c1", "name": kind, "args": args}}], [{"text": "done"}]] * turns


# -- the model ------------------------------------------------------------------------


@dataclass
class Expect:
    """What one request must answer: a result (``fields``: a subset of it) or an error."""

    label: str
    fields: dict[str, Any] | None = None
    error: int | None = None


@dataclass
class _Session:
    open: bool = True
    closing: bool = False
    turns: int = 0  # turns begun in its log (over every load)
    current: tuple[int, str] | None = None  # (prompt's request index, turn id)
    stopped: bool = False
    inbox: list[int] = field(default_factory=list)  # prompts' request indexes


@dataclass
class Model:
    sessions: list[_Session] = field(default_factory=lambda: [_Session() for _ in
                                                              range(SESSIONS)])
    stopped_turns: set[tuple[int, str]] = field(default_factory=set)
    completed_turns: set[tuple[int, str]] = field(default_factory=set)

    def write(self, ops: Sequence[Op]) -> list[Expect]:
        """What each request of one write must answer (settling the turns after it)."""
        expects: list[Expect] = []
        for op in ops:
            expects.append(self._take(op, expects))
        self._settle(expects)
        return expects

    def _begin(self, s: _Session, index: int) -> str:
        s.turns += 1
        turn_id = f"t{s.turns}"
        s.current, s.stopped = (index, turn_id), False
        return turn_id

    def _take(self, op: Op, expects: list[Expect]) -> Expect:
        index = len(expects)
        if op.kind == "list":
            return Expect(str(op), {})
        s = self.sessions[op.session]
        if op.kind == "load":
            if not s.open:
                s.open, s.current, s.inbox = True, None, []
            return Expect(str(op), {})
        if not s.open:
            return Expect(str(op), error=NOT_FOUND)
        if op.kind == "prompt":
            if s.closing:
                return Expect(str(op), error=NOT_FOUND)
            if s.current is None:
                self._begin(s, index)
            else:
                s.inbox.append(index)
            return Expect(str(op))  # filled in when its turn is settled
        if op.kind == "abort":
            if not op.keep_inbox or s.closing:
                self._clear_inbox(s, expects)
            return self._stop(op, s)
        assert op.kind == "close"
        if s.closing:
            return Expect(str(op), error=NOT_FOUND)  # served after the first close
        self._clear_inbox(s, expects)
        if s.current is None:  # nothing to settle: it is gone at once
            s.open = False
        else:
            s.closing = True
            self._stop(op, s)
        return Expect(str(op), {})

    def _stop(self, op: Op, s: _Session) -> Expect:
        if s.current is None:
            return Expect(str(op), {"outcome": "idle", "turnId": None})
        s.stopped = True
        return Expect(str(op), {"outcome": "aborted", "turnId": s.current[1]})

    @staticmethod
    def _clear_inbox(s: _Session, expects: list[Expect]) -> None:
        for index in s.inbox:
            expects[index].fields = {"turnId": None, "stopReason": "cancelled"}
        s.inbox = []

    def _settle(self, expects: list[Expect]) -> None:
        for number, s in enumerate(self.sessions):
            while s.current is not None:
                index, turn_id = s.current
                if s.stopped:
                    self.stopped_turns.add((number, turn_id))
                    expects[index].fields = {"turnId": turn_id, "stopReason": "cancelled"}
                else:
                    self.completed_turns.add((number, turn_id))
                    expects[index].fields = {"turnId": turn_id, "stopReason": "end_turn"}
                s.current = None
                if s.inbox:
                    self._begin(s, s.inbox.pop(0))
            if s.closing:
                s.open, s.closing = False, False


# -- checking -------------------------------------------------------------------------


def check_answers(ops: Sequence[Op], ids: Sequence[int], expects: Sequence[Expect],
                  pipe: Pipeline) -> list[str]:
    problems = []
    for op, rid, expect in zip(ops, ids, expects, strict=True):
        answer = pipe.answers.get(rid)
        if answer is None:
            problems.append(f"{op}: no answer")
        elif expect.error is not None:
            code = answer.get("error", {}).get("code")
            if code != expect.error:
                problems.append(f"{op}: expected error {expect.error}, got {answer}")
        elif "result" not in answer:
            problems.append(f"{op}: expected a result, got {answer}")
        else:
            for key, value in (expect.fields or {}).items():
                if answer["result"].get(key) != value:
                    problems.append(f"{op}: {key} {answer['result'].get(key)!r}, "
                                    f"expected {value!r} ({answer['result']})")
    if pipe.duplicates:
        problems.append(f"answered twice: {pipe.duplicates}")
    return problems


def check_logs(log_paths: Sequence[pathlib.Path], model: Model,
               workspace: pathlib.Path) -> list[str]:
    problems = []
    for number, path in enumerate(log_paths):
        events = list(read_log(path).events)
        transcript = Transcript(events)  # every turn ended, every call answered
        problems += [f"s{number}: {p}"
                     for p in transcript.turn_problems() + transcript.call_problems()]
        for e in events:
            if isinstance(e, ToolResultEvent) and (number, e.turn_id) in model.stopped_turns \
                    and e.code != "ABORTED_BEFORE_DISPATCH":
                problems.append(f"s{number}: stopped turn {e.turn_id} ran a tool ({e.code})")
            if isinstance(e, ToolResultEvent) and (number, e.turn_id) in \
                    model.completed_turns and e.is_error:
                problems.append(f"s{number}: turn {e.turn_id}'s tool failed: {e.content}")
    written = (workspace / "s0" / "written.txt").exists()
    ran_write = any(n == 0 for n, _ in model.completed_turns)
    if written != ran_write:
        problems.append(f"Write landed: {written}, but a Write turn completed: {ran_write}")
    return problems


# -- running --------------------------------------------------------------------------


def _request(op: Op, session_ids: Sequence[str]) -> tuple[str, Any]:
    if op.kind == "list":
        return "session.list", {}
    sid = session_ids[op.session]
    if op.kind == "prompt":
        return "agent.prompt", {"sessionId": sid, "text": "go"}
    if op.kind == "abort":
        return "agent.abort", {"sessionId": sid, "keepInbox": op.keep_inbox}
    return f"session.{op.kind}", {"sessionId": sid}


@dataclass
class Runner:
    """Runs examples on one daemon (``pipe``), each in fresh sessions and workspaces."""

    pipe: Pipeline
    root: pathlib.Path
    data_dir: pathlib.Path
    examples: int = 0

    async def run(self, example: Example) -> list[str]:
        self.examples += 1
        workspace = self.root / f"ex{self.examples}"
        session_ids = []
        for number, kind in enumerate(KINDS):
            (workspace / f"s{number}").mkdir(parents=True)
            (workspace / f"s{number}" / "notes.txt").write_text("notes\n")
            answer = await self.pipe.call(*self.pipe.scripted_session(
                str(workspace / f"s{number}"), script(kind)))
            assert "result" in answer, answer
            session_ids.append(answer["result"]["sessionId"])
        model = Model()
        problems: list[str] = []
        for number, ops in enumerate(example):
            if not ops:
                continue
            ids = await self.pipe.write(*(_request(op, session_ids) for op in ops))
            expects = model.write(ops)
            await self.pipe.wait(ids)
            problems += [f"write {number + 1}: {p}" for p in
                         check_answers(ops, ids, expects, self.pipe)]
        for number, s in enumerate(model.sessions):  # leave the daemon as it was
            if s.open:
                answer = await self.pipe.call("session.close", {"sessionId": session_ids[number]})
                assert "result" in answer, answer
        logs = [self.data_dir / "sessions" / f"{sid}.jsonl" for sid in session_ids]
        return problems + check_logs(logs, model, workspace)


def describe(example: Example) -> str:
    return " | ".join(" ".join(str(op) for op in ops) for ops in example)
