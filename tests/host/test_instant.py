"""Calls the host answers at once in its link's reader (``Executor.execute_now``: a small
local Read), against a real host process, with requests pipelined in one write: they keep
wire order with everything around them, and say what the task path would have said."""

from __future__ import annotations

import pathlib
import subprocess
import sys
from typing import Any

import msgspec
import trio

from tests.conftest import Marked


def request(rid: str, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "method": method}
    if params is not None:
        message["params"] = params
    return message


def read(rid: str, call_id: str, path: str = "one", session: str = "s") -> dict[str, Any]:
    return request(rid, "tools.execute", {"sessionId": session, "callId": call_id,
                                          "tool": "Read", "args": {"path": path}})


def abort(rid: str, call_id: str, tool: str = "Read") -> dict[str, Any]:
    return request(rid, "tools.abort", {"sessionId": "s", "callId": call_id, "tool": tool,
                                        "cause": {"kind": "user"}})


async def exchange(workspace: pathlib.Path, env: dict[str, str], messages: list[Any],
                   answers: int, config: str = "{}") -> list[Any]:
    """Write ``messages`` in one write to a fresh host; every line it writes back, in order,
    until ``answers`` answers (arrays included) have come."""
    data = b"".join(msgspec.json.encode(m) + b"\n" for m in [
        request("init", "initialize", {"protocolVersion": "1.0"}),
        request("open", "session.open", {"sessionId": "s", "workspace": str(workspace),
                                         "permissionMode": "auto"}),
        *messages])
    lines: list[Any] = []
    with trio.fail_after(20):
        process = await trio.lowlevel.open_process(
            [sys.executable, "-m", "host", "--config", config], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
        assert process.stdin is not None and process.stdout is not None
        try:
            await process.stdin.send_all(data)
            buffer = b""
            while sum(isinstance(x, list) or "method" not in x for x in lines) < answers + 2:
                chunk = await process.stdout.receive_some(1 << 16)
                assert chunk, f"the host closed its output after {lines}"
                buffer += chunk
                *done, buffer = buffer.split(b"\n")
                lines += [msgspec.json.decode(line) for line in done]
        finally:
            with trio.CancelScope(shield=True), trio.move_on_after(10):
                await process.stdin.aclose()  # the host stops what runs, and exits
                await process.wait()
            if process.returncode is None:
                process.kill()  # its children die with it (parent-death signal)
                await process.wait()
    return lines[2:] if all("id" in x for x in lines[:2]) else lines


async def test_pipelined_reads_and_aborts_keep_wire_order(tmp_path: pathlib.Path,
                                                          marked: Marked) -> None:
    (tmp_path / "one").write_text("x\n")
    lines = await exchange(tmp_path, marked.env(), [
        abort("a0", "c0"),                 # before its call: a tombstone
        read("r0", "c0"),                  # meets it
        read("r1", "c1"),                  # answered at once
        abort("a1", "c1"),                 # finds it settled
        abort("a1b", "c1", tool="Grep"),   # another tool's stop is not its
        [read("b2", "c2"), abort("b2a", "c2")],
        read("r3", "c3", path="missing"),  # declined at once: the task path answers
    ], answers=7)
    answers = {x["id"]: x for x in lines if isinstance(x, dict) and "id" in x}
    assert answers["a0"]["result"]["state"] == "tombstoned"
    assert answers["r0"]["result"]["error"]["info"]["code"] == "ABORTED_BEFORE_DISPATCH"
    assert answers["r1"]["result"]["content"][0]["text"] == "     1\tx\n"
    assert answers["r1"]["result"]["bodyInvoked"] is True
    assert answers["a1"]["result"]["found"] and answers["a1"]["result"]["state"] == "settled"
    assert answers["a1b"]["result"]["state"] == "tombstoned"
    (batch,) = [x for x in lines if isinstance(x, list)]
    by_id = {x["id"]: x for x in batch}
    assert "error" not in by_id["b2"]["result"] and by_id["b2a"]["result"]["state"] == "settled"
    assert answers["r3"]["result"]["error"]["info"]["code"] == "NOT_FOUND"
    # Each ``tools.started`` comes before its call's answer, once, and never for the
    # tombstoned call; the answers of requests answered at once come in wire order.
    started = [x["params"]["callId"] for x in lines
               if isinstance(x, dict) and x.get("method") == "tools.started"]
    assert sorted(started) == ["c1", "c2", "c3"]
    position = {id(x): i for i, x in enumerate(lines)}
    first_started = next(i for i, x in enumerate(lines)
                         if isinstance(x, dict) and x.get("params", {}).get("callId") == "c1")
    assert first_started < position[id(answers["r1"])]
    order = [x["id"] for x in lines if isinstance(x, dict) and "id" in x]
    assert order.index("a0") < order.index("r0") < order.index("r1") < order.index("a1")


async def test_a_read_without_a_free_slot_waits_in_admission_and_is_stopped_there(
        tmp_path: pathlib.Path, marked: Marked) -> None:
    """One read-only slot, held by a Grep that reads for minutes: a Read that could be
    answered at once still waits for admission (the bound holds), and its stop finds it
    there."""
    (tmp_path / "one").write_text("x\n")
    with open(tmp_path / "big.txt", "wb") as big:
        big.truncate(256 * 1024**3)  # sparse: ripgrep reads it for minutes
    grep = request("g", "tools.execute", {"sessionId": "s", "callId": "g", "tool": "Grep",
                                          "args": {"pattern": "zzz", "path": "big.txt"}})
    lines = await exchange(tmp_path, marked.env(), [
        grep, read("r1", "c1"), abort("a1", "c1"), abort("ag", "g", tool="Grep"),
    ], answers=4, config='{"admission": {"per_class": {"read-only": 1}}}')
    answers = {x["id"]: x for x in lines if isinstance(x, dict) and "id" in x}
    assert answers["ag"]["result"]["state"] == "running", answers["ag"]
    assert answers["a1"]["result"]["state"] == "admission", answers["a1"]
    assert answers["r1"]["result"]["error"]["info"]["code"] == "ABORTED_BEFORE_DISPATCH"
    assert answers["g"]["result"]["error"]["info"]["code"] == "ABORTED"
