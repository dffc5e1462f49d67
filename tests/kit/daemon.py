"""Driving ``quiesce serve`` through agent turns, and checking what a stop left behind.

``Agent.stop_and_check`` is how every end-to-end stop test presses Stop: it sends
``agent.abort`` and, the moment the answer arrives, makes the contract's three checks
(the turn's end was on disk, every call has one result, no tool process is alive).
``frozen`` and ``wait_unread_input`` hold the host still so a stop can be made to land
at an exact point (a body mid-write, a first cause applied before a second is sent).
"""

from __future__ import annotations

import array
import fcntl
import os
import pathlib
import signal
import termios
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from typing import Any

import msgspec
import psutil
import pytest
import trio

from protocol.causes import CauseKind, cause_of
from protocol.messages.client import (
    AgentAbortParams,
    AgentAbortResult,
    AgentPromptParams,
    AgentPromptResult,
    ScriptedProviderConfig,
    SessionEventParams,
    SessionNewParams,
)
from protocol.messages.events import (
    AnnouncedEvent,
    DurableEvent,
    ToolCallEvent,
    ToolResultEvent,
    TurnEnd,
)
from protocol.messages.host import (
    PermissionRequestParams,
    PermissionRequestResult,
    PermissionWithdrawnParams,
)
from protocol.transcript import balance_problems
from runtime.agent.sessionlog import read_log
from runtime.clients.daemon_client import DaemonClient, spawn_daemon
from runtime.link import ConnectionClosed, answers_later
from runtime.proc.proctree import ENV_MARKER
from tests.conftest import Marked
from tests.kit.answers import Answer, never
from tests.support import command_line, marked_processes


@dataclass
class Agent:
    daemon: DaemonClient
    data_dir: pathlib.Path
    mark: str = ""  # the test's process marker (``Marked.mark``)
    session_id: str = ""
    events: list[AnnouncedEvent] = field(default_factory=list)
    by_session: dict[str, list[AnnouncedEvent]] = field(default_factory=dict)
    permission_requests: list[PermissionRequestParams] = field(default_factory=list)
    withdrawn: list[str] = field(default_factory=list)
    changed: trio.Event = field(default_factory=trio.Event)

    def on_event(self, params: SessionEventParams) -> None:
        self.events.append(params.event)
        self.by_session.setdefault(params.session_id, []).append(params.event)
        self.changed.set()
        self.changed = trio.Event()

    async def new_session(self, workspace: pathlib.Path, script: list[Any] | pathlib.Path, *,
                          mode: str = "auto") -> str:
        """A scripted session; ``script`` inline, or a file (for scripts over a frame)."""
        provider = (ScriptedProviderConfig(path=str(script)) if isinstance(script, pathlib.Path)
                    else ScriptedProviderConfig(script=script))
        result = await self.daemon.request("session.new", SessionNewParams(
            str(workspace), mode, provider))  # type: ignore[arg-type]
        self.session_id = result.session_id
        return self.session_id

    async def prompt(self, text: str) -> AgentPromptResult:
        result: AgentPromptResult = await self.daemon.request(
            "agent.prompt", AgentPromptParams(self.session_id, text))
        return result

    def prompt_soon(self, nursery: trio.Nursery, text: str) -> list[AgentPromptResult]:
        """Send ``agent.prompt`` in ``nursery``; its answer lands in the list returned."""
        answers: list[AgentPromptResult] = []

        async def prompt() -> None:
            answers.append(await self.prompt(text))

        nursery.start_soon(prompt)
        return answers

    async def abort(self, cause: CauseKind = "user", *, keep_inbox: bool = False,
                    reason: str | None = None) -> AgentAbortResult:
        result: AgentAbortResult = await self.daemon.request("agent.abort", AgentAbortParams(
            self.session_id, cause_of(cause, reason), keep_inbox))  # type: ignore[arg-type]
        return result

    async def wait_for(self, predicate: Callable[[AnnouncedEvent], bool],
                       within: float = 15.0) -> AnnouncedEvent:
        with trio.fail_after(within):
            while True:
                for event in self.events:
                    if predicate(event):
                        return event
                await self.changed.wait()

    def log(self) -> list[DurableEvent]:
        return list(read_log(self.data_dir / "sessions" / f"{self.session_id}.jsonl").events)

    def assert_balanced(self) -> None:
        """Every durable tool/call has exactly one tool/result, in the same turn and step."""
        assert_balanced(self.log(), "the log")

    def turn_end_on_disk(self, turn_id: str) -> TurnEnd | None:
        for event in self.log():
            if isinstance(event, TurnEnd) and event.turn_id == turn_id:
                return event
        return None

    def results(self, turn_id: str) -> dict[str, ToolResultEvent]:
        return {e.call_id: e for e in self.log()
                if isinstance(e, ToolResultEvent) and e.turn_id == turn_id}

    @property
    def host_pid(self) -> int:
        assert self.daemon.info is not None
        return int(self.daemon.info.capabilities["host"]["pid"])

    # -- the checks after every stop ---------------------------------------------------

    async def stop_and_check(self, cause: CauseKind = "user", *, keep_inbox: bool = False,
                             reason: str | None = None, within: float = 15.0,
                             processes_gone_within: float = 0.0,
                             spare: Collection[int] = ()) -> AgentAbortResult:
        """Press Stop and check what the answer claims, at the moment it arrives.

        ``processes_gone_within``: only where the contract lets the runtime answer before
        the host has killed a tree (a process call past its grace window, ``unconfirmed``).
        ``spare``: processes meant to outlive a stop (a plugin server keeps serving).
        """
        with trio.fail_after(within):
            answer = await self.abort(cause, keep_inbox=keep_inbox, reason=reason)
        # No checkpoint between the answer and these snapshots: the log on disk and the
        # events the client saw, as they were when the daemon answered (at the latest).
        # Turn ids repeat across sessions: only this session's events count.
        log, seen = self.log(), list(self.by_session.get(self.session_id, []))
        check_answer(answer, log, seen)
        await self.check_no_tool_process(within=processes_gone_within, spare=spare)
        return answer

    def tool_processes(self, spare: Collection[int] = ()) -> list[psutil.Process]:
        """Every live process a tool started: below the daemon (an escapee that cleared its
        environment, so carries no mark, is adopted by the host or the runtime) or marked by
        a host, but not the daemon, its host or ``spare``. A process the test itself runs
        beside the daemon (``quiesce ops``) is neither."""
        assert self.mark, "an Agent made without the test's mark cannot see its processes"
        daemon = self.daemon.process.pid
        ours = {daemon, self.host_pid, *spare}
        found = {p.pid: p for p in marked_processes(self.mark)
                 if _started_by_the_daemon(p, daemon)}
        try:
            for child in psutil.Process(daemon).children(recursive=True):
                if _alive(child):
                    found.setdefault(child.pid, child)
        except psutil.NoSuchProcess:
            pass
        return [p for pid, p in found.items() if pid not in ours]

    async def check_no_tool_process(self, *, within: float = 0.0,
                                    spare: Collection[int] = ()) -> None:
        """No process a tool started is alive (checked now, or polled up to ``within``)."""
        deadline = trio.current_time() + within
        while (left := self.tool_processes(spare)) and trio.current_time() < deadline:
            await trio.sleep(0.05)
        assert not left, "processes alive after the stop: " + "; ".join(
            f"{p.pid} {command_line(p)!r} {_call_of(p)}" for p in left)


@asynccontextmanager
async def agent_daemon(marked: Marked, *, answer: Answer = never,
                       extra_args: tuple[str, ...] = (),
                       env_extra: dict[str, str] | None = None,
                       env_drop: tuple[str, ...] = ()) -> AsyncIterator[Agent]:
    holder: list[Agent] = []
    env = {k: v for k, v in marked.env(**(env_extra or {})).items() if k not in env_drop}

    async def on_permission(params: PermissionRequestParams) -> PermissionRequestResult:
        holder[0].permission_requests.append(params)
        holder[0].changed.set()
        return await answer(params)

    def on_withdrawn(params: PermissionWithdrawnParams) -> None:
        holder[0].withdrawn.append(params.request_id)

    def on_event(params: SessionEventParams) -> None:
        holder[0].on_event(params)

    from runtime.clients.daemon_client import serve_command

    async with spawn_daemon(serve_command(*extra_args), env=env,
                            # A client answering later: the link reads on.
                            handlers={"permission.request": answers_later(on_permission)},
                            notification_handlers={"session.event": on_event,
                                                   "permission.withdrawn": on_withdrawn},
                            ) as daemon:
        await daemon.initialize()
        agent = Agent(daemon, marked.data_dir, marked.mark)
        holder.append(agent)
        yield agent


async def kill_under(agent: Agent, request: Callable[[], Awaitable[object]],
                     when: Callable[[AnnouncedEvent], bool], *, after: float = 0.0) -> None:
    """SIGKILL the daemon under ``request`` (which fails ``ConnectionClosed``) once an event
    for which ``when`` holds was announced (and ``after`` seconds more); return once the
    daemon is dead. The session's log is then as a crash leaves it."""

    async def cut() -> None:
        with pytest.raises(ConnectionClosed):
            await request()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(cut)
        await agent.wait_for(when)
        if after:
            await trio.sleep(after)
        agent.daemon.process.send_signal(signal.SIGKILL)
        with trio.fail_after(10):
            await agent.daemon.process.wait()


def text(t: str) -> dict[str, Any]:
    return {"text": t}


def sleep(ms: int) -> dict[str, Any]:
    return {"sleepMs": ms}


def call(call_id: str, name: str, **args: Any) -> dict[str, Any]:
    return {"toolCall": {"id": call_id, "name": name, "args": args}}


def encode(obj: Any) -> str:
    return msgspec.json.encode(obj).decode()


# -- what an answer to agent.abort must agree with ----------------------------------------

def assert_balanced(events: Sequence[AnnouncedEvent | DurableEvent], where: str) -> None:
    """In every turn that has ended: each tool/call has exactly one tool/result (same turn
    and step), by the transcript rulebook. Turns still running (a queued prompt's, started
    after the stop) are skipped."""
    problems = balance_problems(events, ended_only=True)
    assert not problems, f"{where}: {problems}"


def check_answer(answer: AgentAbortResult, log: Sequence[DurableEvent],
                 seen: Sequence[AnnouncedEvent]) -> None:
    """``log`` and ``seen`` were taken when ``answer`` arrived: its turn's end must already
    be on disk (and announced), agree with the answer, and leave every call answered."""
    if answer.turn_id is not None:
        ends = [e for e in log if isinstance(e, TurnEnd) and e.turn_id == answer.turn_id]
        assert len(ends) == 1, (f"agent.abort answered {answer.outcome} for {answer.turn_id} "
                                f"with {len(ends)} turn/end on disk")
        assert any(isinstance(e, TurnEnd) and e.turn_id == answer.turn_id for e in seen), \
            "agent.abort answered before its turn/end was announced"
        (end,) = ends
        if answer.outcome == "aborted":
            assert end.end.kind == "aborted" and end.stop_reason == "cancelled", end
            assert end.end.reason == answer.cause, (end.end.reason, answer.cause)
        elif answer.outcome == "error":  # it ended with an error while the stop settled
            assert end.end.kind == "error" and end.end.error == answer.error, end
        else:  # the turn ended on its own before the stop reached it
            assert end.end.kind != "aborted", end
        codes = {e.call_id: e.code for e in log
                 if isinstance(e, ToolResultEvent) and e.turn_id == answer.turn_id}
        called = [(e.call_id, e.tool) for e in log
                  if isinstance(e, ToolCallEvent) and e.turn_id == answer.turn_id]
        if answer.outcome != "idle":
            assert [(c.call_id, c.tool, c.code) for c in answer.tool_calls] == [
                (call_id, tool, codes.get(call_id)) for call_id, tool in called], \
                (answer.tool_calls, called, codes)
    else:
        assert answer.outcome == "idle" and answer.cause is None, answer
    assert_balanced(log, "the log")
    assert_balanced([e for e in seen if isinstance(e, ToolCallEvent | ToolResultEvent | TurnEnd)],
                    "the events the client saw")


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _started_by_the_daemon(proc: psutil.Process, daemon_pid: int) -> bool:
    try:
        if ENV_MARKER in proc.environ():
            return True
        return any(parent.pid == daemon_pid for parent in proc.parents())
    except (psutil.NoSuchProcess, psutil.AccessDenied):  # exited meanwhile (zombies included)
        return False


def _call_of(proc: psutil.Process) -> str:
    try:
        return f"({ENV_MARKER}={proc.environ().get(ENV_MARKER)})"
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return "(gone)"


# -- holding the host still ------------------------------------------------------------

def freeze(pid: int) -> None:
    """SIGSTOP ``pid``: every thread of it, the event loop and any worker, stands still."""
    os.kill(pid, signal.SIGSTOP)


def thaw(pid: int) -> None:
    os.kill(pid, signal.SIGCONT)


@contextmanager
def frozen(pid: int) -> Iterator[None]:
    freeze(pid)
    try:
        yield
    finally:
        thaw(pid)


def _pipe_ends(pid: int, access: int) -> dict[str, int]:
    """The pipes ``pid`` holds open for ``access`` (``os.O_RDONLY``/``O_WRONLY``): inode to fd."""
    ends = {}
    for name in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{name}")
            with open(f"/proc/{pid}/fdinfo/{name}") as info:
                flags = next(int(line.split()[1], 8) for line in info
                             if line.startswith("flags:"))
        except (FileNotFoundError, StopIteration):
            continue
        if target.startswith("pipe:") and flags & os.O_ACCMODE == access:
            ends[target] = int(name)
    return ends


async def wait_unread_input(reader: int, writer: int, within: float = 5.0) -> None:
    """Wait until the pipe from ``writer`` to (frozen) ``reader`` holds bytes not yet read:
    a request sent to it has arrived. Reads nothing: FIONREAD on a second descriptor."""
    reads = _pipe_ends(reader, os.O_RDONLY)
    (inode,) = reads.keys() & _pipe_ends(writer, os.O_WRONLY).keys()
    fd = os.open(f"/proc/{reader}/fd/{reads[inode]}", os.O_RDONLY | os.O_NONBLOCK)
    try:
        with trio.fail_after(within):
            while True:
                pending = array.array("i", [0])
                fcntl.ioctl(fd, termios.FIONREAD, pending)
                if pending[0] > 0:
                    return
                await trio.sleep(0.002)
    finally:
        os.close(fd)
