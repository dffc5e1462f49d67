"""``quiesce demo``: start work, press Stop, and show what stopping did.

It runs ``quiesce serve`` as an editor would (a subprocess over stdio) on a
temporary workspace with two sessions: one reads files and then starts a
shell process tree (background jobs, ``setsid``, ``nohup``, a double fork),
the other starts a slow Grep. Once both are running it stops both turns at
once and prints, for each, the timeline of the stop (abort sent, the host's
answer per call, each call's code, the process tree's fate, turn settled) and
then the session's durable transcript.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any

import psutil
import trio

from protocol.messages.client import (
    AgentAbortParams,
    AgentAbortResult,
    AgentPromptParams,
    ScriptedProviderConfig,
    SessionEventParams,
    SessionNewParams,
)
from protocol.messages.events import (
    AnnouncedEvent,
    AssistantMessageEvent,
    ToolAbortEvent,
    ToolCallEvent,
    ToolProgressEvent,
    ToolResultEvent,
    TurnEnd,
    TurnStart,
    UserMessageEvent,
)
from runtime.clients.daemon_client import DaemonClient, spawn_daemon
from runtime.clients.eventrender import render

TREE = ("echo 'build: starting workers'; "
        "sleep 300 & "
        "setsid sleep 300 & "
        "( sleep 300 & ) ; "
        "nohup sleep 300 >/dev/null 2>&1 & "
        "for i in 1 2 3 4 5 6 7 8 9; do echo \"build: step $i\"; sleep 0.2; done; "
        "sleep 300")

BUILD_SCRIPT: list[Any] = [
    [{"text": "I'll look at the project first."},
     {"toolCall": {"id": "read-1", "name": "Read", "args": {"path": "README.md"}}},
     {"toolCall": {"id": "glob-1", "name": "Glob", "args": {"pattern": "**/*.py"}}}],
    [{"reasoning": "The README says to run the build."},
     {"text": "Running the build."},
     {"toolCall": {"id": "bash-1", "name": "Bash", "args": {"command": TREE}}},
     {"toolCall": {"id": "write-1", "name": "Write",
                   "args": {"path": "BUILD_OK", "content": "built\n"}}}],
    [{"text": "The build finished."}],
]
SEARCH_SCRIPT: list[Any] = [
    [{"text": "Searching the logs."},
     {"toolCall": {"id": "grep-1", "name": "Grep",
                   "args": {"pattern": "(a|aa)*c", "path": "logs/service.log"}}}],
    [{"text": "Nothing found."}],
]


def _say(text: str = "") -> None:
    print(text, flush=True)


@dataclass
class Watched:
    name: str
    session_id: str = ""
    events: list[tuple[float, AnnouncedEvent]] = field(default_factory=list)
    running: trio.Event = field(default_factory=trio.Event)
    abort_sent: float = 0.0
    answer: AgentAbortResult | None = None
    answered: float = 0.0


def _make_workspace(root: pathlib.Path) -> None:
    (root / "README.md").write_text("# widget\n\nBuild with `make build`; it takes a while.\n")
    (root / "src").mkdir()
    (root / "src" / "widget.py").write_text("def widget():\n    return 42\n")
    (root / "src" / "test_widget.py").write_text("from widget import widget\n")
    (root / "logs").mkdir()
    # A search that takes minutes of real ripgrep work (a huge log; sparse, so it costs no
    # disk): the kind of Grep users stop.
    with open(root / "logs" / "service.log", "wb") as log:
        log.truncate(256 * 1024**3)


def _alive(tree: list[psutil.Process]) -> list[psutil.Process]:
    alive = []
    for proc in tree:
        try:
            if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                alive.append(proc)
        except psutil.NoSuchProcess:
            continue
    return alive


def _tree_of(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


async def _run(workspace: pathlib.Path, data_dir: pathlib.Path) -> None:
    _make_workspace(workspace)
    sessions: dict[str, Watched] = {}
    t0 = time.perf_counter()

    def on_event(params: SessionEventParams) -> None:
        watched = sessions.get(params.session_id)
        if watched is None:
            return
        watched.events.append((time.perf_counter(), params.event))
        event = params.event
        if isinstance(event, ToolProgressEvent) and "step 2" in event.text:
            watched.running.set()
        if isinstance(event, ToolCallEvent) and event.tool == "Grep":
            watched.running.set()

    env = {**os.environ, "QUIESCE_DATA_DIR": str(data_dir),
           "QUIESCE_LOG_LEVEL": os.environ.get("QUIESCE_LOG_LEVEL", "WARNING")}
    async with spawn_daemon(env=env, notification_handlers={"session.event": on_event}
                            ) as daemon:
        info = await daemon.initialize()
        host_pid = int(info.capabilities["host"]["pid"])
        _say(f"quiesce serve pid {daemon.process.pid}, host pid {host_pid}, ready in "
             f"{(time.perf_counter() - t0) * 1000:.0f} ms; workspace {workspace}")
        for name, script in (("build", BUILD_SCRIPT), ("search", SEARCH_SCRIPT)):
            result = await daemon.request("session.new", SessionNewParams(
                str(workspace), "auto", ScriptedProviderConfig(script=script)))
            sessions[result.session_id] = Watched(name, result.session_id)
        async with trio.open_nursery() as nursery:
            for watched in sessions.values():
                nursery.start_soon(_prompt, daemon, watched)
            with trio.fail_after(30):
                for watched in sessions.values():
                    await watched.running.wait()
            await trio.sleep(0.3)
            tree = _tree_of(host_pid)
            _say(f"\nboth turns are running; the host has {len(tree)} tool processes: "
                 + ", ".join(sorted({p.name() for p in tree if p.is_running()})))
            _say("pressing Stop on both sessions...\n")
            async with trio.open_nursery() as stops:
                for watched in sessions.values():
                    stops.start_soon(_abort, daemon, watched)
            # A stopped Grep's ripgrep is killed by the host just after the runtime stopped
            # waiting for it (the read-only policy): give it that moment.
            with trio.move_on_after(1.0):
                while _alive(tree):  # noqa: ASYNC110 -- other processes: no event to wait on
                    await trio.sleep(0.01)
            alive = _alive(tree)
        for watched in sessions.values():
            _timeline(watched)
        _say(f"process tree: {len(tree)} processes before the stop, {len(alive)} alive after "
             "the answers")
        for watched in sessions.values():
            _transcript(watched)
    _say(f"\ndaemon exited with status {daemon.process.returncode}; host stopped with it")


async def _prompt(daemon: DaemonClient, watched: Watched) -> None:
    await daemon.request("agent.prompt", AgentPromptParams(watched.session_id, "go"))


async def _abort(daemon: DaemonClient, watched: Watched) -> None:
    watched.abort_sent = time.perf_counter()
    watched.answer = await daemon.request("agent.abort", AgentAbortParams(watched.session_id))
    watched.answered = time.perf_counter()


def _timeline(watched: Watched) -> None:
    """The stop's timeline, sorted by time (events may arrive after the answer: a
    read-only call's host answer to its abort comes once the runtime stopped waiting)."""
    answer = watched.answer
    assert answer is not None

    def at(t: float) -> str:
        return f"{(t - watched.abort_sent) * 1000:+8.1f} ms"

    entries: list[tuple[float, str]] = [(watched.abort_sent, "agent.abort sent (cause user)")]
    for t, event in watched.events:
        if t < watched.abort_sent:
            continue
        record = render(event)
        if isinstance(event, ToolAbortEvent):
            entries.append((t, record.host_found
                               + (", body running" if event.body_invoked else "")))
        elif isinstance(event, ToolResultEvent):
            note = ""
            if record.ran_a_process:
                note = " (process tree terminated)"
            if record.abandoned:
                note = f" ({record.stop_note})"
            entries.append((t, f"{event.call_id}: {record.code}{note}"))
        elif isinstance(event, TurnEnd):
            entries.append((t, f"turn/end {event.end.kind} on disk (fsynced)"))
    entries.append((watched.answered, f"agent.abort answered: {answer.outcome}, settled in "
                                      f"{answer.settled_ms:.1f} ms"))
    _say(f"[{watched.name}] stop timeline")
    for t, text in sorted(entries, key=lambda entry: entry[0]):
        _say(f"  {at(t)}  {text}")
    for c in answer.tool_calls:
        _say(f"             {c.call_id:8} {c.tool:6} {c.tool_class:9} {c.code or 'ok'}")
    _say()


def _transcript(watched: Watched) -> None:
    _say(f"[{watched.name}] transcript")
    for _, event in watched.events:
        record = render(event)
        if isinstance(event, TurnStart):
            _say(f"  turn/start {event.turn_id}")
        elif isinstance(event, UserMessageEvent):
            _say(f"  user: {event.text}")
        elif isinstance(event, AssistantMessageEvent):
            text = record.text
            mark = " [interrupted]" if event.interrupted else ""
            _say(f"  assistant{mark}: {text}")
        elif isinstance(event, ToolCallEvent):
            _say(f"  tool/call {record.label}")
        elif isinstance(event, ToolResultEvent):
            _say(f"  tool/result {event.call_id}: {record.code}")
        elif isinstance(event, TurnEnd):
            _say(f"  turn/end {record.label}, stopReason {event.stop_reason}")


def run_demo(*, keep: bool = False) -> int:
    root = pathlib.Path(tempfile.mkdtemp(prefix="quiesce-demo-"))
    workspace, data_dir = root / "workspace", root / "data"
    workspace.mkdir()
    try:
        trio.run(_run, workspace, data_dir)
    finally:
        if keep:
            print(f"workspace and session logs kept under {root}", file=sys.stderr)
        else:
            shutil.rmtree(root, ignore_errors=True)
    return 0
