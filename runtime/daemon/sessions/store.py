"""The daemon's sessions (``SessionStore``): their logs in the data directory, the sessions
loaded from them or made new, and loading after a crash. Each session is its own
(``session.py``); the store holds them and nothing else of theirs. What ``session.list``
shows of the logs not loaded here is ``listing.py``'s."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import os
import pathlib
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import msgspec
import trio

from protocol import ids
from protocol.errors import ErrorCode, RpcError
from protocol.messages.client import PermissionMode, ProviderConfig, SandboxMode
from protocol.messages.common import McpServerConfig
from protocol.messages.events import (
    HistoryCompacted,
    MaintenanceEnd,
    MaintenanceStart,
    SessionMeta,
    ToolCallEvent,
    ToolResultEvent,
    TurnEnd,
    TurnOutcome,
    TurnStart,
)
from protocol.tools import ToolResult, aborted_result
from runtime.agent import logfaults
from runtime.agent.journal import Journal
from runtime.agent.providers.base import Provider
from runtime.agent.sessionlog import (
    LogContents,
    SessionBusy,
    SessionLog,
    is_live_elsewhere,
    read_log,
)
from runtime.agent.turn import TurnConfig
from runtime.daemon.sessions.listing import SESSION_ID, why
from runtime.daemon.sessions.session import Session, SessionServices

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Loaded:
    session: Session
    recovered: bool


class SessionStore:
    """Sessions of this daemon, each with a log under ``data_dir/sessions``."""

    def __init__(self, data_dir: pathlib.Path, config: TurnConfig | None = None) -> None:
        self.dir = data_dir / "sessions"
        self._config = config or TurnConfig()
        self._sessions: dict[str, Session] = {}
        self._locks: dict[str, trio.Lock] = {}
        """The load/close lock of each id with no session now whose lock is held or awaited
        (by a load about to make its session, which keeps it; by a close that has just
        dropped its session): kept until it is let go (``release_lock``)."""
        logfaults.warn_if_active(log)

    def path_of(self, session_id: str) -> pathlib.Path:
        if not SESSION_ID.fullmatch(session_id):
            raise RpcError(ErrorCode.INVALID_PARAMS, f"malformed session id {session_id!r}")
        return self.dir / f"{session_id}.jsonl"

    def create(self, workspace: str, mode: PermissionMode,
               provider_config: ProviderConfig | None,
               provider: Provider, services: SessionServices,
               mcp_servers: tuple[McpServerConfig, ...] = (),
               system_prompt: str | None = None,
               sandbox: SandboxMode | None = None) -> Session:
        if not os.path.isabs(workspace):
            raise RpcError(ErrorCode.INVALID_PARAMS, "workspace must be an absolute path",
                           {"workspace": workspace})
        if not os.path.isdir(workspace):
            raise RpcError(ErrorCode.INVALID_PARAMS, "workspace is not a directory",
                           {"workspace": workspace})
        session_id = ids.session_id(uuid.uuid4().hex[:12])
        real = os.path.realpath(workspace)
        try:
            slog = SessionLog.create(self.path_of(session_id))
        except OSError as exc:
            raise RpcError(ErrorCode.INTERNAL, f"cannot create the session log: "
                                               f"{exc.strerror}") from exc
        journal = Journal(slog, lambda event: services.announce(session_id, event))
        try:
            meta = journal.append(lambda seq: SessionMeta(
                seq, "", session_id, real, mode, time.time(),
                msgspec.to_builtins(provider_config) if provider_config else {}, mcp_servers,
                system_prompt, sandbox))
        except OSError as exc:  # a full or failing disk: no session, and no empty log left
            slog.close()
            with contextlib.suppress(OSError):
                slog.path.unlink()
            raise RpcError(ErrorCode.INTERNAL, f"cannot write the session log: "
                                               f"{exc.strerror or exc}") from exc
        assert isinstance(meta, SessionMeta)
        return self._add(meta, journal, provider, services)

    def _add(self, meta: SessionMeta, journal: Journal, provider: Provider,
             services: SessionServices, lock: trio.Lock | None = None) -> Session:
        config = dataclasses.replace(
            self._config, workspace=meta.workspace,
            system_prompt=meta.system_prompt or self._config.system_prompt)
        session = Session(meta, journal, provider, config, services=services, store=self,
                          lock=lock)
        self._sessions[session.session_id] = session
        if lock is not None and self._locks.get(session.session_id) is lock:
            del self._locks[session.session_id]  # the session's from here
        return session

    async def load(self, session_id: str, *, provider: Callable[[dict[str, Any]], Provider],
                   services: SessionServices, lock: trio.Lock) -> Loaded:
        """Open a session from its log; close the turns a crash cut off, honestly.
        The caller holds ``lock``, :meth:`lock` of the id, which the session keeps."""
        if session_id in self._sessions:
            return Loaded(self._sessions[session_id], False)
        path = self.path_of(session_id)
        if not path.exists():
            raise RpcError(ErrorCode.NOT_FOUND, f"no session {session_id!r}")
        if is_live_elsewhere(path):
            raise RpcError(ErrorCode.BUSY, f"session {session_id} is open in another daemon")
        try:
            # Off the event loop: a long log must not hold up agent.abort elsewhere.
            contents = await trio.to_thread.run_sync(read_log, path)
            meta = contents.meta
        except (OSError, ValueError) as exc:
            raise RpcError(ErrorCode.INTERNAL, f"session log unreadable: {why(exc)}",
                           {"path": str(path)}) from exc
        try:
            slog = SessionLog.reopen(path, contents)
        except SessionBusy as exc:
            raise RpcError(ErrorCode.BUSY, str(exc)) from exc
        except OSError as exc:  # the torn last line could not be cut (EROFS, EIO)
            raise RpcError(ErrorCode.INTERNAL, f"session log cannot be reopened for "
                           f"appending: {why(exc)}", {"path": str(path)}) from exc
        try:
            journal, recovered = await self._repair(session_id, slog, contents)
        except OSError as exc:  # the log refuses the repair: the load fails, nothing is torn
            slog.close()
            raise RpcError(ErrorCode.INTERNAL, f"session log cannot take the repair of its "
                           f"interrupted turns: {why(exc)}", {"path": str(path)}) from exc
        journal = Journal(slog, lambda event: services.announce(session_id, event),
                          tuple(journal.events))
        return Loaded(self._add(meta, journal, provider(meta.provider), services, lock),
                      recovered)

    @staticmethod
    async def _repair(session_id: str, slog: SessionLog,
                      contents: LogContents) -> tuple[Journal, bool]:
        """Close every turn the log leaves open: a result for each unanswered call and an
        ``interrupted`` end. Repairs are announced with the replay that follows the load,
        not twice."""
        journal = Journal(slog, lambda event: None, contents.events)
        recovered = False
        result = aborted_result(before_dispatch=False,
                                details={"recovered": "the runtime stopped mid-call"})
        # A crash during a compaction: its end says so, before the end of the turn it ran
        # inside (at a step boundary), if it ran inside one.
        cut = _open_maintenance(contents)
        if cut is not None:
            recovered = True
            inside, compacted = cut
            await journal.append_durably(lambda seq: MaintenanceEnd(
                seq, inside, TurnOutcome("interrupted"), compacted))
            log.info("session %s: closed an interrupted maintenance", session_id)
        # Innermost (latest) first: a subagent's turn ends before its parent's call does.
        for open_turn in reversed(contents.open_turns()):
            recovered = True
            for call in contents.unanswered_calls(open_turn.turn_id):
                journal.append(functools.partial(_synthetic_result, call, result))
            await journal.append_durably(functools.partial(_interrupted_end, open_turn))
            log.info("session %s: closed interrupted turn %s", session_id, open_turn.turn_id)
        return journal, recovered

    def discard(self, session: Session, *, forget: bool = False) -> None:
        """Drop a session; ``forget``: also delete its log (it never became usable)."""
        if self._sessions.get(session.session_id) is session:
            del self._sessions[session.session_id]
            session.agent.journal.close()
            if forget:
                with contextlib.suppress(OSError):
                    self.path_of(session.session_id).unlink()

    def lock(self, session_id: str) -> trio.Lock:
        """The load/close lock of the id (``Session.lock``): a loaded session's own; for an
        id with no session, the one its load or close holds or awaits (a load's session
        keeps it), kept here until it is let go (``release_lock``)."""
        session = self._sessions.get(session_id)
        if session is not None:
            return session.lock
        return self._locks.setdefault(session_id, trio.Lock())

    def release_lock(self, session_id: str) -> None:
        """A load or close of the id has let its lock go: a lock no session has (the load
        failed, the id was not loaded, the session closed) is dropped once nobody holds or
        waits for it."""
        lock = self._locks.get(session_id)
        if lock is not None and not lock.locked() and not lock.statistics().tasks_waiting:
            del self._locks[session_id]

    def remove(self, session: Session) -> None:
        """Forget a closed session (its journal already closed). Its close still holds its
        lock (it tells the host last): kept for the id until let go, so a load behind the
        close waits for all of it."""
        if self._sessions.get(session.session_id) is session:
            del self._sessions[session.session_id]
            self._locks[session.session_id] = session.lock

    def __contains__(self, session_id: str) -> bool:
        return session_id in self._sessions

    def find(self, session_id: str) -> Session | None:
        return self._sessions.get(session_id)

    def get(self, session_id: str) -> Session:
        try:
            return self._sessions[session_id]
        except KeyError:
            raise RpcError(ErrorCode.NOT_FOUND, f"no session {session_id!r}") from None

    def all(self) -> tuple[Session, ...]:
        return tuple(self._sessions.values())


def _open_maintenance(contents: LogContents) -> tuple[str, bool] | None:
    """The log's last maintenance/start, if it has no end (None: it has one, or there is
    none): the turn it ran inside (empty: the maintenance phase) and whether its
    history/compacted made it to the log."""
    open_: tuple[str, bool] | None = None
    for event in contents.events:
        if isinstance(event, MaintenanceStart):
            open_ = (event.turn_id, False)
        elif isinstance(event, HistoryCompacted) and open_ is not None:
            open_ = (open_[0], True)
        elif isinstance(event, MaintenanceEnd):
            open_ = None
    return open_


def _synthetic_result(call: ToolCallEvent, result: ToolResult, seq: int) -> ToolResultEvent:
    return ToolResultEvent(seq, call.turn_id, call.step, call.call_id, True, result.code,
                           result.content, result.details)


def _interrupted_end(turn: TurnStart, seq: int) -> TurnEnd:
    return TurnEnd(seq, turn.turn_id,
                   TurnOutcome("interrupted",
                               error="the runtime stopped before this turn's end was recorded"),
                   "error")
