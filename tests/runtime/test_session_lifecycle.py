"""A session's life on the daemon's session side, with a stand-in host and no kernel: open,
close, loads racing a close and each other, and the load/close lock going with the session."""

from __future__ import annotations

import dataclasses
import pathlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import msgspec
import pytest
import trio
import trio.testing

from protocol.errors import ErrorCode, RpcError
from protocol.messages.client import (
    ScriptedProviderConfig,
    SessionCloseParams,
    SessionLoadParams,
    SessionNewParams,
    SessionSetModeParams,
)
from protocol.messages.common import Empty
from protocol.messages.host import PluginsListResult, SessionOpenResult
from runtime.daemon.daemon import Daemon
from runtime.daemon.sessions.session import Session
from runtime.link import Effect


class _Host:
    """Answers ``session.open`` and ``plugins.list``; ``session.close`` waits for
    ``let_close`` when it is given one."""

    def __init__(self) -> None:
        self.told: list[tuple[str, str]] = []
        self.let_close: trio.Event | None = None

    async def request(self, method: str, params: msgspec.Struct) -> Any:
        await trio.lowlevel.checkpoint()
        self.told.append((method, getattr(params, "session_id", "")))
        if method == "session.open":
            return SessionOpenResult()
        return PluginsListResult((), ())

    async def request_if_alive(self, method: str, params: msgspec.Struct) -> Any:
        self.told.append((method, getattr(params, "session_id", "")))
        if self.let_close is not None:
            await self.let_close.wait()


@asynccontextmanager
async def _serving(tmp_path: pathlib.Path) -> AsyncIterator[tuple[Daemon, _Host]]:
    daemon = Daemon(data_dir=tmp_path / "data")
    host = _Host()
    requests = daemon.requests
    requests.services = dataclasses.replace(requests.services, host=host)  # type: ignore[arg-type]
    daemon.client_link.initialized = True
    async with trio.open_nursery() as nursery:
        daemon.client_link.nursery = nursery
        yield daemon, host
        nursery.cancel_scope.cancel()


async def _new(daemon: Daemon, tmp_path: pathlib.Path) -> str:
    workspace = tmp_path / "ws"
    workspace.mkdir(exist_ok=True)
    made = await daemon.requests.session_new(SessionNewParams(
        str(workspace), "auto", ScriptedProviderConfig(script=[])))
    return made.session_id


def _not_open(daemon: Daemon) -> dict[str, Session]:
    """The store's sessions not open: each kept only while a request on it is pending."""
    return {i: s for i, s in daemon.sessions._sessions.items() if s.state != "open"}


async def test_close_drops_the_session_and_its_registration(
        tmp_path: pathlib.Path, autojump_clock: trio.testing.MockClock) -> None:
    async with _serving(tmp_path) as (daemon, host):
        session_id = await _new(daemon, tmp_path)
        session = daemon.sessions.get(session_id)
        assert session.running and session.registration is not None
        assert list(daemon.requests.registrations()) == [session.registration]
        await daemon.requests.session_close(SessionCloseParams(session_id), Effect())
        assert daemon.sessions.find(session_id) is None and session.closing
        assert session.registration is None and list(daemon.requests.registrations()) == []
        assert host.told[-1] == ("session.close", session_id)
        assert _not_open(daemon) == {}
        with pytest.raises(RpcError) as again:  # closed: nothing left to close
            await daemon.requests.session_close(SessionCloseParams(session_id), Effect())
        assert again.value.code == ErrorCode.NOT_FOUND
        assert _not_open(daemon) == {}  # the refused close made nothing


async def test_a_failed_load_keeps_nothing(tmp_path: pathlib.Path,
                                           autojump_clock: trio.testing.MockClock) -> None:
    async with _serving(tmp_path) as (daemon, _):
        with pytest.raises(RpcError) as missing:
            await daemon.requests.session_load(SessionLoadParams("s-0123456789ab"), Effect())
        assert missing.value.code == ErrorCode.NOT_FOUND
        assert _not_open(daemon) == {}


async def test_two_loads_make_one_session_opened_once(
        tmp_path: pathlib.Path, autojump_clock: trio.testing.MockClock) -> None:
    async with _serving(tmp_path) as (daemon, host):
        session_id = await _new(daemon, tmp_path)
        await daemon.requests.session_close(SessionCloseParams(session_id), Effect())
        host.told.clear()
        answers = []

        async def load() -> None:
            answers.append(await daemon.requests.session_load(SessionLoadParams(session_id),
                                                              Effect()))

        async with trio.open_nursery() as loads:
            loads.start_soon(load)
            loads.start_soon(load)
        assert [a.session_id for a in answers] == [session_id, session_id]
        assert [m for m, _ in host.told].count("session.open") == 1
        (session,) = daemon.sessions.all()
        assert session.running and not session.lock.locked()
        assert _not_open(daemon) == {}  # the load's session is open


async def test_a_load_behind_a_close_waits_for_it_and_keeps_its_lock_and_chain(
        tmp_path: pathlib.Path, autojump_clock: trio.testing.MockClock) -> None:
    async with _serving(tmp_path) as (daemon, host):
        session_id = await _new(daemon, tmp_path)
        closed = daemon.sessions.get(session_id)
        host.let_close = trio.Event()
        host.told.clear()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(daemon.requests.session_close, SessionCloseParams(session_id),
                               Effect())
            await trio.sleep(1)  # the close holds the lock, waiting for the host
            assert closed.closing and closed.lock.locked()
            nursery.start_soon(daemon.requests.session_load, SessionLoadParams(session_id),
                               Effect())
            await trio.sleep(1)
            assert host.told == [("session.close", session_id)]  # the load waits
            host.let_close.set()
        # The host heard the close before the new open, and the load's session keeps the
        # lock the load held (a later load or close of the id meets the same lock).
        assert [m for m, _ in host.told] == ["session.close", "session.open", "plugins.list"]
        reloaded = daemon.sessions.get(session_id)
        assert reloaded is not closed and reloaded.lock is closed.lock
        assert reloaded.order is closed.order  # requests read meanwhile keep their order
        assert reloaded.running and _not_open(daemon) == {}
        host.let_close = None
        await daemon.requests.session_close(SessionCloseParams(session_id), Effect())
        assert list(daemon.sessions.all()) == [] and _not_open(daemon) == {}


async def test_a_request_behind_a_load_behind_a_close_reaches_the_loaded_session(
        tmp_path: pathlib.Path, autojump_clock: trio.testing.MockClock) -> None:
    """close, load, set_mode written in that order: the load waits for the close, and the
    mode change waits in the session's chain for the load, then applies to the session the
    load made (not NOT_FOUND from the closed one, not lost)."""
    async with _serving(tmp_path) as (daemon, host):
        session_id = await _new(daemon, tmp_path)
        closed = daemon.sessions.get(session_id)
        host.let_close = trio.Event()
        answers: list[object] = []

        async def set_mode() -> None:
            answers.append(await daemon.requests.session_set_mode(
                SessionSetModeParams(session_id, "ask"), Effect()))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(daemon.requests.session_close, SessionCloseParams(session_id),
                               Effect())
            await trio.sleep(1)
            nursery.start_soon(daemon.requests.session_load, SessionLoadParams(session_id),
                               Effect())
            await trio.sleep(1)
            assert daemon.sessions.find(session_id) is None  # closed; the load waits
            nursery.start_soon(set_mode)
            await trio.sleep(1)
            assert answers == []  # in the chain, behind the load
            host.let_close.set()
        reloaded = daemon.sessions.get(session_id)
        assert reloaded is not closed and reloaded.permission_mode == "ask"
        assert answers == [Empty()] and _not_open(daemon) == {}
