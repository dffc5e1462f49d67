"""A benchmark client of ``quiesce serve``: one real daemon subprocess, typed requests,
the events of every session, and the processes the run started (found by an
environment marker set on the daemon and inherited by its host and every tool
process)."""

from __future__ import annotations

import os
import pathlib
import time
import uuid
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import msgspec
import psutil
import trio

from protocol.causes import UserCause
from protocol.messages.client import (
    AgentAbortParams,
    AgentPromptParams,
    AgentPromptResult,
    ClientPermissionRequestParams,
    ScriptedProviderConfig,
    SessionEventParams,
    SessionNewParams,
    SessionNewResult,
)
from protocol.messages.events import AnnouncedEvent, ToolResultEvent
from protocol.messages.host import (
    PermissionRequestResult,
    PermissionWithdrawnParams,
)
from runtime.clients.daemon_client import DaemonClient, serve_command, spawn_daemon
from runtime.link import answers_later

MARK_VAR = "QUIESCE_BENCH_MARK"
"""Set on the daemon; the host and every process a tool starts inherit it."""
WAIT_TIMEOUT = 20.0
ABORT_TIMEOUT = 30.0


def now_ms() -> float:
    return time.perf_counter() * 1000.0


def scripted_call(call_id: str, name: str, **args: Any) -> dict[str, Any]:
    """One tool call of a scripted provider's response step (``new_session``'s script)."""
    return {"toolCall": {"id": call_id, "name": name, "args": args}}


@dataclass
class Session:
    """One session of the daemon, as the client sees it."""

    session_id: str
    events: list[AnnouncedEvent] = field(default_factory=list)
    permission_requests: list[ClientPermissionRequestParams] = field(default_factory=list)
    withdrawn: list[str] = field(default_factory=list)

    def tool_result(self, turn_id: str | None, call_id: str) -> ToolResultEvent | None:
        for event in self.events:
            if (isinstance(event, ToolResultEvent) and event.turn_id == turn_id
                    and event.call_id == call_id):
                return event
        return None


@dataclass(frozen=True)
class Member:
    """A live (or zombie) process carrying the run's marker, other than daemon and host."""

    pid: int
    name: str
    status: str
    term_ignored: bool

    def describe(self) -> str:
        extra = ", TERM ignored" if self.term_ignored else ""
        return f"{self.pid} {self.name} ({self.status}{extra})"


def _term_ignored(pid: int) -> bool:
    """Whether SIGTERM is ignored by ``pid`` (the SigIgn mask of /proc/PID/status)."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("SigIgn:"):
                    return bool(int(line.split()[1], 16) & (1 << (15 - 1)))
    except (OSError, ValueError):
        pass
    return False


def marked(mark: str, exclude: frozenset[int] = frozenset()) -> list[Member]:
    """Every process whose environment carries ``mark``, except ``exclude`` and us."""
    me = os.getpid()
    found: list[Member] = []
    for proc in psutil.process_iter(["pid", "name", "status", "ppid"]):
        pid = proc.info["pid"]
        if pid == me or pid in exclude:
            continue
        if proc.info["status"] == psutil.STATUS_ZOMBIE:
            # A zombie has no environment left: it is ours if the host (or the daemon)
            # is the parent that has not reaped it.
            if proc.info["ppid"] not in exclude:
                continue
        else:
            try:
                if proc.environ().get(MARK_VAR) != mark:
                    continue
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue
        found.append(Member(pid, proc.info["name"] or "?", proc.info["status"] or "?",
                            _term_ignored(pid)))
    return found


def kill_all(members: list[Member]) -> None:
    for member in members:
        try:
            psutil.Process(member.pid).kill()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass


class Bench:
    """The daemon under test, its sessions, and the processes it started."""

    def __init__(self, daemon: DaemonClient, workdir: pathlib.Path, mark: str) -> None:
        self.daemon = daemon
        self.workdir = workdir
        self.mark = mark
        self.sessions: dict[str, Session] = {}
        self.changed = trio.Event()
        self.host_pid: int | None = None
        self.capabilities: dict[str, Any] = {}
        """What the daemon's ``initialize`` answered (host, data directory, ops socket)."""

    # -- callbacks of the client link ---------------------------------------------

    def _session(self, session_id: str) -> Session:
        return self.sessions.setdefault(session_id, Session(session_id))

    def _touch(self) -> None:
        self.changed.set()
        self.changed = trio.Event()

    def on_event(self, params: SessionEventParams) -> None:
        self._session(params.session_id).events.append(params.event)
        self._touch()

    async def on_permission(self, params: ClientPermissionRequestParams) -> PermissionRequestResult:
        """Never answered: the scenario stops the turn while the prompt is pending."""
        self._session(params.session_id).permission_requests.append(params)
        self._touch()
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    def on_withdrawn(self, params: PermissionWithdrawnParams) -> None:
        self._session(params.session_id).withdrawn.append(params.request_id)
        self._touch()

    # -- requests -------------------------------------------------------------------

    async def request(self, method: str, params: msgspec.Struct) -> Any:
        return await self.daemon.request(method, params)

    async def timed(self, method: str, params: msgspec.Struct) -> tuple[float, Any]:
        """One request; its round trip in ms as the client sees it."""
        start = now_ms()
        result = await self.daemon.request(method, params)
        return now_ms() - start, result

    async def new_session(self, workspace: pathlib.Path, script: list[list[dict[str, Any]]],
                          mode: str = "auto", sandbox: str | None = None) -> Session:
        """``sandbox``: the session's sandbox mode (the bench's daemon runs with the
        sandbox ``off``, so a row may narrow it to ``workspace-write``)."""
        result: SessionNewResult = await self.request("session.new", SessionNewParams(
            str(workspace), mode, ScriptedProviderConfig(script=script),  # type: ignore[arg-type]
            sandbox=sandbox))  # type: ignore[arg-type]
        return self._session(result.session_id)

    async def prompt(self, session: Session, text: str) -> AgentPromptResult:
        result: AgentPromptResult = await self.request(
            "agent.prompt", AgentPromptParams(session.session_id, text))
        return result

    def abort_params(self, session: Session) -> AgentAbortParams:
        return AgentAbortParams(session.session_id, UserCause())

    async def wait_for(self, predicate: Callable[[], bool], within: float = WAIT_TIMEOUT,
                       what: str = "condition") -> None:
        try:
            with trio.fail_after(within):
                while not predicate():
                    await self.changed.wait()
        except trio.TooSlowError:
            raise TimeoutError(f"waited {within:g} s for {what}") from None

    # -- processes ------------------------------------------------------------------

    @property
    def own_pids(self) -> frozenset[int]:
        pids = {self.daemon.process.pid}
        if self.host_pid is not None:
            pids.add(self.host_pid)
        return frozenset(pids)

    def members(self) -> list[Member]:
        """Processes the daemon's tools started that are still there (live or zombie)."""
        return marked(self.mark, self.own_pids)

    async def wait_members(self, predicate: Callable[[list[Member]], bool],
                           within: float = WAIT_TIMEOUT, what: str = "tree members"
                           ) -> list[Member]:
        deadline = time.monotonic() + within
        while True:
            found = await trio.to_thread.run_sync(self.members)
            if predicate(found):
                return found
            if time.monotonic() > deadline:
                raise TimeoutError(f"waited {within:g} s for {what}; saw "
                                   f"{[m.describe() for m in found]}")
            await trio.sleep(0.01)


@asynccontextmanager
async def open_bench(workdir: pathlib.Path, extra_env: Mapping[str, str] | None = None
                     ) -> AsyncIterator[Bench]:
    """A daemon with its data directory, marker and log under ``workdir``
    (``extra_env`` is added to the daemon's environment)."""
    mark = uuid.uuid4().hex
    data_dir = workdir / "data"
    data_dir.mkdir()
    env = {**os.environ, **(extra_env or {}), MARK_VAR: mark, "QUIESCE_DATA_DIR": str(data_dir)}
    holder: list[Bench] = []

    async def on_permission(params: ClientPermissionRequestParams) -> PermissionRequestResult:
        return await holder[0].on_permission(params)

    def on_event(params: SessionEventParams) -> None:
        holder[0].on_event(params)

    def on_withdrawn(params: PermissionWithdrawnParams) -> None:
        holder[0].on_withdrawn(params)

    log = os.open(workdir / "daemon.log", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    # The sandbox off by default, so the rows keep measuring what they measured before it;
    # the sandboxed rows narrow their sessions to workspace-write (same run, side by side).
    # A scenario's own file (``QUIESCE_CONFIG``) gets the table added.
    named = (extra_env or {}).get("QUIESCE_CONFIG")
    config = pathlib.Path(named) if named else workdir / "bench-config.toml"
    text = config.read_text() if config.exists() else ""
    if "[sandbox]" not in text:
        config.write_text(text + '\n[sandbox]\nmode = "off"\n')
    try:
        async with spawn_daemon(serve_command("--config", str(config)), env=env, stderr=log,
                                # Recorded: the link reads on while it waits.
                                handlers={"permission.request": answers_later(on_permission)},
                                notification_handlers={"session.event": on_event,
                                                       "permission.withdrawn": on_withdrawn},
                                ) as daemon:
            info = await daemon.initialize()
            bench = Bench(daemon, workdir, mark)
            bench.capabilities = dict(info.capabilities)
            host = info.capabilities.get("host", {})
            bench.host_pid = host.get("pid") if isinstance(host, dict) else None
            holder.append(bench)
            yield bench
    finally:
        os.close(log)
