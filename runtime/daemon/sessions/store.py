"""The daemon's sessions (``SessionStore``): their logs in the data directory, the sessions
loaded from them or made new, and loading after a crash. Each session is its own
(``session.py``); the store holds them, by id, and nothing else: an open session, and one
not open (being loaded, or closed) while a request on it is pending. What ``session.list``
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
        session = self._sessions[session_id] = Session(session_id, services=services,
                                                       store=self)
        self._attach(session, meta, journal, provider)
        return session

    def _attach(self, session: Session, meta: SessionMeta, journal: Journal,
                provider: Provider) -> None:
        config = dataclasses.replace(
            self._config, workspace=meta.workspace,
            system_prompt=meta.system_prompt or self._config.system_prompt)
        session.attach(meta, journal, provider, config)

    def claim(self, session_id: str, services: SessionServices) -> Session:
        """The id's session, whatever its state, made (``loading``) if it has none: where a
        ``session.load`` takes its place in the wire order."""
        self.path_of(session_id)  # a malformed id makes no session
        session = self._sessions.get(session_id)
        if session is None:
            session = self._sessions[session_id] = Session(session_id, services=services,
                                                           store=self)
        return session

    def pending(self, session_id: str) -> Session:
        """The id's session, whatever its state (a load may be pending on it): where a
        request on it takes its place in the wire order. NOT_FOUND if it has none."""
        session = self._sessions.get(session_id)
        if session is None:
            raise RpcError(ErrorCode.NOT_FOUND, f"no session {session_id!r}")
        return session

    def let_go(self, session_id: str) -> None:
        """A request on the id's session has ended: a session not open is forgotten once no
        request on it is pending (``Session.idle``)."""
        session = self._sessions.get(session_id)
        if session is not None and session.idle:
            del self._sessions[session_id]

    async def load(self, session_id: str, *, provider: Callable[[dict[str, Any]], Provider]
                   ) -> Loaded:
        """Open a session from its log; close the turns a crash cut off, honestly.
        The caller holds the lock of the id's session (``claim``); a closed one is
        succeeded by a new one (``Session.successor``), which keeps that lock."""
        session = self._sessions[session_id]
        if session.state == "open":
            return Loaded(session, False)
        if session.state == "closed":
            session = self._sessions[session_id] = session.successor()
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
        opened = provider(meta.provider)  # refused before the log is reopened (locked)
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
        journal = Journal(slog, lambda event: session.announce(event), tuple(journal.events))
        self._attach(session, meta, journal, opened)
        return Loaded(session, recovered)

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

    # The open sessions: what requests, operators and the host see.

    def __contains__(self, session_id: str) -> bool:
        return self.find(session_id) is not None

    def find(self, session_id: str) -> Session | None:
        session = self._sessions.get(session_id)
        return session if session is not None and session.state == "open" else None

    def get(self, session_id: str) -> Session:
        session = self.find(session_id)
        if session is None:
            raise RpcError(ErrorCode.NOT_FOUND, f"no session {session_id!r}")
        return session

    def all(self) -> tuple[Session, ...]:
        return tuple(s for s in self._sessions.values() if s.state == "open")


def _renumbered(event: DurableEvent) -> Callable[[int], DurableEvent]:
    """The event at the seq the journal gives it (the rulebook numbers on from the log's
    last seq, which is the journal's next)."""
    return lambda seq: msgspec.structs.replace(event, seq=seq)
