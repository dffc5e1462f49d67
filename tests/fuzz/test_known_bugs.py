"""Bugs the fuzz found outside ``protocol/``, pinned until they are fixed.

Each test states the right behaviour and is marked ``xfail(strict=True)``: when a fix
lands it passes, the strict mark turns that into a failure, and the mark comes off. The
bulk fuzz keeps clear of these inputs unless QUIESCE_FUZZ_STRICT=1.
"""

from __future__ import annotations

import pathlib

import psutil
import pytest
import trio

from protocol.errors import ErrorCode, RpcError
from protocol.version import check_compatible
from runtime.client import serve_command
from runtime.sessions import SessionStore
from tests.conftest import Marked
from tests.fuzz.stream import Peer, host_command, spawned
from tests.fuzz.test_stray import request


@pytest.mark.xfail(strict=True, raises=ValueError,
                   reason="protocol/version.py: str.isdigit() accepts '²', int() refuses it")
def test_a_version_with_superscript_digits_is_a_mismatch() -> None:
    # On the wire: initialize {"protocolVersion": "1.²"} is answered -32603 Internal error.
    with pytest.raises(RpcError) as info:
        check_compatible("1.²")
    assert info.value.code == ErrorCode.PROTOCOL_MISMATCH


@pytest.mark.xfail(strict=True,
                   reason="runtime/sessions.py: _SESSION_ID.match with '$' takes a trailing \\n")
def test_a_session_id_with_a_trailing_newline_is_malformed(tmp_path: pathlib.Path) -> None:
    # On the wire: session.load {"sessionId": "s-0123456789ab\n"} is answered NOT_FOUND
    # (the id was accepted and a file name with a newline looked up), not INVALID_PARAMS.
    with pytest.raises(RpcError) as info:
        SessionStore(tmp_path).path_of("s-0123456789ab\n")
    assert info.value.code == ErrorCode.INVALID_PARAMS


@pytest.mark.xfail(strict=True,
                   reason="host: session.open does not validate the workspace; os.path.realpath "
                          "raises ValueError on a NUL and the answer is -32603")
async def test_host_session_open_with_a_nul_in_the_workspace_is_invalid_params(
        marked: Marked, tmp_path: pathlib.Path) -> None:
    with trio.fail_after(20):
        async with spawned(host_command(), marked.env(), str(tmp_path / "host.log")) as host:
            answer = await host.call(request("open", "session.open", {
                "sessionId": "s-nul", "workspace": f"{tmp_path}/a\u0000b"}))
            still = await host.call(request("stats", "host.stats"))
    assert "result" in still
    assert answer.get("error", {}).get("code") == ErrorCode.INVALID_PARAMS, answer


ONE_E9 = 800_000  # "1E9" is 3 bytes from the client, "1000000000.0" (12) to the host


async def _send_expanding_call(daemon: Peer, tmp_path: pathlib.Path) -> None:
    """A debug.runTool whose arguments fit the client link's frame limit but, re-encoded,
    not the host link's: the host can only answer -32600 with a null id."""
    await daemon.call(request("init", "initialize", {"protocolVersion": "1.0"}))
    opened = await daemon.call(request("new", "session.new", {"workspace": str(tmp_path)}))
    session_id = opened["result"]["sessionId"]
    args = b'{"x":[' + b",".join([b"1E9"] * ONE_E9) + b"]}"
    frame = (b'{"jsonrpc":"2.0","id":"big","method":"debug.runTool","params":{"sessionId":"'
             + session_id.encode() + b'","tool":"Read","args":' + args + b"}}")
    assert len(frame) < 8 * 2**20 < 4 * len(args)
    await daemon.stdin.send_all(frame + b"\n")


async def _refused_by_the_host(daemon: Peer) -> None:
    """The host logs (to the daemon's stderr) that the frame was too large."""
    with trio.fail_after(15):
        while True:
            with open(daemon.log_path, "rb") as log:  # noqa: ASYNC230 (a small local file)
                if b"exceeds the" in log.read():
                    return
            await trio.sleep(0.05)


def _cpu(pid: int) -> float:
    times = psutil.Process(pid).cpu_times()
    return float(times.user + times.system)


async def test_a_frame_the_host_refuses_starts_no_error_ping_pong(
        marked: Marked, tmp_path: pathlib.Path) -> None:
    """Regression (fixed in protocol/envelope.py): the host's id-null -32600 about the frame
    was answered by the runtime with its own id-null -32600, and so on forever, both
    processes spinning. Now the runtime drops it, and both go idle."""
    with trio.fail_after(30):
        async with spawned(serve_command(), marked.env(),
                           str(tmp_path / "daemon.log")) as daemon:
            await _send_expanding_call(daemon, tmp_path)
            await _refused_by_the_host(daemon)
            await trio.sleep(0.2)
            host_pid = psutil.Process(daemon.process.pid).children()[0].pid
            before = (_cpu(daemon.process.pid), _cpu(host_pid))
            await trio.sleep(0.8)
            spent = (_cpu(daemon.process.pid) - before[0], _cpu(host_pid) - before[1])
            assert max(spent) < 0.15, spent  # the ping-pong kept both near 0.3 s here
            listed = await daemon.call(request("list", "session.list"), within=5)
            assert len(listed["result"]["sessions"]) == 1


@pytest.mark.xfail(strict=True,
                   reason="runtime: a request the host cannot parse is answered with a null id; "
                          "the runtime's pending tools.execute (here debug.runTool) never ends")
async def test_a_tool_call_too_large_for_the_host_is_answered(
        marked: Marked, tmp_path: pathlib.Path) -> None:
    answer = None
    with trio.fail_after(30):
        async with spawned(serve_command(), marked.env(),
                           str(tmp_path / "daemon.log")) as daemon:
            await _send_expanding_call(daemon, tmp_path)
            await _refused_by_the_host(daemon)
            with trio.move_on_after(2):
                answer = await daemon.answer_to("big", within=10)
    assert answer is not None, "debug.runTool was never answered"
    assert "error" in answer or answer["result"]["result"].get("isError"), answer
