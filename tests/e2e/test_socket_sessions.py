"""Sessions on the socket link (issue 27): a session outlives its client, attach replays
then streams, a permission prompt goes to every attached client (first answer wins), and
a stop a UI can show (``stop/waiting``) and force (``agent.force``). Real daemon, real
host, real WebSocket clients."""

from __future__ import annotations

import pathlib
from typing import Any

import pytest
import trio

from tests.conftest import Marked
from tests.kit.socketclient import client_of, listening_daemon, run_stubborn, stubborn_session
from tests.support import alive

pytestmark = pytest.mark.timeout(120)


def bash(call_id: str, command: str) -> dict[str, Any]:
    return {"toolCall": {"id": call_id, "name": "Bash", "args": {"command": command}}}


def is_event(kind: str, **fields: Any) -> Any:
    def match(message: Any) -> bool:
        if message.get("method") != "session.event":
            return False
        event = message["params"]["event"]
        return event["kind"] == kind and all(event.get(k) == v for k, v in fields.items())
    return match


def kinds(messages: list[Any]) -> list[str]:
    return [m["params"]["event"]["kind"] for m in messages
            if m.get("method") == "session.event"]


async def test_a_session_outlives_its_client_and_attach_replays_it(
        marked: Marked, tmp_path: pathlib.Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    script = [[{"text": "working"}, bash("b1", "sleep 1.5; echo done > out.txt; echo ok")],
              [{"text": "finished"}]]
    async with listening_daemon(marked.env(), "ws://127.0.0.1:0", tmp=tmp_path) as daemon:
        first = await client_of(daemon.port, daemon.token)
        new = await first.call("session.new", {
            "workspace": str(workspace), "permissionMode": "auto",
            "provider": {"kind": "scripted", "script": script}})
        sid = new["result"]["sessionId"]
        await first.send({"jsonrpc": "2.0", "id": 77, "method": "agent.prompt",
                          "params": {"sessionId": sid, "text": "go"}})
        await first.next_matching(is_event("tool/started", callId="b1"))
        await first.aclose()  # the window reloads mid-turn

        second = await client_of(daemon.port, daemon.token)
        attached = await second.call("session.attach", {"sessionId": sid})
        result = attached["result"]
        assert result["running"] is True and result["lastSeq"] >= 0
        # The replay: everything durable so far, then live events to the turn's end.
        end = await second.next_matching(is_event("turn/end"), within=30)
        assert end["params"]["event"]["end"]["kind"] == "completed"
        seen = [*kinds(second.seen), "turn/end"]
        assert seen.index("turn/start") < seen.index("tool/call") < seen.index("tool/result")
        assert (workspace / "out.txt").read_text() == "done\n"  # the turn ran on
        # A third client attaching after a seq gets only what follows it.
        third = await client_of(daemon.port, daemon.token)
        tail = await third.call("session.attach", {"sessionId": sid,
                                                   "afterSeq": result["lastSeq"]})
        assert tail["result"]["running"] is False
        replayed = [m["params"]["event"] for m in third.seen
                    if m.get("method") == "session.event"]
        more = []
        with trio.move_on_after(0.5):
            while True:
                more.append((await third.receive())["params"]["event"])
        replayed += more
        assert replayed and all(e["seq"] > result["lastSeq"] for e in replayed)
        assert replayed[-1]["kind"] == "turn/end"
        # Not loaded: refused.
        missing = await third.call("session.attach", {"sessionId": "s-" + "0" * 32})
        assert "error" in missing
        await second.aclose()
        await third.aclose()


async def test_two_clients_one_permission_prompt(marked: Marked, tmp_path: pathlib.Path
                                                 ) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    script = [[bash("b1", "echo allowed > allowed.txt")], [{"text": "done"}]]
    async with listening_daemon(marked.env(), "ws://127.0.0.1:0", tmp=tmp_path) as daemon:
        one = await client_of(daemon.port, daemon.token)
        two = await client_of(daemon.port, daemon.token)
        new = await one.call("session.new", {
            "workspace": str(workspace), "permissionMode": "ask",
            "provider": {"kind": "scripted", "script": script}})
        sid = new["result"]["sessionId"]
        assert "result" in await two.call("session.attach", {"sessionId": sid})
        await one.send({"jsonrpc": "2.0", "id": 500, "method": "agent.prompt",
                        "params": {"sessionId": sid, "text": "go"}})

        def is_prompt(message: Any) -> bool:
            return message.get("method") == "permission.request"

        asked_one = await one.next_matching(is_prompt)
        asked_two = await two.next_matching(is_prompt)
        assert asked_one["params"] == asked_two["params"]
        assert asked_one["params"]["callId"] == "b1"
        # The second window answers first: it wins, the first sees the prompt withdrawn.
        await two.send({"jsonrpc": "2.0", "id": asked_two["id"],
                        "result": {"decision": "allow-once"}})
        withdrawn = await one.next_matching(
            lambda m: m.get("method") == "permission.withdrawn")
        assert withdrawn["params"]["requestId"] == asked_one["params"]["requestId"]
        # Its late answer changes nothing.
        await one.send({"jsonrpc": "2.0", "id": asked_one["id"],
                        "result": {"decision": "deny"}})
        answer = await one.answer(500, within=30)
        assert answer["result"]["stopReason"] == "end_turn"
        result = await two.next_matching(is_event("tool/result", callId="b1"))
        assert result["params"]["event"]["isError"] is False
        assert (workspace / "allowed.txt").read_text() == "allowed\n"
        # A session.load of the loaded session replays it to that client only.
        for quiet in (one, two):  # whatever of the turn is still unread
            with trio.move_on_after(0.3):
                while True:
                    await quiet.receive()
            quiet.seen.clear()
            quiet.messages.clear()
        loaded = await two.call("session.load", {"sessionId": sid})
        replayed = kinds(two.seen)
        assert loaded["result"]["events"] == len(replayed) and "turn/end" in replayed
        with trio.move_on_after(0.5):
            extra = await one.receive()
            raise AssertionError(f"the other client was sent the replay: {extra}")
        await one.aclose()
        await two.aclose()


async def test_stop_waiting_and_agent_force_on_a_cancel_ignoring_plugin(
        marked: Marked, tmp_path: pathlib.Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    env = marked.env(QUIESCE_PLUGIN_QUIET_WINDOW="0.5")
    async with listening_daemon(env, "ws://127.0.0.1:0", tmp=tmp_path) as daemon:
        client = await client_of(daemon.port, daemon.token)
        sid = await stubborn_session(client, workspace)
        server_pid = await run_stubborn(client, sid, workspace, request_id=600)
        await client.send({"jsonrpc": "2.0", "id": 601, "method": "agent.abort",
                           "params": {"sessionId": sid}})
        waiting = await client.next_matching(
            lambda m: is_event("stop/waiting")(m) and m["params"]["event"]["calls"])
        (call,) = waiting["params"]["event"]["calls"]
        assert call["callId"] == "w1" and call["tool"] == "mcp__tools__wait_stubbornly"
        assert call["class"] == "plugin" and call["state"] in {"aborting", "draining"}
        assert call["since"] > 0
        # The stop waits (the plugin ignores the cancel): no answer to the abort yet.
        with trio.move_on_after(1.5):
            await client.next_matching(lambda m: m.get("id") == 601)
            raise AssertionError("agent.abort answered before the call settled")
        assert alive(server_pid)
        # A reloaded window sees what the stop waits on when it attaches.
        other = await client_of(daemon.port, daemon.token)
        attached = await other.call("session.attach", {"sessionId": sid})
        assert attached["result"]["stopping"] is True
        shown = await other.next_matching(is_event("stop/waiting"))
        assert [c["callId"] for c in shown["params"]["event"]["calls"]] == ["w1"]
        forced = await other.call("agent.force", {"sessionId": sid})
        assert forced["result"]["calls"] == [{"callId": "w1", "forced": True,
                                              "detail": forced["result"]["calls"][0]["detail"]}]
        stop = await client.answer(601, within=30)
        assert stop["result"]["outcome"] == "aborted"
        result = await client.next_matching(is_event("tool/result", callId="w1"))
        event = result["params"]["event"]
        assert event["code"] == "ABORTED" and event["details"]["forced"] is True
        cleared = await client.next_matching(
            lambda m: is_event("stop/waiting")(m) and not m["params"]["event"]["calls"])
        assert cleared["params"]["event"]["calls"] == []
        assert not alive(server_pid)
        # Nothing waits now: agent.force says so.
        again = await client.call("agent.force", {"sessionId": sid})
        assert again["error"]["code"] == -32001 or "error" in again
        await client.aclose()
        await other.aclose()


async def test_session_list_has_what_a_picker_shows(marked: Marked, tmp_path: pathlib.Path
                                                    ) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    long_line = "Refactor " + "the parser " * 20
    script = [[bash("b1", "sleep 1")], [{"text": "one"}], [{"text": "two"}]]
    async with listening_daemon(marked.env(), "ws://127.0.0.1:0", tmp=tmp_path) as daemon:
        client = await client_of(daemon.port, daemon.token)
        new = await client.call("session.new", {
            "workspace": str(workspace), "permissionMode": "auto",
            "provider": {"kind": "scripted", "script": script}})
        sid = new["result"]["sessionId"]
        (fresh,) = (await client.call("session.list"))["result"]["sessions"]
        assert "title" not in fresh and "turns" not in fresh and "running" not in fresh
        await client.send({"jsonrpc": "2.0", "id": 700, "method": "agent.prompt",
                           "params": {"sessionId": sid, "text": f"\n  {long_line}\nmore"}})
        await client.next_matching(is_event("tool/started", callId="b1"))
        (busy,) = (await client.call("session.list"))["result"]["sessions"]
        assert busy["running"] is True and busy["turns"] == 1
        assert busy["title"].startswith("Refactor the parser") and busy["title"].endswith("…")
        assert len(busy["title"]) <= 80
        await client.answer(700, within=30)
        second = await client.call("agent.prompt", {"sessionId": sid, "text": "next one"})
        assert "result" in second
        (idle,) = (await client.call("session.list"))["result"]["sessions"]
        assert idle["turns"] == 2 and "running" not in idle and idle["title"] == busy["title"]
        assert idle["lastActivity"] >= idle["createdAt"] > 0
        assert "result" in await client.call("session.close", {"sessionId": sid})
        (closed,) = (await client.call("session.list"))["result"]["sessions"]
        assert closed["loaded"] is False and closed["turns"] == 2
        assert closed["title"] == busy["title"]
        await client.aclose()
