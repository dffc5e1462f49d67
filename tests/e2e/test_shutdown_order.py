"""Issue 31 item 11 and issue 30: what a client writes around ``shutdown`` or end of input.

* A request written after ``shutdown`` is refused with ``SHUTTING_DOWN`` (it used to run:
  a ``session.new`` opened a session, a prompt started a turn).
* A ``session.new`` written right before ``shutdown`` or the end of input is answered
  honestly: opened (its effect came first, in wire order), never ``HOST_CRASHED`` (the
  host did not crash: the daemon stopped it under the open). Run a hundred times.
"""

from __future__ import annotations

import pathlib

import msgspec
import trio

from protocol.errors import ErrorCode
from tests.conftest import Marked
from tests.kit.rawclient import RawClient, raw_daemon

INIT = {"protocolVersion": "1.0", "clientInfo": {"name": "test"}}


def frame(request_id: int, method: str, params: object = None) -> bytes:
    message: dict[str, object] = {"jsonrpc": "2.0", "id": request_id, "method": method}
    if params is not None:
        message["params"] = params
    return msgspec.json.encode(message) + b"\n"


async def answers(raw: RawClient, ids: set[int]) -> dict[int, dict[str, object]]:
    """Answers to ``ids`` until stdout closes (notifications skipped)."""
    got: dict[int, dict[str, object]] = {}
    while ids - got.keys():
        try:
            message = await raw.receive(within=30)
        except EOFError:
            break
        if "id" in message and "method" not in message:
            got[message["id"]] = message
    return got


def new_session(workspace: pathlib.Path) -> dict[str, object]:
    return {"workspace": str(workspace), "permissionMode": "auto",
            "provider": {"kind": "scripted", "script": [[{"text": "hi"}]]}}


async def test_requests_after_shutdown_are_refused(tmp_path: pathlib.Path,
                                                   marked: Marked) -> None:
    async with raw_daemon(marked.env()) as raw:
        await raw.call("initialize", INIT)
        opened = await raw.call("session.new", new_session(tmp_path))
        session_id = opened["result"]["sessionId"]
        await raw.send_bytes(
            frame(1, "shutdown")
            + frame(2, "session.new", new_session(tmp_path))
            + frame(3, "agent.prompt", {"sessionId": session_id, "text": "hello"})
            + frame(4, "session.list"))
        got = await answers(raw, {1, 2, 3, 4})
        assert got[1].get("result") == {}, got[1]
        for late in (2, 3, 4):
            error = got[late].get("error")
            assert isinstance(error, dict), got[late]
            assert error["code"] == ErrorCode.SHUTTING_DOWN, got[late]
        with trio.fail_after(20):
            assert await raw.process.wait() == 0
    # Nothing ran: one session's log on disk, with no turn in it.
    logs = list((marked.data_dir / "sessions").glob("*.jsonl"))
    assert len(logs) == 1, logs
    assert "turn/start" not in logs[0].read_text()


async def _new_then_end(workspace: pathlib.Path, marked: Marked, how: str) -> dict[str, object]:
    async with raw_daemon(marked.env()) as raw:
        await raw.call("initialize", INIT)
        if how == "shutdown":
            await raw.send_bytes(frame(1, "session.new", new_session(workspace))
                                 + frame(2, "shutdown"))
        else:
            await raw.send_bytes(frame(1, "session.new", new_session(workspace)))
            await raw.process.stdin.aclose()  # type: ignore[union-attr]
        got = await answers(raw, {1, 2} if how == "shutdown" else {1})
        with trio.fail_after(20):
            assert await raw.process.wait() == 0
        return got[1]


async def test_session_new_right_before_the_end_is_answered_honestly(
        tmp_path: pathlib.Path, marked: Marked) -> None:
    crashed: list[str] = []
    answered = 0

    async def run(index: int) -> None:
        nonlocal answered
        how = "shutdown" if index % 2 else "eof"
        answer = await _new_then_end(tmp_path, marked, how)
        answered += 1
        error = answer.get("error")
        if error is not None:
            assert isinstance(error, dict)
            if error["code"] == ErrorCode.HOST_CRASHED:
                crashed.append(f"{how}: {error}")
            else:  # the only other honest answer: the daemon was shutting down
                assert error["code"] == ErrorCode.SHUTTING_DOWN, answer
        else:
            assert isinstance(answer.get("result"), dict), answer

    for start in range(0, 100, 2):  # two daemons at a time: the machine has two cores
        async with trio.open_nursery() as nursery:
            nursery.start_soon(run, start)
            nursery.start_soon(run, start + 1)
    assert answered == 100
    assert not crashed, crashed
