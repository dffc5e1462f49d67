"""The installed ``quiesce`` console script over stdio: ``serve`` and ``host`` shake hands,
do real work and exit 0 on EOF; stdout carries only JSON-RPC messages and stderr only
JSON log lines. And the reason why: after ``take_stdio`` a stray ``print``, a raw write
to fd 1 or a child that inherited fd 1 all land on stderr, never on the protocol stream.
"""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys
from typing import Any

import trio

from tests.conftest import Marked

QUIESCE = pathlib.Path(sys.prefix) / "bin" / "quiesce"
LOG_KEYS = {"ts", "level", "proc", "pid", "logger", "msg"}
LEVELS = {"debug", "info", "warning", "error", "critical"}


def request(rid: int, method: str, params: dict[str, Any] | None = None) -> bytes:
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "method": method}
    if params is not None:
        message["params"] = params
    return json.dumps(message).encode() + b"\n"


async def converse(command: list[str], env: dict[str, str],
                   requests: list[bytes]) -> tuple[int, list[dict[str, Any]], list[str]]:
    """Send each request once the previous one is answered, then EOF; return the exit
    status, every stdout message and every stderr line."""
    process = await trio.lowlevel.open_process(command, stdin=subprocess.PIPE,
                                               stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                               env=env)
    assert process.stdin is not None and process.stdout is not None
    assert process.stderr is not None
    out: list[dict[str, Any]] = []
    err = bytearray()
    answered = trio.Event()
    answers = 0

    async def read_out() -> None:
        nonlocal answered, answers
        assert process.stdout is not None
        buffer = b""
        while chunk := await process.stdout.receive_some():
            buffer += chunk
            *lines, buffer = buffer.split(b"\n")
            for line in lines:
                message = json.loads(line)  # anything but JSON fails the test here
                out.append(message)
                if "id" in message and "method" not in message:
                    answers += 1
                    answered.set()
                    answered = trio.Event()
        assert buffer == b"", buffer  # nothing unterminated either

    async def read_err() -> None:
        assert process.stderr is not None
        while chunk := await process.stderr.receive_some():
            err.extend(chunk)

    try:
        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(read_out)
                nursery.start_soon(read_err)
                for count, frame in enumerate(requests, 1):
                    await process.stdin.send_all(frame)
                    while answers < count:
                        await answered.wait()
                await process.stdin.aclose()
                status = await process.wait()
    finally:
        if process.returncode is None:
            process.kill()
            with trio.CancelScope(shield=True):
                await process.wait()
    return status, out, err.decode().splitlines()


def check_streams(out: list[dict[str, Any]], err: list[str], proc: str) -> None:
    for message in out:
        assert message.get("jsonrpc") == "2.0", message
        is_answer = "id" in message and ("result" in message) != ("error" in message)
        is_from_peer = isinstance(message.get("method"), str)
        assert is_answer != is_from_peer, message
    assert err, "no log line at all"
    for line in err:
        entry = json.loads(line)  # anything but a JSON object a line fails here
        assert isinstance(entry, dict) and LOG_KEYS <= entry.keys(), line
        assert entry["level"] in LEVELS and isinstance(entry["msg"], str), line
    assert proc in {json.loads(line)["proc"] for line in err}


async def test_quiesce_serve_over_stdio(marked: Marked, tmp_path: pathlib.Path) -> None:
    (tmp_path / "notes.txt").write_text("alpha\nbeta\n")
    status, out, err = await converse([str(QUIESCE), "serve"], marked.env(), [
        request(1, "initialize", {"protocolVersion": "1.0"}),
        request(2, "session.new", {"workspace": str(tmp_path), "permissionMode": "auto"}),
    ])
    assert status == 0, err[-5:]
    answers = {m["id"]: m for m in out if "id" in m and "method" not in m}
    assert answers[1]["result"]["protocolVersion"] == "1.0", answers
    session_id = answers[2]["result"]["sessionId"]
    status, out2, err2 = await converse([str(QUIESCE), "serve"], marked.env(), [
        request(1, "initialize", {"protocolVersion": "1.0"}),
        request(2, "session.load", {"sessionId": session_id}),
        request(3, "debug.runTool", {"sessionId": session_id, "tool": "Read",
                                     "args": {"path": "notes.txt"}}),
        request(4, "session.list"),
    ])
    assert status == 0, err2[-5:]
    answers = {m["id"]: m for m in out2 if "id" in m and "method" not in m}
    assert "beta" in answers[3]["result"]["result"]["content"][0]["text"], answers
    assert [s["sessionId"] for s in answers[4]["result"]["sessions"]] == [session_id]
    assert any(m.get("method") == "session.event" for m in out2)  # the load's replay
    check_streams(out + out2, err + err2, "runtime")
    # The host the daemon ran logged to the same stderr, in the same form.
    assert "host" in {json.loads(line)["proc"] for line in err + err2}


async def test_quiesce_host_over_stdio(marked: Marked, tmp_path: pathlib.Path) -> None:
    (tmp_path / "notes.txt").write_text("alpha\nbeta\n")
    status, out, err = await converse([str(QUIESCE), "host"], marked.env(), [
        request(1, "initialize", {"protocolVersion": "1.0"}),
        request(2, "session.open", {"sessionId": "s-0123456789ab", "workspace": str(tmp_path),
                                    "permissionMode": "auto"}),
        request(3, "tools.execute", {"sessionId": "s-0123456789ab", "callId": "c1",
                                     "tool": "Bash", "args": {"command": "echo on-stdout"}}),
        request(4, "tools.execute", {"sessionId": "s-0123456789ab", "callId": "c2",
                                     "tool": "Read", "args": {"path": "notes.txt"}}),
    ])
    assert status == 0, err[-5:]
    answers = {m["id"]: m for m in out if "id" in m and "method" not in m}
    assert answers[1]["result"]["protocolVersion"] == "1.0", answers
    assert "on-stdout" in answers[3]["result"]["content"][0]["text"], answers
    assert "beta" in answers[4]["result"]["content"][0]["text"], answers
    check_streams(out, err, "host")


STRAY = """
import os, subprocess, sys
import trio
from runtime.link.stdio import take_stdio

receive, send = take_stdio()
print("stray print")
sys.stdout.flush()
os.write(1, b"stray write\\n")
subprocess.run(["echo", "stray child"], check=True)
trio.run(send.send_all, b'{"jsonrpc":"2.0","method":"only.this"}\\n')
"""


async def test_stray_writes_after_take_stdio_land_on_stderr(marked: Marked) -> None:
    with trio.fail_after(30):
        done = await trio.run_process([sys.executable, "-c", STRAY], env=marked.env(),
                                      capture_stdout=True, capture_stderr=True)
    assert done.stdout == b'{"jsonrpc":"2.0","method":"only.this"}\n', done.stdout
    assert done.stderr.decode().splitlines() == ["stray print", "stray write", "stray child"]
