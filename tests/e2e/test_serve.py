"""``quiesce serve`` as a real subprocess: handshake, sessions, a Read through the host."""

from __future__ import annotations

import pathlib

import psutil
import pytest
import trio

from protocol.errors import ErrorCode, RemoteError
from protocol.messages.client import DebugRunToolParams, SessionNewParams
from protocol.messages.common import Empty, InitializeParams
from runtime.clients.daemon_client import spawn_daemon
from tests.conftest import Marked
from tests.kit.rawclient import raw_daemon

INIT = {"protocolVersion": "1.0", "clientInfo": {"name": "test"}}


async def test_read_a_file_through_the_host(tmp_path: pathlib.Path, marked: Marked) -> None:
    (tmp_path / "notes.txt").write_text("alpha\nbeta\ngamma\n")
    with trio.fail_after(30):
        async with spawn_daemon(env=marked.env()) as daemon:
            info = await daemon.initialize()
            assert info.protocol_version == "1.0"
            host_pid = info.capabilities["host"]["pid"]
            assert psutil.Process(host_pid).ppid() == daemon.process.pid
            new = await daemon.request("session.new", SessionNewParams(str(tmp_path)))
            listed = await daemon.request("session.list", Empty())
            assert [s.session_id for s in listed.sessions] == [new.session_id]
            answer = await daemon.request("debug.runTool", DebugRunToolParams(
                new.session_id, "Read", {"path": "notes.txt", "offset": 1, "limit": 1}))
            assert not answer.result.is_error
            text = answer.result.content[0].text
            assert "beta" in text and "alpha" not in text and "gamma" not in text
            outside = await daemon.request("debug.runTool", DebugRunToolParams(
                new.session_id, "Read", {"path": "../etc/passwd"}))
            assert outside.result.code == "PATH_OUTSIDE_WORKSPACE"
            bad_args = await daemon.request("debug.runTool", DebugRunToolParams(
                new.session_id, "Read", {"path": "notes.txt", "bogus": 1}))
            assert bad_args.result.code == "INVALID_PARAMS"
        assert daemon.process.returncode == 0


async def test_eof_stops_host_and_exits_zero(marked: Marked) -> None:
    async with raw_daemon(marked.env()) as raw:
        answer = await raw.call("initialize", INIT)
        host_pid = answer["result"]["capabilities"]["host"]["pid"]
        assert await raw.close() == 0
    assert not psutil.pid_exists(host_pid) or \
        psutil.Process(host_pid).status() == psutil.STATUS_ZOMBIE


async def test_shutdown_request_answers_then_exits(marked: Marked) -> None:
    async with raw_daemon(marked.env()) as raw:
        await raw.call("initialize", INIT)
        answer = await raw.call("shutdown")
        assert answer["result"] == {}
        with trio.fail_after(20):
            assert await raw.process.wait() == 0


async def test_handshake_major_mismatch_fails_loudly(marked: Marked) -> None:
    async with spawn_daemon(env=marked.env()) as daemon:
        with pytest.raises(RemoteError) as info:
            await daemon.request("initialize", InitializeParams("2.0"))
        assert info.value.code == ErrorCode.PROTOCOL_MISMATCH
        assert info.value.data["supported"] == "1.0"


async def test_requests_before_initialize_are_refused(marked: Marked,
                                                      tmp_path: pathlib.Path) -> None:
    async with raw_daemon(marked.env()) as raw:
        answer = await raw.call("session.new", {"workspace": str(tmp_path)})
        assert answer["error"]["code"] == ErrorCode.NOT_INITIALIZED


async def test_malformed_input_of_every_class_then_still_serving(
        marked: Marked, tmp_path: pathlib.Path) -> None:
    async with raw_daemon(marked.env()) as raw:
        await raw.call("initialize", INIT)

        await raw.send_bytes(b'{"jsonrpc": "2.0", "id": 1, "method"\n')
        assert (await raw.receive())["error"]["code"] == -32700

        await raw.send([])
        answer = await raw.receive()
        assert answer["error"]["code"] == -32600 and answer["id"] is None

        await raw.send({"jsonrpc": "2.0", "id": 11})
        answer = await raw.receive()
        assert answer["error"]["code"] == -32600 and answer["id"] == 11

        answer = await raw.call("no.such.method", {})
        assert answer["error"]["code"] == -32601

        answer = await raw.call("session.new", {"workspace": 17})
        assert answer["error"]["code"] == -32602
        assert answer["error"]["data"]["path"] == "$.params.workspace"

        answer = await raw.call("session.new", {"workspace": "relative/dir"})
        assert answer["error"]["code"] == -32602
        assert "Traceback" not in str(answer)

        answer = await raw.call("session.new", {"workspace": str(tmp_path), "extra": True})
        assert answer["error"]["code"] == -32602

        await raw.send([{"jsonrpc": "2.0", "id": 21, "method": "session.list"},
                        {"jsonrpc": "2.0", "id": 22, "method": "nope"}, 3])
        batch = await raw.receive()
        by_id = {item.get("id"): item for item in batch}
        assert "result" in by_id[21]
        assert by_id[22]["error"]["code"] == -32601
        assert by_id[None]["error"]["code"] == -32600

        # A notification with bad params gets no answer; the next request does.
        await raw.send({"jsonrpc": "2.0", "method": "session.list", "params": 5})
        answer = await raw.call("session.new", {"workspace": str(tmp_path)})
        assert answer["result"]["sessionId"].startswith("s-")
        assert await raw.close() == 0


async def test_oversized_frame_is_refused_and_daemon_resyncs(marked: Marked) -> None:
    env = marked.env(QUIESCE_MAX_FRAME="4096")
    async with raw_daemon(env) as raw:
        await raw.call("initialize", INIT)
        await raw.send_bytes(b'{"jsonrpc":"2.0","id":5,"method":"session.list","params":{"x":"'
                             + b"a" * 10_000 + b'"}}\n')
        answer = await raw.receive()
        assert answer["error"]["code"] == -32600 and "exceeds" in answer["error"]["data"]
        answer = await raw.call("session.list")
        assert answer["result"] == {"sessions": []}
