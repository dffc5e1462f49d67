"""Issue 31 item 6: a client that stops reading cannot grow the runtime without bound.

Output waiting for the client is bounded (``runtime.link.writer.MAX_QUEUED``):
from a quarter of it the runtime reads none of the client's next requests (backpressure:
they are served once it reads again), and past it the client is gone: the link ends as at
the end of input (every turn stopped, cause ``disposed``; the daemon exits 0). Before,
450 kB of requests from a client that never read queued 757 MB.
"""

from __future__ import annotations

import json
import pathlib

import msgspec
import psutil
import trio

from protocol.messages.events import TurnEnd
from runtime.agent.sessionlog import read_log
from runtime.link.writer import MAX_QUEUED
from tests.conftest import Marked
from tests.kit.rawclient import RawClient, raw_daemon

INIT = {"protocolVersion": "1.0", "clientInfo": {"name": "test"}}
MIB = 1024 * 1024


def frame(request_id: int, method: str, params: object) -> bytes:
    return msgspec.json.encode({"jsonrpc": "2.0", "id": request_id, "method": method,
                                "params": params}) + b"\n"


async def peak_rss(pid: int, seconds: float) -> int:
    """The largest RSS of ``pid`` sampled over ``seconds`` (0 once it is gone)."""
    peak = 0
    with trio.move_on_after(seconds):
        while True:
            try:
                peak = max(peak, psutil.Process(pid).memory_info().rss)
            except psutil.NoSuchProcess:
                return peak
            await trio.sleep(0.05)
    return peak


async def session_with(raw: RawClient, workspace: pathlib.Path, script: object) -> str:
    path = workspace / "script.json"
    path.write_text(json.dumps(script))
    opened = await raw.call("session.new", {
        "workspace": str(workspace), "permissionMode": "auto",
        "provider": {"kind": "scripted", "path": str(path)}})
    session_id: str = opened["result"]["sessionId"]
    return session_id


async def test_requests_of_a_client_that_does_not_read_wait(tmp_path: pathlib.Path,
                                                            marked: Marked) -> None:
    async with raw_daemon(marked.env()) as raw:
        await raw.call("initialize", INIT)
        session_id = await session_with(raw, tmp_path, [[{"text": "x" * MIB}]])
        answer = await raw.call("agent.prompt", {"sessionId": session_id, "text": "go"})
        assert answer["result"]["stopReason"] == "end_turn"
        before = psutil.Process(raw.process.pid).memory_info().rss
        # Each load replays the session (2 MiB of events): 100 of them, never read.
        loads = b"".join(frame(i, "session.load", {"sessionId": session_id})
                         for i in range(1, 101))
        await raw.send_bytes(loads)
        grown = await peak_rss(raw.process.pid, 3.0) - before
        # Measured: 18 MiB (a quarter of MAX_QUEUED, and a load's replay); before, 102 MiB
        # within 3 s of 100 loads, and growing.
        assert grown < 48 * MIB, grown / MIB
        answered: set[int] = set()
        with trio.fail_after(60):  # reading again: every request is served
            while len(answered) < 100:
                message = await raw.receive()
                if "id" in message and "result" in message:
                    answered.add(message["id"])
        assert answered == set(range(1, 101))


async def test_a_client_that_leaves_too_much_unread_is_gone(tmp_path: pathlib.Path,
                                                            marked: Marked) -> None:
    chunks = MAX_QUEUED // MIB + 16
    async with raw_daemon(marked.env()) as raw:
        await raw.call("initialize", INIT)
        session_id = await session_with(raw, tmp_path,
                                        [[{"text": "y" * MIB} for _ in range(chunks)]])
        # The prompt's turn streams chunks MiB of deltas; the client reads nothing more.
        await raw.send_bytes(frame(1, "agent.prompt", {"sessionId": session_id, "text": "go"}))
        with trio.fail_after(60):
            assert await raw.process.wait() == 0  # gone as at the end of input
    log = read_log(marked.data_dir / "sessions" / f"{session_id}.jsonl").events
    (end,) = [e for e in log if isinstance(e, TurnEnd)]
    assert end.end.kind in ("aborted", "completed"), end


async def test_an_operator_stop_does_not_wait_for_a_client_that_does_not_read(
        tmp_path: pathlib.Path, marked: Marked) -> None:
    """The prompt is taken, then the reader pauses with frames read and not taken: the
    turn's first step waits for them, but an operator's stop must not."""
    async with raw_daemon(marked.env()) as raw:
        init = await raw.call("initialize", INIT)
        socket = init["result"]["capabilities"]["ops"]["socket"]
        session_id = await session_with(raw, tmp_path, [[{"text": "x" * MIB}],
                                                        [{"sleepMs": 60_000}]])
        assert (await raw.call("agent.prompt", {"sessionId": session_id, "text": "go"})
                )["result"]["stopReason"] == "end_turn"
        await raw.send_bytes(frame(1, "agent.prompt", {"sessionId": session_id, "text": "2"})
                             + b"".join(frame(2 + i, "session.load", {"sessionId": session_id})
                                        for i in range(40)))
        await trio.sleep(1.0)  # the loads' replays fill the queue: the reader pauses
        async with await trio.open_unix_socket(socket) as ops:
            await ops.send_all(
                msgspec.json.encode({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                                     "params": INIT}) + b"\n"
                + msgspec.json.encode({"jsonrpc": "2.0", "id": 2, "method": "ops.abort",
                                       "params": {"sessionId": session_id}}) + b"\n")
            data = b""
            with trio.fail_after(10):
                while data.count(b"\n") < 2:
                    data += await ops.receive_some(65536)
        answer = msgspec.json.decode(data.split(b"\n")[1])
        assert answer["result"]["outcome"] == "aborted", answer
