"""Sessions of a daemon: id, workspace and permission mode."""

from __future__ import annotations

import os
import time
import uuid
from dataclasses import dataclass

from protocol.errors import ErrorCode, RpcError
from protocol.messages.client import PermissionMode, SessionInfo


@dataclass(frozen=True)
class Session:
    session_id: str
    workspace: str
    permission_mode: PermissionMode
    created_at: float

    def info(self) -> SessionInfo:
        return SessionInfo(self.session_id, self.workspace, self.permission_mode,
                           self.created_at)


class SessionTable:
    def __init__(self) -> None:
        self._sessions: dict[str, Session] = {}

    def create(self, workspace: str, permission_mode: PermissionMode) -> Session:
        if not os.path.isabs(workspace):
            raise RpcError(ErrorCode.INVALID_PARAMS, "workspace must be an absolute path",
                           {"workspace": workspace})
        if not os.path.isdir(workspace):
            raise RpcError(ErrorCode.INVALID_PARAMS, "workspace is not a directory",
                           {"workspace": workspace})
        session = Session(f"s-{uuid.uuid4().hex[:12]}", os.path.realpath(workspace),
                          permission_mode, time.time())
        self._sessions[session.session_id] = session
        return session

    def get(self, session_id: str) -> Session:
        try:
            return self._sessions[session_id]
        except KeyError:
            raise RpcError(ErrorCode.NOT_FOUND, f"no session {session_id!r}") from None

    def all(self) -> tuple[Session, ...]:
        return tuple(self._sessions.values())
