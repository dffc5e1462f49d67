"""Sessions: their logs in the data directory, their agents, and loading after a crash."""

from __future__ import annotations

import functools
import logging
import os
import pathlib
import re
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import msgspec

from protocol.errors import ErrorCode, RpcError
from protocol.messages.client import PermissionMode, ProviderConfig, SessionInfo
from protocol.messages.events import (
    AnnouncedEvent,
    SessionMeta,
    ToolCallEvent,
    ToolResultEvent,
    TurnEnd,
    TurnOutcome,
)
from protocol.tools import ToolResult, aborted_result
from runtime.agent.agent import Agent, ToolsFactory
from runtime.agent.journal import Journal
from runtime.agent.turn import TurnConfig
from runtime.providers.base import Provider
from runtime.sessionlog import SessionLog, read_log

log = logging.getLogger(__name__)

_SESSION_ID = re.compile(r"^s-[0-9a-f]{12}$")


@dataclass
class Session:
    session_id: str
    workspace: str
    permission_mode: PermissionMode
    created_at: float
    agent: Agent

    def info(self) -> SessionInfo:
        return SessionInfo(self.session_id, self.workspace, self.permission_mode,
                           self.created_at)


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

    def path_of(self, session_id: str) -> pathlib.Path:
        if not _SESSION_ID.fullmatch(session_id):
            raise RpcError(ErrorCode.INVALID_PARAMS, f"malformed session id {session_id!r}")
        return self.dir / f"{session_id}.jsonl"

    def create(self, workspace: str, mode: PermissionMode,
               provider_config: ProviderConfig | None,
               provider: Provider, announce: Callable[[str, AnnouncedEvent], None],
               tools: Callable[[str], ToolsFactory]) -> Session:
        if not os.path.isabs(workspace):
            raise RpcError(ErrorCode.INVALID_PARAMS, "workspace must be an absolute path",
                           {"workspace": workspace})
        if not os.path.isdir(workspace):
            raise RpcError(ErrorCode.INVALID_PARAMS, "workspace is not a directory",
                           {"workspace": workspace})
        session_id = f"s-{uuid.uuid4().hex[:12]}"
        real = os.path.realpath(workspace)
        try:
            slog = SessionLog.create(self.path_of(session_id))
        except OSError as exc:
            raise RpcError(ErrorCode.INTERNAL, f"cannot create the session log: "
                                               f"{exc.strerror}") from exc
        journal = Journal(slog, lambda event: announce(session_id, event))
        meta = journal.append(lambda seq: SessionMeta(
            seq, "", session_id, real, mode, time.time(),
            msgspec.to_builtins(provider_config) if provider_config else {}))
        assert isinstance(meta, SessionMeta)
        return self._add(meta, journal, provider, tools)

    def _add(self, meta: SessionMeta, journal: Journal, provider: Provider,
             tools: Callable[[str], ToolsFactory]) -> Session:
        agent = Agent(meta.session_id, journal, provider, tools(meta.session_id), self._config)
        session = Session(meta.session_id, meta.workspace, meta.permission_mode,  # type: ignore[arg-type]
                          meta.created_at, agent)
        self._sessions[session.session_id] = session
        return session

    async def load(self, session_id: str, *, provider: Callable[[dict[str, Any]], Provider],
                   announce: Callable[[str, AnnouncedEvent], None],
                   tools: Callable[[str], ToolsFactory]) -> Loaded:
        """Open a session from its log; close a turn a crash cut off, honestly."""
        if session_id in self._sessions:
            return Loaded(self._sessions[session_id], False)
        path = self.path_of(session_id)
        if not path.exists():
            raise RpcError(ErrorCode.NOT_FOUND, f"no session {session_id!r}")
        try:
            contents = read_log(path)
            meta = contents.meta
        except ValueError as exc:
            raise RpcError(ErrorCode.INTERNAL, f"session log unreadable: {exc}") from exc
        slog = SessionLog.reopen(path, contents)
        # Repairs are announced with the replay that follows the load, not twice.
        journal = Journal(slog, lambda event: None, contents.events)
        recovered = False
        open_turn = contents.open_turn()
        if open_turn is not None:
            recovered = True
            result = aborted_result(before_dispatch=False,
                                    details={"recovered": "the runtime stopped mid-call"})
            for call in contents.unanswered_calls(open_turn.turn_id):
                journal.append(functools.partial(_synthetic_result, call, result))
            await journal.append_durably(lambda seq: TurnEnd(
                seq, open_turn.turn_id,
                TurnOutcome("interrupted", error="the runtime stopped during this turn"),
                "error"))
            log.info("session %s: closed interrupted turn %s", session_id, open_turn.turn_id)
        journal = Journal(slog, lambda event: announce(session_id, event), tuple(journal.events))
        return Loaded(self._add(meta, journal, provider(meta.provider), tools), recovered)

    def get(self, session_id: str) -> Session:
        try:
            return self._sessions[session_id]
        except KeyError:
            raise RpcError(ErrorCode.NOT_FOUND, f"no session {session_id!r}") from None

    def all(self) -> tuple[Session, ...]:
        return tuple(self._sessions.values())

    def on_disk(self) -> list[SessionInfo]:
        """Sessions in the data directory that this daemon has not loaded."""
        found: list[SessionInfo] = []
        if not self.dir.is_dir():
            return found
        for path in sorted(self.dir.glob("s-*.jsonl")):
            session_id = path.stem
            if session_id in self._sessions or not _SESSION_ID.fullmatch(session_id):
                continue
            try:
                contents = read_log(path)
                meta = contents.meta
            except (OSError, ValueError) as exc:
                log.warning("skipping unreadable session log %s: %s", path, exc)
                continue
            found.append(SessionInfo(meta.session_id, meta.workspace,
                                     meta.permission_mode,  # type: ignore[arg-type]
                                     meta.created_at, loaded=False,
                                     interrupted=contents.open_turn() is not None))
        return found


def _synthetic_result(call: ToolCallEvent, result: ToolResult, seq: int) -> ToolResultEvent:
    return ToolResultEvent(seq, call.turn_id, call.step, call.call_id, True, result.code,
                           result.content, result.details)
