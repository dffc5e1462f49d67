"""Requests written back to back on one session (a load, prompts, aborts, closes), driven
the way the client link drives them (the next request starts once the one before has taken
its effect or answered), with a stand-in host and no kernel: each answers, the wire order
holds, and the store keeps nothing for an id once no request on it is pending."""

from __future__ import annotations

import fcntl
import os
import pathlib
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec
import pytest
import trio
import trio.testing

from protocol.errors import ErrorCode, RpcError
from protocol.messages.client import (
    AgentAbortParams,
    AgentPromptParams,
    ScriptedProviderConfig,
    SessionCloseParams,
    SessionLoadParams,
    SessionNewParams,
    SessionSetModeParams,
)
from protocol.messages.common import Empty
from runtime.daemon.daemon import Daemon
from runtime.link import Effect
from tests.runtime.test_session_lifecycle import _serving

Request = tuple[str, Any]
MISSING = "s-0123456789ab"


def _left_over(daemon: Daemon) -> set[str]:
    """The ids the store keeps a session not open for: none once no request is pending."""
    return {i for i, s in daemon.sessions._sessions.items() if s.state != "open"}


async def _pipelined(daemon: Daemon, requests: list[Request]) -> list[Any]:
    """Each request started once the one before took its effect (or answered), as the
    client link's reader does; every answer, or the (code, message) of its error."""
    answers: list[Any] = [None] * len(requests)

    async with trio.open_nursery() as nursery:
        for index, (method, params) in enumerate(requests):
            effect = Effect()
            handler: Callable[[Any, Effect], Awaitable[Any]] = getattr(daemon.requests,
                                                                        method)

            async def run(index: int = index, handler: Any = handler, params: Any = params,
                          effect: Effect = effect) -> None:
                try:
                    answers[index] = await handler(params, effect)
                except RpcError as exc:
                    answers[index] = (exc.code, exc.message)
                finally:
                    effect.take()

            nursery.start_soon(run)
            await effect.wait()
    return answers


async def _new(daemon: Daemon, tmp_path: pathlib.Path, turns: int = 0) -> str:
    workspace = tmp_path / "ws"
    workspace.mkdir(exist_ok=True)
    made = await daemon.requests.session_new(SessionNewParams(
        str(workspace), "auto",
        ScriptedProviderConfig(script=[[{"text": f"done {n}"}] for n in range(turns)])))
    return made.session_id


def _codes(answers: list[Any]) -> list[Any]:
    return [a[0] if isinstance(a, tuple) else type(a).__name__ for a in answers]


async def test_a_missing_session_loaded_with_requests_behind_answers_each_and_keeps_nothing(
        tmp_path: pathlib.Path, autojump_clock: trio.testing.MockClock) -> None:
    async with _serving(tmp_path) as (daemon, _):
        answers = await _pipelined(daemon, [
            ("session_load", SessionLoadParams(MISSING)),
            ("agent_prompt", AgentPromptParams(MISSING, "hi")),
            ("agent_abort", AgentAbortParams(MISSING)),
            ("session_close", SessionCloseParams(MISSING)),
            ("session_load", SessionLoadParams(MISSING)),
            ("agent_prompt", AgentPromptParams(MISSING, "hi")),
        ])
        assert _codes(answers) == [ErrorCode.NOT_FOUND] * 6
        assert _left_over(daemon) == set()


async def test_thousands_of_missing_loads_leave_nothing_in_the_store(
        tmp_path: pathlib.Path, autojump_clock: trio.testing.MockClock) -> None:
    async with _serving(tmp_path) as (daemon, _):
        ids = [f"s-{n:012x}" for n in range(2000)]
        answers = await _pipelined(daemon, [
            (method, params) for i in ids for method, params in (
                ("session_load", SessionLoadParams(i)),
                ("session_set_mode", SessionSetModeParams(i, "ask")))])
        assert set(_codes(answers)) == {ErrorCode.NOT_FOUND}
        assert _left_over(daemon) == set() and daemon.sessions._sessions == {}


async def test_load_prompt_abort_close_load_prompt_in_one_write_reach_each_life(
        tmp_path: pathlib.Path, autojump_clock: trio.testing.MockClock) -> None:
    """The session closed and not loaded: load, set_mode, abort, close, load, set_mode.
    The first mode change reaches the first life; the close closes it; the second load
    makes a new life and the last mode change reaches that one. (Prompts need a host
    lease the stand-in host has not; the e2e suite covers them.)"""
    async with _serving(tmp_path) as (daemon, _):
        session_id = await _new(daemon, tmp_path, turns=4)
        await daemon.requests.session_close(SessionCloseParams(session_id), Effect())
        assert _left_over(daemon) == set()
        answers = await _pipelined(daemon, [
            ("session_load", SessionLoadParams(session_id)),
            ("session_set_mode", SessionSetModeParams(session_id, "ask")),
            ("agent_abort", AgentAbortParams(session_id)),
            ("session_close", SessionCloseParams(session_id)),
            ("session_load", SessionLoadParams(session_id)),
            ("session_set_mode", SessionSetModeParams(session_id, "ask")),
        ])
        codes = _codes(answers)
        assert codes == ["SessionLoadResult", "Empty", "AgentAbortResult", "Empty",
                         "SessionLoadResult", "Empty"], answers
        (life,) = daemon.sessions.all()
        assert life.running and life.permission_mode == "ask" and _left_over(daemon) == set()
        await daemon.requests.session_close(SessionCloseParams(session_id), Effect())
        assert _left_over(daemon) == set() and daemon.sessions.all() == ()


async def test_two_loads_then_close_then_a_prompt_behind(
        tmp_path: pathlib.Path, autojump_clock: trio.testing.MockClock) -> None:
    async with _serving(tmp_path) as (daemon, host):
        session_id = await _new(daemon, tmp_path, turns=2)
        await daemon.requests.session_close(SessionCloseParams(session_id), Effect())
        host.told.clear()
        answers = await _pipelined(daemon, [
            ("session_load", SessionLoadParams(session_id)),
            ("session_load", SessionLoadParams(session_id)),
            ("session_close", SessionCloseParams(session_id)),
            ("session_set_mode", SessionSetModeParams(session_id, "ask")),
        ])
        assert _codes(answers) == ["SessionLoadResult", "SessionLoadResult", "Empty",
                                   ErrorCode.NOT_FOUND], answers
        assert [m for m, _ in host.told].count("session.open") == 1
        assert daemon.sessions.all() == () and _left_over(daemon) == set()


@pytest.mark.parametrize("log_text", ["", "not json\n", '{"type": "nonsense"}\n'])
async def test_a_malformed_log_loaded_with_requests_behind(
        tmp_path: pathlib.Path, autojump_clock: trio.testing.MockClock, log_text: str
        ) -> None:
    async with _serving(tmp_path) as (daemon, _):
        daemon.sessions.dir.mkdir(parents=True, exist_ok=True)
        daemon.sessions.path_of(MISSING).write_text(log_text)
        answers = await _pipelined(daemon, [
            ("session_load", SessionLoadParams(MISSING)),
            ("session_set_mode", SessionSetModeParams(MISSING, "ask")),
            ("session_close", SessionCloseParams(MISSING)),
            ("session_load", SessionLoadParams(MISSING)),
        ])
        codes = _codes(answers)
        assert codes[1] == codes[2] == ErrorCode.NOT_FOUND, answers
        assert codes[0] == codes[3] and codes[0] in (ErrorCode.INTERNAL,
                                                      ErrorCode.NOT_FOUND), answers
        assert _left_over(daemon) == set() and daemon.sessions.all() == ()


@pytest.mark.parametrize("method", ["session_close", "session_set_mode", "agent_prompt",
                                    "agent_abort", "session_load"])
async def test_a_malformed_id_answers_as_before(
        tmp_path: pathlib.Path, autojump_clock: trio.testing.MockClock, method: str) -> None:
    params: dict[str, Any] = {
        "session_close": SessionCloseParams("../etc"),
        "session_set_mode": SessionSetModeParams("../etc", "ask"),
        "agent_prompt": AgentPromptParams("../etc", "x"),
        "agent_abort": AgentAbortParams("../etc"),
        "session_load": SessionLoadParams("../etc"),
    }
    expected = {"session_close": ErrorCode.INVALID_PARAMS,
                "session_load": ErrorCode.INVALID_PARAMS}.get(method, ErrorCode.NOT_FOUND)
    async with _serving(tmp_path) as (daemon, _):
        (answer,) = await _pipelined(daemon, [(method, params[method])])
        assert isinstance(answer, tuple) and answer[0] == expected, answer
        if expected == ErrorCode.INVALID_PARAMS:
            assert "malformed session id" in answer[1]
        assert _left_over(daemon) == set()


async def test_a_close_written_while_the_load_reads_the_log_closes_the_loaded_session(
        tmp_path: pathlib.Path, autojump_clock: trio.testing.MockClock) -> None:
    async with _serving(tmp_path) as (daemon, host):
        session_id = await _new(daemon, tmp_path, turns=1)
        await daemon.requests.session_close(SessionCloseParams(session_id), Effect())
        host.told.clear()
        answers = await _pipelined(daemon, [
            ("session_load", SessionLoadParams(session_id)),
            ("session_close", SessionCloseParams(session_id)),
            ("agent_abort", AgentAbortParams(session_id)),
        ])
        assert _codes(answers) == ["SessionLoadResult", "Empty", ErrorCode.NOT_FOUND]
        assert [m for m, _ in host.told] == ["session.open", "plugins.list", "session.close"]
        assert daemon.sessions.all() == () and _left_over(daemon) == set()


async def test_a_log_whose_provider_cannot_open_is_refused_alike_on_each_load(
        tmp_path: pathlib.Path, autojump_clock: trio.testing.MockClock) -> None:
    """A log whose recorded provider is invalid (a scripted one with neither script nor
    path): each load is refused the same way, and the refused load leaves the log free
    (not held open, so that the next load does not answer BUSY "open in another daemon")."""
    async with _serving(tmp_path) as (daemon, _):
        session_id = await _new(daemon, tmp_path)
        await daemon.requests.session_close(SessionCloseParams(session_id), Effect())
        path = daemon.sessions.path_of(session_id)
        first, *rest = path.read_text().splitlines(keepends=True)
        meta = msgspec.json.decode(first)
        meta["provider"] = {"kind": "scripted"}
        path.write_text(msgspec.json.encode(meta).decode() + "\n" + "".join(rest))
        answers = await _pipelined(daemon, [
            ("session_load", SessionLoadParams(session_id)),
            ("session_load", SessionLoadParams(session_id)),
        ])
        assert _codes(answers) == [ErrorCode.INVALID_PARAMS] * 2, answers
        assert _left_over(daemon) == set()


async def test_a_session_loaded_during_the_disk_scan_of_session_list_is_listed(
        tmp_path: pathlib.Path, autojump_clock: trio.testing.MockClock) -> None:
    async with _serving(tmp_path) as (daemon, _):
        session_id = await _new(daemon, tmp_path)
        await daemon.requests.session_close(SessionCloseParams(session_id), Effect())
        listing = daemon.requests.listing
        scan = listing.on_disk

        async def load() -> None:
            await daemon.requests.session_load(SessionLoadParams(session_id), Effect())

        def scan_while_it_loads() -> list[Any]:
            trio.from_thread.run(load)  # the load ends while the scan runs
            return scan()

        listing.on_disk = scan_while_it_loads  # type: ignore[method-assign]
        listed = await daemon.requests.session_list(Empty())
        assert daemon.sessions.find(session_id) is not None
        assert [s.session_id for s in listed.sessions] == [session_id], listed


async def test_a_session_closed_during_the_disk_scan_of_session_list_is_listed(
        tmp_path: pathlib.Path, autojump_clock: trio.testing.MockClock) -> None:
    """The scan passes over a log whose session is open; the session closes before the
    scan ends: listed once, from its log."""
    async with _serving(tmp_path) as (daemon, _):
        session_id = await _new(daemon, tmp_path)
        listing = daemon.requests.listing
        scan = listing.on_disk

        async def close() -> None:
            await daemon.requests.session_close(SessionCloseParams(session_id), Effect())

        def scan_then_close() -> Any:
            scanned = scan()  # passes over the open session's log
            trio.from_thread.run(close)
            return scanned

        listing.on_disk = scan_then_close  # type: ignore[method-assign]
        listed = await daemon.requests.session_list(Empty())
        assert daemon.sessions.find(session_id) is None
        assert [(s.session_id, s.loaded) for s in listed.sessions] == [(session_id, False)]


async def test_a_log_open_in_another_daemon_loaded_with_requests_behind(
        tmp_path: pathlib.Path, autojump_clock: trio.testing.MockClock) -> None:
    async with _serving(tmp_path) as (daemon, _):
        session_id = await _new(daemon, tmp_path)
        await daemon.requests.session_close(SessionCloseParams(session_id), Effect())
        fd = os.open(daemon.sessions.path_of(session_id), os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)  # as another daemon's open log holds it
            answers = await _pipelined(daemon, [
                ("session_load", SessionLoadParams(session_id)),
                ("session_set_mode", SessionSetModeParams(session_id, "ask")),
                ("session_close", SessionCloseParams(session_id)),
                ("session_load", SessionLoadParams(session_id)),
            ])
        finally:
            os.close(fd)
        assert _codes(answers) == [ErrorCode.BUSY, ErrorCode.NOT_FOUND, ErrorCode.NOT_FOUND,
                                   ErrorCode.BUSY], answers
        assert _left_over(daemon) == set() and daemon.sessions.all() == ()


async def test_a_mode_change_then_a_close_in_one_write_tells_the_host_nothing_after_the_close(
        tmp_path: pathlib.Path, autojump_clock: trio.testing.MockClock) -> None:
    """set_mode re-registers the session with the host after its place in the chain; a
    close written right behind must still be the last the host hears of the session."""
    async with _serving(tmp_path) as (daemon, host):
        session_id = await _new(daemon, tmp_path)
        host.told.clear()
        answers = await _pipelined(daemon, [
            ("session_set_mode", SessionSetModeParams(session_id, "ask")),
            ("session_close", SessionCloseParams(session_id)),
        ])
        assert _codes(answers) == ["Empty", "Empty"], answers
        assert host.told[-1] == ("session.close", session_id), host.told
        assert _left_over(daemon) == set() and daemon.sessions.all() == ()
