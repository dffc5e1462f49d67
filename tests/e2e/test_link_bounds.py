"""The client link's bounds, on the real ``quiesce serve``: batch size, what it writes,
and text that is not quite Unicode."""

from __future__ import annotations

import json
import pathlib
import time

import msgspec
import trio

from protocol.bounds import MAX_BATCH_MEMBERS
from protocol.framing import DEFAULT_MAX_FRAME_SIZE
from protocol.messages.events import ToolCallEvent, UserMessageEvent
from runtime.agent.sessionlog import read_log
from runtime.daemon.ops.connection import MAX_OPS_FRAME
from tests.conftest import Marked
from tests.e2e.pipeline import INIT, Pipeline
from tests.kit.rawclient import raw_daemon

INVALID_REQUEST, INVALID_PARAMS = -32600, -32602


def _list(rid: int) -> bytes:
    return b'{"jsonrpc":"2.0","id":%d,"method":"session.list","params":{}}' % rid


async def test_a_batch_over_the_limit_is_one_error_at_parse_cost(marked: Marked) -> None:
    async with raw_daemon(marked.env()) as raw:
        pipe = Pipeline(raw)
        await pipe.call("initialize", INIT)
        huge = b"[" + b",".join([b"1"] * 3_000_000) + b"]\n"  # 6 MB, under the frame limit
        over = b"[" + b",".join(_list(10_000 + i) for i in range(MAX_BATCH_MEMBERS + 1)) + b"]\n"
        started = time.monotonic()
        await raw.send_bytes(huge + over + _list(1) + b"\n")
        refusals = [await raw.receive(), await raw.receive()]
        after = await raw.receive()
        elapsed = time.monotonic() - started
        for refusal in refusals:
            assert refusal["id"] is None and refusal["error"]["code"] == INVALID_REQUEST
            assert str(MAX_BATCH_MEMBERS) in refusal["error"]["data"], refusal
        assert after["id"] == 1 and "result" in after
        assert elapsed < 3.0, elapsed  # today: about a minute of silence


async def test_a_maximal_batch_is_served_member_by_member(marked: Marked) -> None:
    async with raw_daemon(marked.env()) as raw:
        pipe = Pipeline(raw)
        await pipe.call("initialize", INIT)
        ids = list(range(100, 100 + MAX_BATCH_MEMBERS))
        await raw.send_bytes(b"[" + b",".join(_list(i) for i in ids) + b"]\n")
        answers = await pipe.wait(ids)
        assert all("result" in a for a in answers)
        assert pipe.duplicates == []


async def test_a_stop_right_after_a_huge_batch_is_not_held_up(
        marked: Marked, tmp_path: pathlib.Path) -> None:
    async with raw_daemon(marked.env()) as raw:
        pipe = Pipeline(raw)
        await pipe.call("initialize", INIT)
        new = await pipe.call(*pipe.scripted_session(str(tmp_path), [[{"sleepMs": 60000}]]))
        sid = new["result"]["sessionId"]
        [prompt] = await pipe.write(("agent.prompt", {"sessionId": sid, "text": "wait"}))
        huge = b"[" + b",".join([b"1"] * 3_000_000) + b"]\n"
        abort_id, abort = pipe.frame("agent.abort", {"sessionId": sid})
        started = time.monotonic()
        await raw.send_bytes(huge + abort)
        [answer] = await pipe.wait([abort_id], within=60)
        elapsed = time.monotonic() - started
        assert answer["result"]["outcome"] == "aborted", answer
        assert elapsed < 2.0, elapsed  # today: half a minute
        await pipe.wait([prompt])


async def test_no_frame_written_exceeds_the_limit(marked: Marked,
                                                  tmp_path: pathlib.Path) -> None:
    """A model Write of 9 MiB: its tool/call is announced shortened (a marker says how much
    was left out), every line written fits the frame limit, the durable log has it whole
    (and the host, whose link has the same limit, never gets it: the call's error)."""
    content = "x" * (9 * 2**20)
    script = tmp_path / "script.json"
    script.write_text(json.dumps([
        [{"toolCall": {"id": "w1", "name": "Write", "args": {"path": "big.txt",
                                                              "content": content}}}],
        [{"text": "done"}]]))
    workspace = tmp_path / "ws"
    workspace.mkdir()
    async with raw_daemon(marked.env()) as raw:
        pipe = Pipeline(raw)
        await pipe.call("initialize", INIT)
        new = await pipe.call("session.new", {"workspace": str(workspace), "permissionMode":
                                              "auto", "provider": {"kind": "scripted",
                                                                   "path": str(script)}})
        sid = new["result"]["sessionId"]
        [answer] = await pipe.wait(await pipe.write(("agent.prompt", {"sessionId": sid,
                                                                      "text": "go"})), 60)
        assert answer["result"]["stopReason"] == "end_turn", answer
    calls = [e["params"]["event"] for e in pipe.events
             if e["params"]["event"]["kind"] == "tool/call"]
    assert len(calls) == 1, [e["params"]["event"]["kind"] for e in pipe.events]
    shown = calls[0]["args"]["content"]
    assert shown.endswith("bytes left out]") and len(shown) < len(content), shown[-60:]
    results = [e["params"]["event"] for e in pipe.events
               if e["params"]["event"]["kind"] == "tool/result"]
    # The host link has the same frame limit: the call itself is refused, as its result says.
    assert len(results) == 1 and results[0]["isError"], results
    assert "frame limit" in json.dumps(results[0]["content"]), results
    assert not (workspace / "big.txt").exists()
    logged = [e for e in read_log(marked.data_dir / "sessions" / f"{sid}.jsonl").events
              if isinstance(e, ToolCallEvent)]
    assert logged[0].args["content"] == content
    assert max(len(msgspec.json.encode(e)) for e in pipe.events) <= DEFAULT_MAX_FRAME_SIZE


async def test_a_lone_surrogate_keeps_the_request_id(marked: Marked,
                                                     tmp_path: pathlib.Path) -> None:
    """``"\\udcff"`` (half an emoji, as JavaScript writes it) is read as U+FFFD: the request
    is answered with its id, in a key, a value or the id itself."""
    async with raw_daemon(marked.env()) as raw:
        pipe = Pipeline(raw)
        await pipe.call("initialize", INIT)
        await raw.send_bytes(
            b'{"jsonrpc":"2.0","id":7,"method":"session.new","params":{"workspace":'
            b'"/nonexistent/\\udcff"}}\n'
            b'{"jsonrpc":"2.0","id":8,"method":"session.list","params":{"k\\ud83d":1}}\n'
            b'{"jsonrpc":"2.0","id":"n\\ude00","method":"session.list","params":{}}\n')
        bad_dir, unknown_key, text_id = await pipe.wait([7, 8, "n\ufffd"])
        assert bad_dir["error"]["code"] == INVALID_PARAMS, bad_dir
        assert "\ufffd" in json.dumps(bad_dir["error"]["data"], ensure_ascii=False)
        assert unknown_key["error"]["code"] == INVALID_PARAMS, unknown_key
        assert "result" in text_id, text_id
        new = await pipe.call(*pipe.scripted_session(str(tmp_path), [[{"text": "hi"}]]))
        sid = new["result"]["sessionId"]
        await raw.send_bytes(b'{"jsonrpc":"2.0","id":9,"method":"agent.prompt","params":'
                             b'{"sessionId":"%s","text":"half \\ud83d emoji"}}\n' % sid.encode())
        [prompt] = await pipe.wait([9])
        assert prompt["result"]["stopReason"] == "end_turn", prompt
    texts = [e.text for e in read_log(marked.data_dir / "sessions" / f"{sid}.jsonl").events
             if isinstance(e, UserMessageEvent)]
    assert texts == ["half \ufffd emoji"]


async def test_a_huge_batch_on_the_ops_socket_stalls_nothing(marked: Marked) -> None:
    async with raw_daemon(marked.env()) as raw:
        pipe = Pipeline(raw)
        init = await pipe.call("initialize", INIT)
        socket = init["result"]["capabilities"]["ops"]["socket"]
        async with await trio.open_unix_socket(socket) as ops:
            started = time.monotonic()
            await ops.send_all(b"[" + b",".join([b"1"] * 300_000) + b"]\n")
            listed = await pipe.call("session.list", {})
            elapsed = time.monotonic() - started
            assert "result" in listed
            assert elapsed < 1.0, elapsed  # today: 5 s
            with trio.fail_after(10):
                data = b""
                while b"\n" not in data:
                    data += await ops.receive_some(65536)
            refusal = msgspec.json.decode(data.split(b"\n")[0])
            assert refusal["error"]["code"] == INVALID_REQUEST, refusal
            # The ops socket reads lines of at most MAX_OPS_FRAME (issue 31): this one is
            # refused for its length before its members are counted.
            assert str(MAX_OPS_FRAME) in refusal["error"]["data"]
