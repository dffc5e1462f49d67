"""``session/new`` requests in flight, and their cancellation by ``$/cancel_request``.

A ``session/new`` whose plugin servers are starting can take as long as the slowest one
(up to the host's start timeout). Cancelled, it is undone at once: the native session
it is opening is closed (native ``session.close`` of a session still opening cancels the
open, kills the starting servers' process trees and makes ``session.new`` answer), and
the request answers -32800.

The native session's id is learned before ``session.new`` answers, from its
``session/meta`` event (announced when the session is created, before its servers
start): it is bound to the oldest request sent for the same workspace and servers that
has no session yet (two such requests are interchangeable).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import msgspec
import trio

from protocol.errors import ErrorCode, RpcError
from protocol.messages.client import SessionCloseParams, SessionNewParams, SessionNewResult
from protocol.messages.common import McpServerConfig
from protocol.messages.events import SessionMeta
from protocol.methods import RequestId
from runtime.clients.acp.messages import NewSessionRequest

log = logging.getLogger(__name__)

Native = Callable[[str, msgspec.Struct], Awaitable[Any]]


@dataclass
class NewSession:
    """A ``session/new`` seen on the wire, until it answers; ``$/cancel_request`` marks it."""

    request_id: RequestId | None
    params: NewSessionRequest
    cancelled: trio.Event = field(default_factory=trio.Event)
    claimed: bool = False  # its handler runs (equal requests are told apart by order)
    opening: tuple[str, tuple[McpServerConfig, ...]] | None = None  # sent: (workspace, servers)
    session_id: str | None = None  # the native session it opens, once known
    bound: trio.Event = field(default_factory=trio.Event)

    def sent(self, params: SessionNewParams) -> None:
        """Its native ``session.new`` goes out: its ``session/meta`` will name the workspace
        as the daemon does (resolved) and the same servers."""
        self.opening = (os.path.realpath(params.workspace), params.mcp_servers)

    def bind(self, session_id: str) -> None:
        self.session_id = session_id
        self.bound.set()


class Openings:
    def __init__(self) -> None:
        self._seen: list[NewSession] = []  # session/new seen, not answered, in wire order

    def seen(self, request_id: RequestId, params: NewSessionRequest) -> None:
        self._seen.append(NewSession(request_id, params))

    def claim(self, params: NewSessionRequest) -> NewSession:
        """The request seen for these params (the first unclaimed equal one)."""
        for new in self._seen:
            if new.params == params and not new.claimed:
                new.claimed = True
                return new
        new = NewSession(None, params, claimed=True)
        self._seen.append(new)
        return new

    def forget(self, new: NewSession) -> None:
        if new in self._seen:
            self._seen.remove(new)

    def cancel(self, request_id: RequestId) -> bool:
        """``$/cancel_request``: whether it named a ``session/new`` in flight."""
        for new in self._seen:
            if new.request_id is not None and new.request_id == request_id:
                new.cancelled.set()
                return True
        return False

    def on_meta(self, session_id: str, meta: SessionMeta) -> None:
        """A session was created: bind it to the request that is opening it."""
        for new in self._seen:
            if (new.session_id is None and new.opening is not None
                    and new.opening == (meta.workspace, meta.mcp_servers)):
                new.bind(session_id)
                return

    async def open(self, new: NewSession, params: SessionNewParams,
                   native: Native) -> SessionNewResult:
        """Native ``session.new``; cancelled meanwhile, the session is closed (its starting
        servers killed) and this raises -32800 as soon as the daemon has undone it."""
        if new.cancelled.is_set():
            raise RpcError(ErrorCode.REQUEST_CANCELLED)
        new.sent(params)
        created: SessionNewResult | None = None
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._close_when_cancelled, new, native)
            try:
                created = await native("session.new", params)
            except RpcError:
                if not new.cancelled.is_set():
                    raise
            if created is not None and new.session_id is None:
                new.bind(created.session_id)
            if not new.cancelled.is_set() or new.session_id is None:
                nursery.cancel_scope.cancel()  # nothing to undo (or nothing to undo it with)
        if new.cancelled.is_set():
            raise RpcError(ErrorCode.REQUEST_CANCELLED)
        assert created is not None
        return created

    @staticmethod
    async def _close_when_cancelled(new: NewSession, native: Native) -> None:
        await new.cancelled.wait()
        await new.bound.wait()
        assert new.session_id is not None
        try:
            await native("session.close", SessionCloseParams(new.session_id))
        except RpcError as exc:  # e.g. it failed to open by itself meanwhile
            log.info("session %s: not closed after its session/new was cancelled: %s",
                     new.session_id, exc)
