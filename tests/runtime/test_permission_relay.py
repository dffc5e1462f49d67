from __future__ import annotations

import pytest
import trio
import trio.testing

from protocol import ids
from protocol.errors import ErrorCode, RemoteError, RpcError
from protocol.messages.client import ClientPermissionRequestParams
from protocol.messages.host import (
    PermissionRequestParams,
    PermissionRequestResult,
    PermissionWithdrawnParams,
)
from protocol.methods import CLIENT_TO_RUNTIME, HOST_TO_RUNTIME, RUNTIME_TO_CLIENT, RUNTIME_TO_HOST
from runtime.daemon.permission_relay import PermissionRelay
from runtime.link import Endpoint, answers_later


async def test_a_withdrawal_that_overtakes_its_request_refuses_it() -> None:
    relay = PermissionRelay()
    relay.withdrawn(PermissionWithdrawnParams("s", "perm-1"))
    with pytest.raises(RpcError) as info:
        await relay.request(PermissionRequestParams("s", "perm-1", "c1", "Write", "{}"))
    assert info.value.code == ErrorCode.PERMISSION_WITHDRAWN
    assert relay.pending_calls() == set()


@pytest.mark.parametrize(("host_call_id", "turn_id", "call_id"), [
    ("t1.w1", "t1", "w1"),
    ("t3~task1.w2", "t3~task1", "w2"),  # a subagent's call
    ("t1.call.with.dots", "t1", "call.with.dots"),
    ("dbg-4", None, "dbg-4"),  # debug.runTool: no turn
    # a subagent run by a Task call whose own id has a dot (protocol.ids escapes it)
    (ids.host_call_id(ids.child_turn_id("t2", "fn.read"), "x.y"), "t2~fn%2Eread", "x.y"),
])
async def test_the_client_can_match_a_prompt_to_its_tool_call(
        host_call_id: str, turn_id: str | None, call_id: str) -> None:
    """The host names a call by its host id; the client is told the ids of the call's
    tool/call event, and the relay still knows the prompt by the host's id."""
    asked: list[ClientPermissionRequestParams] = []
    relay = PermissionRelay()

    async def on_permission(params: ClientPermissionRequestParams) -> PermissionRequestResult:
        asked.append(params)
        assert relay.pending_calls() == {host_call_id}  # what operators see
        return PermissionRequestResult("allow-once")

    daemon_stream, client_stream = trio.testing.memory_stream_pair()
    relay.client = Endpoint("client", daemon_stream, daemon_stream, incoming=CLIENT_TO_RUNTIME,
                            outgoing=RUNTIME_TO_CLIENT)
    client = Endpoint("daemon", client_stream, client_stream, incoming=RUNTIME_TO_CLIENT,
                      outgoing=CLIENT_TO_RUNTIME,
                      handlers={"permission.request": on_permission})
    async with trio.open_nursery() as nursery:
        await nursery.start(relay.client.run)
        await nursery.start(client.run)
        with trio.fail_after(5):
            answer = await relay.request(PermissionRequestParams(
                "s", "perm-1", host_call_id, "Write", '{"path":"a"}', "high"))
        nursery.cancel_scope.cancel()
    assert answer == PermissionRequestResult("allow-once")
    assert asked == [ClientPermissionRequestParams("s", "perm-1", turn_id, call_id, "Write",
                                                   '{"path":"a"}', "high")]
    assert relay.pending_calls() == set()


async def test_a_prompt_after_the_client_left_does_not_hold_the_host_links_reader(
        autojump_clock: trio.testing.MockClock) -> None:
    """The client link is closed; the host asks a permission: the host link reads on, so
    the withdrawal that follows reaches the prompt (and ends it)."""
    relay = PermissionRelay()
    gone_daemon, _gone_client = trio.testing.memory_stream_pair()
    relay.client = Endpoint("client", gone_daemon, gone_daemon, incoming=CLIENT_TO_RUNTIME,
                            outgoing=RUNTIME_TO_CLIENT)
    relay.client._on_closed()  # the client went away
    runtime_side, host_side = trio.testing.memory_stream_pair()
    runtime = Endpoint("host", runtime_side, runtime_side, incoming=HOST_TO_RUNTIME,
                       outgoing=RUNTIME_TO_HOST,
                       handlers={"permission.request": answers_later(relay.request)},
                       notification_handlers={"permission.withdrawn": relay.withdrawn})
    host = Endpoint("runtime", host_side, host_side, incoming=RUNTIME_TO_HOST,
                    outgoing=HOST_TO_RUNTIME)
    async with trio.open_nursery() as nursery:
        await nursery.start(runtime.run)
        await nursery.start(host.run)
        with trio.fail_after(5):
            asked = host.send_request("permission.request", PermissionRequestParams(
                "s", "perm-1", "t1.c1", "Write", "{}"))
            await trio.sleep(0.05)
            host.notify("permission.withdrawn", PermissionWithdrawnParams("s", "perm-1"))
            with pytest.raises(RemoteError) as info:
                await asked.result()
        nursery.cancel_scope.cancel()
    assert info.value.code == ErrorCode.PERMISSION_WITHDRAWN
