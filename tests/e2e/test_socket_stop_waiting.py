"""``stop/waiting`` on a socket link: the same announcements, in the same order, to every
client following the session, pushed by the session as its stop's waiting list changes
(no poller), ending with an empty list before the turn's end. Real daemon, real host,
real WebSocket clients, a plugin call that ignores its cancel."""

from __future__ import annotations

import pathlib
from typing import Any

import pytest
import trio

from tests.conftest import Marked
from tests.kit.socketclient import (
    WsClient,
    client_of,
    listening_daemon,
    run_stubborn,
    stubborn_session,
)

pytestmark = pytest.mark.timeout(120)
ANNOUNCED = {"tool/progress", "tool/started", "tool/abort", "assistant/delta",
             "stop/waiting"}


async def seen(client: WsClient, predicate: Any) -> None:
    """Until a message for which ``predicate`` holds was received (kept in ``seen``)."""
    with trio.fail_after(30):
        while not any(predicate(m) for m in client.seen):
            client.seen.append(await client.receive(30))


async def events_until_turn_end(client: WsClient) -> list[dict[str, Any]]:
    """This client's session events in the order received, through ``turn/end``."""
    out = [m["params"]["event"] for m in client.seen if m.get("method") == "session.event"]
    client.seen = [m for m in client.seen if m.get("method") != "session.event"]
    while not out or out[-1]["kind"] != "turn/end":
        message = await client.receive(30)
        if message.get("method") == "session.event":
            out.append(message["params"]["event"])
        else:
            client.seen.append(message)
    return out


def waiting_lists(events: list[dict[str, Any]]) -> list[list[tuple[str, str]]]:
    return [[(c["callId"], c["state"]) for c in e["calls"]] for e in events
            if e["kind"] == "stop/waiting"]


async def test_stop_waiting_on_a_socket_link_to_every_follower_in_order(
        marked: Marked, tmp_path: pathlib.Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    env = marked.env(QUIESCE_PLUGIN_QUIET_WINDOW="0.5")
    async with listening_daemon(env, "ws://127.0.0.1:0", tmp=tmp_path) as daemon:
        one = await client_of(daemon.port, daemon.token)
        sid = await stubborn_session(one, workspace)
        two = await client_of(daemon.port, daemon.token)
        assert "result" in await two.call("session.attach", {"sessionId": sid})
        await run_stubborn(one, sid, workspace, request_id=900)
        await one.send({"jsonrpc": "2.0", "id": 901, "method": "agent.abort",
                        "params": {"sessionId": sid}})
        await seen(two, lambda m: m.get("method") == "session.event"
                   and m["params"]["event"]["kind"] == "stop/waiting"
                   and m["params"]["event"]["calls"]
                   and m["params"]["event"]["calls"][0]["state"] == "draining")
        with trio.move_on_after(1.0):  # the plugin ignores the cancel: the stop waits
            await one.answer(901)
            raise AssertionError("agent.abort answered before the call settled")
        forced = await two.call("agent.force", {"sessionId": sid, "callId": "w1"})
        assert forced["result"]["calls"][0]["forced"] is True
        heard_one = await events_until_turn_end(one)
        heard_two = await events_until_turn_end(two)
        assert (await one.answer(901, within=30))["result"]["outcome"] == "aborted"
        for heard in (heard_one, heard_two):
            assert waiting_lists(heard) == [[("w1", "aborting")], [("w1", "draining")], []]
            kinds = [e["kind"] for e in heard]
            waits = [i for i, k in enumerate(kinds) if k == "stop/waiting"]
            assert waits[0] < kinds.index("tool/abort") < waits[1]
            assert waits[2] < kinds.index("tool/result") < kinds.index("turn/end")
            for i in waits:  # the seq of the last durable event before it
                durable = [e for e in heard[:i] if e["kind"] not in ANNOUNCED]
                assert heard[i]["seq"] == durable[-1]["seq"]
        # Both heard the same announcements (the second one attached, so got no replay).
        waits_one = [e for e in heard_one if e["kind"] == "stop/waiting"]
        assert waits_one == [e for e in heard_two if e["kind"] == "stop/waiting"]
        await one.aclose()
        await two.aclose()
