"""The runtime's link failing under a call: its pipe closing during a permission prompt, an
error answer to a prompt, and end of input while a mutating body never returns. The host
ends each call honestly and exits."""

from __future__ import annotations

import pathlib
import sys
import time
from typing import Any

import msgspec
import trio

from protocol.tools import ToolResult
from tests.conftest import Marked
from tests.fuzz.stream import Peer, host_command, log_errors, spawned
from tests.kit.host import running_host

STUCK_HOST = [sys.executable, str(pathlib.Path(__file__).with_name("stuck_host.py"))]


def request(rid: str, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "method": method}
    if params is not None:
        message["params"] = params
    return message


async def ask_mode_write(host: Peer, workspace: pathlib.Path) -> dict[str, Any]:
    """Handshake, an ask-mode session, a Write: the host's permission.request."""
    assert "result" in await host.call(request("init", "initialize",
                                               {"protocolVersion": "1.0"}))
    assert "result" in await host.call(request("open", "session.open", {
        "sessionId": "s", "workspace": str(workspace), "permissionMode": "ask"}))
    await host.send(request("write", "tools.execute", {
        "sessionId": "s", "callId": "w1", "tool": "Write",
        "args": {"path": "x.txt", "content": "hello"}}))
    prompt: dict[str, Any] = await host.from_peer_matching(
        lambda m: m.get("method") == "permission.request", within=10)
    return prompt


async def test_pipe_closing_during_a_prompt_ends_the_call_before_dispatch(
        tmp_path: pathlib.Path, marked: Marked) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    log = str(tmp_path / "host.log")
    with trio.fail_after(20):
        async with spawned(host_command(), marked.env(), log) as host:
            await ask_mode_write(host, workspace)
            await host.stdin.aclose()  # the runtime is gone, its prompt unanswered
            answer = await host.answer_to("write", within=10)
            assert await host.process.wait() == 0
    assert "result" in answer, answer  # a tool result, not an INTERNAL error
    result = msgspec.convert(answer["result"], ToolResult)
    assert result.code == "ABORTED_BEFORE_DISPATCH" and not result.body_invoked
    assert not log_errors(log), log_errors(log)[:3]
    assert list(workspace.iterdir()) == []


async def test_an_error_answer_to_a_prompt_is_a_deny(tmp_path: pathlib.Path,
                                                     marked: Marked) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    log = str(tmp_path / "host.log")
    with trio.fail_after(20):
        async with spawned(host_command(), marked.env(), log) as host:
            prompt = await ask_mode_write(host, workspace)
            await host.send({"jsonrpc": "2.0", "id": prompt["id"],
                             "error": {"code": -32603, "message": "Internal error"}})
            answer = await host.answer_to("write", within=10)
            stats = await host.call(request("stats", "host.stats"))
            await host.stdin.aclose()
            assert await host.process.wait() == 0
    assert "result" in answer, answer
    result = msgspec.convert(answer["result"], ToolResult)
    assert result.code == "TOOL_DENIED" and not result.body_invoked, result
    assert stats["result"]["callsInFlight"] == 0
    assert not log_errors(log), log_errors(log)[:3]
    assert list(workspace.iterdir()) == []


async def test_host_exits_on_end_of_input_though_a_mutating_body_never_returns(
        tmp_path: pathlib.Path, marked: Marked) -> None:
    config = {"tools": {"kill_grace": 0.1}, "stop_timeout": 0.2}
    async with running_host(str(tmp_path), marked.env(), config=config,
                            command=STUCK_HOST) as host:
        results: list[ToolResult] = []
        async with trio.open_nursery() as nursery:
            async def run() -> None:
                results.append(await host.execute("m1", "Stuck", {}))

            nursery.start_soon(run)
            with trio.fail_after(10):
                while not host.output:  # the body is running
                    await trio.sleep(0.01)
            process = host.link._process
            assert process is not None and process.stdin is not None
            sent = time.monotonic()
            await process.stdin.aclose()  # the runtime's pipe closes
            with trio.fail_after(10):
                await host.link.exited.wait()
            elapsed = time.monotonic() - sent
    assert process.returncode == 0
    (result,) = results
    assert result.code == "ABORTED" and result.body_invoked and result.details["forced"]
    # The stop's wait (kill grace + stop_timeout), the forced result, a second to settle.
    assert elapsed < 0.1 + 0.2 + 1.0 + 2.0, elapsed
