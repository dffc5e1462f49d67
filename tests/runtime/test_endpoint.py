"""The trio endpoint over in-memory streams: correlation, order, cancellation, limits."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import msgspec
import pytest
import trio
import trio.testing

from protocol.causes import HookCause, UserCause
from protocol.errors import ErrorCode, RemoteError, RpcError
from protocol.messages.common import Empty
from protocol.messages.host import (
    PluginsListParams,
    PluginsListResult,
    PluginTool,
    SessionOpenParams,
    SessionOpenResult,
    ToolsAbortParams,
    ToolsAbortResult,
    ToolsOutputParams,
)
from protocol.methods import HOST_TO_RUNTIME, RUNTIME_TO_HOST
from runtime.link import (
    ConnectionClosed,
    Endpoint,
    Handler,
    NotificationHandler,
    OversizedMessage,
    answers_later,
    marks_effect,
)
from runtime.link.effects import Effect


@asynccontextmanager
async def linked(handlers: dict[str, Handler], *, notes: list[ToolsOutputParams] | None = None,
                 on_output: NotificationHandler | None = None,
                 limit: int = 8 * 1024 * 1024) -> AsyncIterator[tuple[Endpoint, Endpoint]]:
    a_stream, b_stream = trio.testing.memory_stream_pair()
    sink = notes if notes is not None else []
    runtime = Endpoint("runtime", a_stream, a_stream, incoming=HOST_TO_RUNTIME,
                       outgoing=RUNTIME_TO_HOST, max_frame_size=limit,
                       notification_handlers={"tools.output": on_output or sink.append})
    host = Endpoint("host", b_stream, b_stream, incoming=RUNTIME_TO_HOST,
                    outgoing=HOST_TO_RUNTIME, handlers=handlers, max_frame_size=limit)
    async with trio.open_nursery() as nursery:
        await nursery.start(runtime.run)
        await nursery.start(host.run)
        yield runtime, host
        nursery.cancel_scope.cancel()


async def test_abort_is_read_while_every_handler_is_busy() -> None:
    release = trio.Event()

    async def slow_open(params: SessionOpenParams) -> Empty:
        await release.wait()  # only waiting: declared answers_later, the link reads on
        return Empty()

    async def abort(params: ToolsAbortParams) -> ToolsAbortResult:
        release.set()
        return ToolsAbortResult(True, "running")

    async with linked({"session.open": answers_later(slow_open),
                       "tools.abort": abort}) as (runtime, _):
        with trio.fail_after(5):
            async with trio.open_nursery() as nursery:
                for i in range(20):
                    nursery.start_soon(runtime.request, "session.open",
                                       SessionOpenParams(f"s{i}", "/w"))
                await trio.testing.wait_all_tasks_blocked()
                answer = await runtime.request("tools.abort", ToolsAbortParams("s", "c", "Bash"))
                assert answer == ToolsAbortResult(True, "running")


async def test_a_cancelled_request_is_forgotten_and_its_late_answer_dropped() -> None:
    release = trio.Event()
    answered = trio.Event()

    async def slow_open(params: SessionOpenParams) -> Empty:
        await release.wait()
        answered.set()
        return Empty()

    async with linked({"session.open": slow_open}) as (runtime, _):
        with trio.move_on_after(0.05):
            await runtime.request("session.open", SessionOpenParams("s", "/w"))
        assert runtime._correlation.pending == {}
        release.set()
        await answered.wait()
        await trio.testing.wait_all_tasks_blocked()
        # The link still works after the stray answer.
        release2 = await runtime.request("session.open", SessionOpenParams("t", "/w"))
        assert release2 == SessionOpenResult()  # the stub's {} as session.open's answer


async def test_notifications_keep_their_order() -> None:
    notes: list[ToolsOutputParams] = []
    async with linked({}, notes=notes) as (_, host):
        for i in range(500):
            host.notify("tools.output", ToolsOutputParams("s", "c", i, "stdout", f"{i}\n"))
        with trio.fail_after(5):
            while len(notes) < 500:
                await trio.sleep(0.01)
    assert [n.seq for n in notes] == list(range(500))


async def test_notifications_after_reading_stopped_still_go_out() -> None:
    # A shutting-down daemon stops reading while its handlers still run (turns being
    # disposed of), and tells its client how each turn ended before its link drains.
    notes: list[ToolsOutputParams] = []
    release = trio.Event()
    holder: list[Endpoint] = []

    async def disposing(params: SessionOpenParams) -> Empty:
        await release.wait()
        holder[0].notify("tools.output", ToolsOutputParams("s", "c", 1, "stdout", "late\n"))
        return Empty()

    async with linked({"session.open": answers_later(disposing)},
                      notes=notes) as (runtime, host):
        holder.append(host)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(runtime.request, "session.open", SessionOpenParams("s", "/w"))
            await trio.testing.wait_all_tasks_blocked()
            host.stop_reading()
            with trio.fail_after(5):
                await host.closed.wait()
            release.set()
        with trio.fail_after(5):
            while not notes:
                await trio.sleep(0.01)
    assert [n.text for n in notes] == ["late\n"]


async def test_a_notification_after_the_link_was_cancelled_is_dropped_quietly() -> None:
    async with linked({}) as (_, host):
        pass  # the link's tasks are cancelled, not drained: the writer is gone
    # Once a broken channel raised here, out of whatever task announced an event.
    host.notify("tools.output", ToolsOutputParams("s", "c", 1, "stdout", "dropped\n"))
    assert host.closed.is_set()


async def test_oversized_request_fails_at_once_instead_of_hanging() -> None:
    async with linked({}, limit=2000) as (runtime, _):
        with trio.fail_after(5), pytest.raises(OversizedMessage):
            await runtime.request("session.open", SessionOpenParams("s", "x" * 5000))


async def test_oversized_answer_becomes_an_error_instead_of_a_hang() -> None:
    async def big(params: ToolsAbortParams) -> ToolsAbortResult:
        return ToolsAbortResult(True, "running", body_invoked=True) if params.cause == UserCause() \
            else ToolsAbortResult(True, "x" * 5000)  # type: ignore[arg-type]

    async with linked({"tools.abort": big}, limit=2000) as (runtime, _):
        with trio.fail_after(5), pytest.raises(RemoteError) as info:
            await runtime.request("tools.abort", ToolsAbortParams("s", "c", "Bash",
                                                                  HookCause("big")))
        assert info.value.code == ErrorCode.INTERNAL


async def test_requests_fail_when_the_peer_goes_away() -> None:
    forever = trio.Event()

    async def hang(params: SessionOpenParams) -> Empty:
        await forever.wait()
        return Empty()

    a_stream, b_stream = trio.testing.memory_stream_pair()
    runtime = Endpoint("runtime", a_stream, a_stream, incoming=HOST_TO_RUNTIME,
                       outgoing=RUNTIME_TO_HOST)
    async with trio.open_nursery() as nursery:
        await nursery.start(runtime.run)
        with trio.fail_after(5):
            async with trio.open_nursery() as inner:
                async def call() -> None:
                    with pytest.raises(ConnectionClosed):
                        await runtime.request("session.open", SessionOpenParams("s", "/w"))

                inner.start_soon(call)
                await trio.testing.wait_all_tasks_blocked()
                await b_stream.aclose()
        nursery.cancel_scope.cancel()


async def test_a_failing_notification_handler_is_logged_and_the_link_keeps_serving(
        caplog: pytest.LogCaptureFixture) -> None:
    seen: list[int] = []

    def on_output(params: ToolsOutputParams) -> None:
        if params.seq == 1:
            raise ValueError("boom")
        seen.append(params.seq)

    async def abort(params: ToolsAbortParams) -> ToolsAbortResult:
        return ToolsAbortResult(True, "running")

    with caplog.at_level(logging.ERROR, logger="runtime.link.endpoint"):
        async with linked({"tools.abort": abort}, on_output=on_output) as (runtime, host):
            host.notify("tools.output", ToolsOutputParams("s", "c", 1, "stdout", "a\n"))
            host.notify("tools.output", ToolsOutputParams("s", "c", 2, "stdout", "b\n"))
            with trio.fail_after(5):
                answer = await runtime.request("tools.abort", ToolsAbortParams("s", "c", "Bash"))
                while not seen:
                    await trio.sleep(0.01)
    assert answer == ToolsAbortResult(True, "running")
    assert seen == [2]
    assert any("tools.output" in r.getMessage() and r.exc_info for r in caplog.records)


async def _raise_in_nursery(*errors: Exception) -> None:
    async def fail(error: Exception) -> None:
        raise error

    async with trio.open_nursery() as nursery:
        for error in errors:
            nursery.start_soon(fail, error)


@pytest.mark.parametrize(("nesting", "code"), [
    ("one", ErrorCode.NOT_FOUND),
    ("nested", ErrorCode.NOT_FOUND),
    ("two", ErrorCode.INTERNAL),  # two failures stand for no one catalogue error
])
async def test_an_rpc_error_raised_in_a_handlers_nursery_keeps_its_code(
        nesting: str, code: ErrorCode) -> None:
    async def abort(params: ToolsAbortParams) -> ToolsAbortResult:
        not_found = RpcError(ErrorCode.NOT_FOUND, "no such call", {"callId": params.call_id})
        if nesting == "one":
            await _raise_in_nursery(not_found)
        elif nesting == "nested":
            async with trio.open_nursery() as outer:
                outer.start_soon(_raise_in_nursery, not_found)
        else:
            await _raise_in_nursery(not_found, RpcError(ErrorCode.TOOL_FAILED))
        raise AssertionError("unreachable")

    async with linked({"tools.abort": abort}) as (runtime, _):
        with trio.fail_after(5), pytest.raises(RemoteError) as info:
            await runtime.request("tools.abort", ToolsAbortParams("s", "c1", "Bash"))
    assert info.value.code == code
    if code == ErrorCode.NOT_FOUND:
        assert (info.value.message, info.value.data) == ("no such call", {"callId": "c1"})
    else:
        assert info.value.data is None  # nothing of the failures leaks to the peer


async def test_requests_take_effect_in_wire_order_and_waiting_holds_nothing() -> None:
    """Each request's handler runs to its effect point before the next frame is handled
    (whatever trio's scheduler would pick); what it then waits for holds nothing up."""
    order: list[str] = []
    release = trio.Event()

    async def open_(params: SessionOpenParams, effect: Effect) -> Empty:
        order.append(params.session_id)
        effect.take()
        await release.wait()
        return Empty()

    async def abort(params: ToolsAbortParams) -> ToolsAbortResult:
        order.append(f"abort {params.session_id}")
        return ToolsAbortResult(True, "running")

    a_stream, b_stream = trio.testing.memory_stream_pair()
    host = Endpoint("host", b_stream, b_stream, incoming=RUNTIME_TO_HOST,
                    outgoing=HOST_TO_RUNTIME, handlers={"session.open": marks_effect(open_),
                                                        "tools.abort": abort})
    frames = []
    for i in range(50):
        frames.append(b'{"jsonrpc":"2.0","id":%d,"method":"session.open","params":'
                      b'{"sessionId":"s%d","workspace":"/w"}}' % (2 * i, i))
        frames.append(b'{"jsonrpc":"2.0","id":%d,"method":"tools.abort","params":'
                      b'{"sessionId":"s%d","callId":"c","tool":"Bash"}}' % (2 * i + 1, i))
    async with trio.open_nursery() as nursery:
        await nursery.start(host.run)
        with trio.fail_after(5):
            await a_stream.send_all(b"\n".join(frames) + b"\n")
            while len(order) < 100:
                await trio.sleep(0.01)
        assert order == [x for i in range(50) for x in (f"s{i}", f"abort s{i}")]
        release.set()
        nursery.cancel_scope.cancel()


async def test_a_batch_reply_too_large_for_one_frame_is_split() -> None:
    async def plugins(params: PluginsListParams) -> PluginsListResult:
        return PluginsListResult((PluginTool("mcp__s__t", "s", "d" * 150),))

    limit = 400
    a_stream, b_stream = trio.testing.memory_stream_pair()
    host = Endpoint("host", b_stream, b_stream, incoming=RUNTIME_TO_HOST,
                    outgoing=HOST_TO_RUNTIME, handlers={"plugins.list": plugins},
                    max_frame_size=limit)
    member = b'{"jsonrpc":"2.0","id":%d,"method":"plugins.list","params":{"sessionId":"s"}}'
    batch = b"[" + b",".join(member % i for i in range(4)) + b"]\n"
    assert len(batch) <= limit
    frames = 0
    async with trio.open_nursery() as nursery:
        await nursery.start(host.run)
        with trio.fail_after(5):
            await a_stream.send_all(batch)
            data = b""
            answers: list[Any] = []
            while len(answers) < 4:
                data += await a_stream.receive_some()
                *lines, data = data.split(b"\n")
                for line in lines:
                    assert len(line) <= limit
                    answers += msgspec.json.decode(line)
                    frames += 1
        assert sorted(a["id"] for a in answers) == [0, 1, 2, 3]
        assert all("result" in a for a in answers), answers
        assert frames >= 2  # four answers of ~230 bytes: no one frame holds them
        nursery.cancel_scope.cancel()


def _request(request_id: int) -> bytes:
    return msgspec.json.encode({"jsonrpc": "2.0", "id": request_id, "method": "session.open",
                                "params": {"sessionId": f"s{request_id}", "workspace": "/w"}}
                               ) + b"\n"


async def test_a_peer_that_does_not_read_gets_no_more_requests_served() -> None:
    """Issue 31 item 6: backpressure. From a quarter of ``max_queued`` the reader takes no
    next frame; once the peer reads, every request is answered."""

    async def opened(params: SessionOpenParams) -> Empty:
        return Empty()

    ours, peer = trio.testing.lockstep_stream_pair()  # a write waits for the reader
    host = Endpoint("host", ours, ours, incoming=RUNTIME_TO_HOST, outgoing=HOST_TO_RUNTIME,
                    handlers={"session.open": opened}, max_queued=1600)
    async with trio.open_nursery() as nursery:
        await nursery.start(host.run)
        with trio.fail_after(5):
            await peer.send_all(b"".join(_request(i) for i in range(1, 101)))
        await trio.testing.wait_all_tasks_blocked()
        assert 0 < host.frames_in < 100  # paused: the peer has not read a byte
        assert host.queued <= 1600
        answers = b""
        with trio.fail_after(5):
            while answers.count(b"\n") < 100:
                answers += await peer.receive_some(65536)
        assert host.frames_in == 100
        ids = {msgspec.json.decode(line)["id"] for line in answers.splitlines()}
        assert ids == set(range(1, 101))
        nursery.cancel_scope.cancel()


async def test_a_peer_that_leaves_too_much_unread_is_dropped() -> None:
    """Past ``max_queued`` the peer is gone: its output is dropped, the link ends."""
    ours, _peer = trio.testing.lockstep_stream_pair()
    host = Endpoint("host", ours, ours, incoming=RUNTIME_TO_HOST, outgoing=HOST_TO_RUNTIME,
                    max_queued=64 * 1024)
    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            await nursery.start(host.run)
            for seq in range(100):
                host.notify("tools.output", ToolsOutputParams("s", "c", seq, "stdout",
                                                              "x" * 1024))
            await host.closed.wait()  # and run() returns: the nursery ends
    assert host.queued == 0  # what was queued was dropped, not kept
