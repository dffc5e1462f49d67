"""Late and stray messages against real processes: answers to requests never sent, a late
answer to a withdrawn permission prompt, an abort for a finished call, a duplicate call
id. Each is handled without corrupting state, and the process serves on correctly."""

from __future__ import annotations

import pathlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import psutil
import trio

from protocol.messages.host import PermissionRequestParams, PermissionRequestResult
from runtime.clients.daemon_client import serve_command
from tests.conftest import Marked
from tests.fuzz.stream import Peer, host_command, log_errors, spawned
from tests.kit.daemon import agent_daemon, call, text

SESSION = "s-stray"


def request(rid: Any, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "method": method}
    if params is not None:
        message["params"] = params
    return message


def strays(pending_id: int) -> list[dict[str, Any]]:
    """Answers that belong to no request the process is waiting on (``pending_id`` is one
    it is): other ids, the same number as a string, a null id (the peer's complaint about a
    frame it could not read, which must not be answered back)."""
    allow = {"decision": "allow-once"}
    return [
        {"jsonrpc": "2.0", "id": pending_id + 1, "result": allow},
        {"jsonrpc": "2.0", "id": str(pending_id), "result": allow},
        {"jsonrpc": "2.0", "id": -pending_id, "result": allow},
        {"jsonrpc": "2.0", "id": pending_id + 1000,
         "error": {"code": -32603, "message": "Internal error"}},
        {"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": "Parse error"}},
        {"jsonrpc": "2.0", "id": None, "result": allow},
    ]


@asynccontextmanager
async def host_session(marked: Marked, tmp_path: pathlib.Path,
                       mode: str) -> AsyncIterator[Peer]:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "notes.txt").write_text("alpha\nbeta\n")
    async with spawned(host_command(), marked.env(), str(tmp_path / "host.log")) as host:
        answer = await host.call(request("init", "initialize", {"protocolVersion": "1.0"}))
        assert "result" in answer, answer
        answer = await host.call(request("open", "session.open", {
            "sessionId": SESSION, "workspace": str(workspace), "permissionMode": mode}))
        assert set(answer["result"]) <= {"sandbox"}, answer
        yield host
        assert not log_errors(host.log_path), log_errors(host.log_path)[:5]
        await host.stdin.aclose()
        with trio.fail_after(20):
            assert await host.process.wait() == 0


async def stats(host: Peer, rid: str) -> dict[str, int]:
    answer = await host.call(request(rid, "host.stats"))
    result: dict[str, int] = answer["result"]
    return result


def only_answers(peer: Peer, *ids: Any) -> None:
    """Nothing was answered but these requests."""
    got = sorted(str(a.get("id")) if isinstance(a, dict) else repr(a) for a in peer.received)
    assert got == sorted(map(str, ids)), peer.received


async def test_host_ignores_answers_to_requests_it_never_sent(marked: Marked,
                                                              tmp_path: pathlib.Path) -> None:
    with trio.fail_after(30):
        async with host_session(marked, tmp_path, "ask") as host:
            await host.send(request("w", "tools.execute", {
                "sessionId": SESSION, "callId": "w1", "tool": "Write",
                "args": {"path": "x.txt", "content": "written"}}))
            asked = await host.from_peer_matching(
                lambda m: m.get("method") == "permission.request")
            for stray in strays(asked["id"]):
                await host.send(stray)
            during = await stats(host, "stats-1")
            assert during["callsInFlight"] == 1, during  # still waiting for the real answer
            assert not (tmp_path / "ws" / "x.txt").exists()
            only_answers(host, "init", "open", "stats-1")

            await host.send({"jsonrpc": "2.0", "id": asked["id"],
                             "result": {"decision": "allow-once"}})
            result = (await host.answer_to("w"))["result"]
            assert not result.get("isError"), result
            assert (tmp_path / "ws" / "x.txt").read_text() == "written"
            after = await stats(host, "stats-2")
            assert after["callsInFlight"] == 0 and after["tombstones"] == 0, after
            only_answers(host, "init", "open", "stats-1", "w", "stats-2")
            # The one prompt, then (after the real answer) the body's start.
            assert [m["method"] for m in host.from_peer] == ["permission.request",
                                                             "tools.started"]


async def test_daemon_ignores_answers_to_requests_it_never_sent(
        marked: Marked, tmp_path: pathlib.Path) -> None:
    script = [[call("w1", "Write", path="x.txt", content="written")], [text("done")]]
    with trio.fail_after(30):
        async with spawned(serve_command(), marked.env(),
                           str(tmp_path / "daemon.log")) as daemon:
            await daemon.call(request("init", "initialize", {"protocolVersion": "1.0"}))
            opened = await daemon.call(request("new", "session.new", {
                "workspace": str(tmp_path), "permissionMode": "ask",
                "provider": {"kind": "scripted", "script": script}}))
            session_id = opened["result"]["sessionId"]
            await daemon.send(request("prompt", "agent.prompt",
                                      {"sessionId": session_id, "text": "write"}))
            asked = await daemon.from_peer_matching(
                lambda m: m.get("method") == "permission.request")
            for stray in strays(asked["id"]):
                await daemon.send(stray)
            listed = await daemon.call(request("list", "session.list"))
            assert [s["sessionId"] for s in listed["result"]["sessions"]] == [session_id]
            assert not (tmp_path / "x.txt").exists()
            only_answers(daemon, "init", "new", "list")

            await daemon.send({"jsonrpc": "2.0", "id": asked["id"],
                               "result": {"decision": "allow-once"}})
            answer = await daemon.answer_to("prompt")
            assert answer["result"]["stopReason"] == "end_turn", answer
            assert (tmp_path / "x.txt").read_text() == "written"
            only_answers(daemon, "init", "new", "list", "prompt")
            assert not log_errors(daemon.log_path), log_errors(daemon.log_path)[:5]


async def test_late_answer_to_a_withdrawn_prompt_is_refused(marked: Marked,
                                                            tmp_path: pathlib.Path) -> None:
    """The first prompt is withdrawn by a stop; the client answers it "allow" anyway,
    late. The write never happens, and the next prompt's permission works as usual."""
    late_sent = trio.Event()
    withdrawn: list[str] = []

    async def answer(params: PermissionRequestParams) -> PermissionRequestResult:
        if params.call_id.endswith("w1"):
            with trio.fail_after(10):
                while params.request_id not in withdrawn:
                    await trio.sleep(0.01)
            late_sent.set()  # the answer goes out as this returns
        return PermissionRequestResult("allow-once")

    script = [[call("w1", "Write", path="x.txt", content="late")],
              [call("w2", "Write", path="y.txt", content="fresh")], [text("done")]]
    with trio.fail_after(40):
        async with agent_daemon(marked, answer=answer) as agent:
            withdrawn = agent.withdrawn
            await agent.new_session(tmp_path, script, mode="ask")
            async with trio.open_nursery() as nursery:
                nursery.start_soon(agent.prompt, "write late")
                with trio.fail_after(10):
                    while not agent.permission_requests:
                        await agent.changed.wait()
                aborted = await agent.abort()
            assert [c.code for c in aborted.tool_calls] == ["ABORTED_BEFORE_DISPATCH"]
            await late_sent.wait()
            # A request after the late answer: the daemon has read (and dropped) it.
            await agent.daemon.request("session.list", _empty())
            assert not (tmp_path / "x.txt").exists()
            agent.assert_balanced()

            second = await agent.prompt("write again")
            assert second.stop_reason == "end_turn"
            assert (tmp_path / "y.txt").read_text() == "fresh"
            assert not (tmp_path / "x.txt").exists()
            assert len(agent.permission_requests) == 2
            agent.assert_balanced()


def _empty() -> Any:
    from protocol.messages.common import Empty

    return Empty()


async def test_abort_for_a_finished_call_leaves_no_tombstone(marked: Marked,
                                                             tmp_path: pathlib.Path) -> None:
    read = {"sessionId": SESSION, "callId": "c1", "tool": "Read",
            "args": {"path": "notes.txt"}}
    abort = {"sessionId": SESSION, "callId": "c1", "tool": "Read"}
    with trio.fail_after(30):
        async with host_session(marked, tmp_path, "auto") as host:
            first = (await host.call(request("r1", "tools.execute", read)))["result"]
            assert "beta" in first["content"][0]["text"], first
            for rid in ("a1", "a2"):  # twice: the same answer, nothing kept
                answer = (await host.call(request(rid, "tools.abort", abort)))["result"]
                assert answer["found"] is True and answer["state"] == "settled", answer
            after = await stats(host, "s1")
            assert after["tombstones"] == 0 and after["callsInFlight"] == 0, after
            # The proof: the same call id runs again, untouched by any tombstone.
            again = (await host.call(request("r2", "tools.execute", read)))["result"]
            assert not again.get("isError") and "beta" in again["content"][0]["text"], again
            # (An abort for a call never seen does leave one: the contrast.)
            unseen = (await host.call(request("a3", "tools.abort", {
                **abort, "callId": "never-run"})))["result"]
            assert unseen == {"found": False, "state": "tombstoned"}, unseen
            assert (await stats(host, "s2"))["tombstones"] == 1


async def test_duplicate_call_id_while_the_first_is_in_flight(marked: Marked,
                                                              tmp_path: pathlib.Path) -> None:
    # The first call runs until the test lets it finish (by creating "go").
    bash = {"sessionId": SESSION, "callId": "dup", "tool": "Bash",
            "args": {"command": "while [ ! -e go ]; do sleep 0.02; done; echo first-done"}}
    with trio.fail_after(30):
        async with host_session(marked, tmp_path, "auto") as host:
            await host.send(request("first", "tools.execute", bash))
            with trio.fail_after(10):
                while (await stats(host, f"poll-{len(host.received)}"))["admissionRunning"] < 1:
                    await trio.sleep(0.02)
            for rid, tool, args in [("same-tool", "Bash", {"command": "echo second"}),
                                    ("other-tool", "Read", {"path": "notes.txt"}),
                                    ("bad-args", "Write", {"nonsense": True})]:
                dup = (await host.call(request(rid, "tools.execute", {
                    **bash, "tool": tool, "args": args}), within=5))["result"]
                assert dup["isError"] and dup["error"]["info"]["code"] == "INVALID_PARAMS", dup
                assert not dup.get("bodyInvoked"), dup
            assert (await stats(host, "during"))["callsInFlight"] == 1
            (tmp_path / "ws" / "go").touch()
            first = (await host.answer_to("first"))["result"]
            assert not first.get("isError"), first
            assert "first-done" in first["content"][0]["text"], first
            assert "second" not in first["content"][0]["text"]
            after = await stats(host, "after")
            assert after["callsInFlight"] == 0 and after["tombstones"] == 0, after
            settled = (await host.call(request("abort", "tools.abort", {
                "sessionId": SESSION, "callId": "dup", "tool": "Bash"})))["result"]
            assert settled["found"] and settled["state"] == "settled", settled


ONE_E9 = 800_000  # "1E9" is 3 bytes from the client, "1000000000.0" (12) to the host


def _cpu(pid: int) -> float:
    times = psutil.Process(pid).cpu_times()
    return float(times.user + times.system)


async def test_a_tool_call_too_large_for_the_host_is_refused_at_once(
        marked: Marked, tmp_path: pathlib.Path) -> None:
    """Arguments that fit the client link's frame limit but, re-encoded, not the host
    link's. Once the host answered such a frame -32600 with a null id: the runtime's call
    never ended, and the runtime answered the id-null error with its own, forever, both
    processes spinning. Now the runtime refuses to send it, and everything goes idle."""
    with trio.fail_after(30):
        async with spawned(serve_command(), marked.env(),
                           str(tmp_path / "daemon.log")) as daemon:
            await daemon.call(request("init", "initialize", {"protocolVersion": "1.0"}))
            opened = await daemon.call(request("new", "session.new",
                                               {"workspace": str(tmp_path)}))
            session_id = opened["result"]["sessionId"]
            args = b'{"x":[' + b",".join([b"1E9"] * ONE_E9) + b"]}"
            frame = (b'{"jsonrpc":"2.0","id":"big","method":"debug.runTool","params":'
                     b'{"sessionId":"' + session_id.encode() + b'","tool":"Read","args":'
                     + args + b"}}")
            assert len(frame) < 8 * 2**20 < 4 * len(args)
            await daemon.stdin.send_all(frame + b"\n")
            answer = await daemon.answer_to("big", within=10)
            assert answer["error"]["code"] == -32602, answer
            host_pid = psutil.Process(daemon.process.pid).children()[0].pid
            before = (_cpu(daemon.process.pid), _cpu(host_pid))
            await trio.sleep(0.8)
            spent = (_cpu(daemon.process.pid) - before[0], _cpu(host_pid) - before[1])
            assert max(spent) < 0.15, spent  # an error ping-pong kept both near 0.3 s
            listed = await daemon.call(request("list", "session.list"), within=5)
            assert len(listed["result"]["sessions"]) == 1
