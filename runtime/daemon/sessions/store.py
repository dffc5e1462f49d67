"""The daemon's sessions (``SessionStore``): their logs in the data directory, the sessions
loaded from them or made new, and loading after a crash. Each session is its own
(``session.py``); the store holds them and nothing else of theirs. What ``session.list``
shows of the logs not loaded here is ``listing.py``'s."""

from __future__ import annotations

import contextlib
import dataclasses
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
    DurableEvent,
    MaintenanceEnd,
    SessionMeta,
    ToolResultEvent,
)
from protocol.transcript import Transcript
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
        """Close every turn the log leaves open, as the transcript rulebook says: a result
        for each unanswered call and an ``interrupted`` end (and the end of a compaction a
        crash cut). Repairs are announced with the replay that follows the load, not
        twice."""
        journal = Journal(slog, lambda event: None, contents.events)
        repair = Transcript(contents.events).repair()
        for event in repair:
            if isinstance(event, ToolResultEvent):
                journal.append(_renumbered(event))
                continue
            await journal.append_durably(_renumbered(event))  # an end: durable at once
            if isinstance(event, MaintenanceEnd):
                log.info("session %s: closed an interrupted maintenance", session_id)
            else:
                log.info("session %s: closed interrupted turn %s", session_id, event.turn_id)
        return journal, bool(repair)

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


def _renumbered(event: DurableEvent) -> Callable[[int], DurableEvent]:
    """The event at the seq the journal gives it (the rulebook numbers on from the log's
    last seq, which is the journal's next)."""
    return lambda seq: msgspec.structs.replace(event, seq=seq)
