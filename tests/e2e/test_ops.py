"""``quiesce ops`` end to end against a live daemon."""

from __future__ import annotations

import json
import os
import pathlib
import stat
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
import trio

from protocol.messages.client import SessionEventParams
from protocol.messages.events import ToolCallEvent, ToolProgressEvent, TurnEnd
from protocol.messages.ops import OpsSession
from runtime.clients.daemon_client import serve_command, spawn_daemon
from runtime.clients.ops.client import OpsClient, connect
from tests.conftest import Marked
from tests.kit.daemon import Agent, agent_daemon, call, text
from tests.kit.waiters import wait_file
from tests.plugins.support import QUIET, new_plugin_session
from tests.support import alive


async def ops(marked: Marked, *args: str) -> tuple[int, object]:
    command = [sys.executable, "-m", "runtime", "ops", *args, "--json", "--timeout", "15"]
    with trio.fail_after(30):
        done = await trio.run_process(command, env=marked.env(), capture_stdout=True,
                                      capture_stderr=True, check=False)
    out = done.stdout.decode().strip()
    return done.returncode, json.loads(out.splitlines()[-1]) if out else None


async def test_ops_sees_and_stops_a_running_session(tmp_path: pathlib.Path,
                                                    marked: Marked) -> None:
    script = [[call("b1", "Bash", command="echo busy; sleep 60")]]
    async with agent_daemon(marked) as agent:
        info = agent.daemon.info
        assert info is not None
        socket = pathlib.Path(info.capabilities["ops"]["socket"])
        assert stat.S_IMODE(socket.stat().st_mode) == 0o600
        assert stat.S_IMODE(socket.parent.stat().st_mode) == 0o700
        session_id = await agent.new_session(tmp_path, script)
        async with trio.open_nursery() as nursery:
            prompts = []

            async def prompt() -> None:
                prompts.append(await agent.prompt("go"))

            nursery.start_soon(prompt)
            await agent.wait_for(lambda e: isinstance(e, ToolProgressEvent))

            code, listing = await ops(marked, "ls")
            assert code == 0, listing
            assert isinstance(listing, list) and listing[0]["client"]["command"] == "serve"
            assert listing[0]["client"]["parentPid"] == os.getpid()  # this test started it
            assert listing[0]["dataDir"] == str(marked.data_dir)
            text = json.dumps(listing)
            assert session_id in text and '"b1"' in text and '"running"' in text

            code, show = await ops(marked, "show", session_id)
            assert code == 0 and '"process"' in json.dumps(show)

            code, refused = await ops(marked, "force", session_id, "b1")
            assert code == 1 and "stop" in json.dumps(refused)

            code, aborted = await ops(marked, "abort", session_id)
            assert code == 0, aborted
            assert '"operator"' in json.dumps(aborted)
        assert prompts[0].stop_reason == "cancelled"
        end = [e for e in agent.log() if isinstance(e, TurnEnd)][-1]
        assert end.end.reason is not None and end.end.reason.kind == "operator"
        agent.assert_balanced()

        code, stats = await ops(marked, "stats")
        assert code == 0
        assert find_key(stats, "stops") == 1
        assert find_key(stats, "stopLatencyMsMedian") is not None
        assert find_key(stats, "processIsolation") == "cgroup"  # this machine: root, v2
        # Which per-call limits this host enforces, and how (issue 31): each is named.
        limits = find_key(stats, "callLimits")
        assert isinstance(limits, dict) and set(limits) == {"processes", "memory"}, stats
        assert "MiB per" in limits["memory"], limits
    # The daemon is gone: its socket and pid file with it.
    assert not socket.exists()
    assert not list(socket.parent.glob("*.json"))


def find_key(data: object, key: str) -> object:
    if isinstance(data, dict):
        if key in data:
            return data[key]
        for value in data.values():
            found = find_key(value, key)
            if found is not None:
                return found
    if isinstance(data, list):
        for value in data:
            found = find_key(value, key)
            if found is not None:
                return found
    return None


async def test_a_slow_stop_is_flagged_stuck(tmp_path: pathlib.Path, marked: Marked) -> None:
    # A TERM-ignoring tree holds its stop for the host's kill grace: 8 s here, so the ops
    # CLI (a Python start-up, slow on a loaded machine) sees the stop still waiting.
    script = [[call("b1", "Bash", command="trap '' TERM; echo hold; sleep 60")]]
    config = tmp_path / "config.toml"
    config.write_text("[host.tools]\nkill_grace = 8\n")
    async with agent_daemon(marked, extra_args=("--stuck-after", "0.3", "--config",
                                                str(config))) as agent:
        session_id = await agent.new_session(tmp_path, script)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(agent.prompt, "go")
            await agent.wait_for(lambda e: isinstance(e, ToolProgressEvent))
            nursery.start_soon(agent.abort)
            await trio.sleep(0.8)
            code, show = await ops(marked, "show", session_id)
            assert code == 0
            assert find_key(show, "stuck") is True
            assert find_key(show, "state") in {"aborting", "draining"}
            # ops stats counts the stop that has not settled, and that it is stuck.
            code, stats = await ops(marked, "stats")
            assert code == 0 and isinstance(stats, dict), stats
            assert (stats["stopsSettling"], stats["stopsStuck"]) == (1, 1), stats


async def test_tail_stuck_and_force_of_a_stuck_plugin_call(tmp_path: pathlib.Path,
                                                           marked: Marked) -> None:
    # A plugin call that ignores its cancel: the operator's stop waits for it. It is seen
    # waiting but not stuck, then stuck past the threshold (and logged so); `ops tail`
    # shows it all happen; `ops force` ends it (ABORTED, forced; its server killed).
    script = [[call("w1", "mcp__tools__wait_stubbornly")], [text("never")]]
    log_path = tmp_path / "daemon.log"
    threshold = 3.0
    async with logged_daemon(marked, log_path, "--stuck-after", str(threshold)) as agent:
        await new_plugin_session(agent, tmp_path, script)
        session_id = agent.session_id
        tail_path = tmp_path / "tail.jsonl"
        with open(tail_path, "wb") as tail_out:
            tail = await trio.lowlevel.open_process(
                [sys.executable, "-m", "runtime", "ops", "tail", session_id, "--json"],
                stdout=tail_out, stderr=subprocess.DEVNULL, env=marked.env())
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(agent.prompt, "go")
                server_pid = int(await wait_file(tmp_path / "started-stubbornly"))
                with trio.fail_after(10):  # the tail is connected: progress reaches it
                    while not tail_events(tail_path, "tool/progress"):
                        await trio.sleep(0.05)
                code, show = await ops(marked, "show", session_id)
                assert code == 0 and find_key(show, "class") == "plugin", show
                assert call_state(show) == "running", show
                assert find_key(show, "stopWaitingS") is None and not find_key(show, "stuck")
                aborted: list[Any] = []

                async def operator_abort() -> None:
                    aborted.append(await ops(marked, "abort", session_id))

                nursery.start_soon(operator_abort)
                # In process, not through the CLI: a loaded machine must not blur the timing.
                info = agent.daemon.info
                assert info is not None
                async with connect(info.capabilities["ops"]["socket"]) as client:
                    with trio.fail_after(20):  # the CLI's start-up: not what is measured
                        while (seen := await session_of(client, session_id)) \
                                .stop_waiting_s is None:
                            await trio.sleep(0.02)
                    assert seen.stop_waiting_s < threshold and not seen.stuck, seen
                    assert seen.calls[0].state in {"aborting", "draining"}, seen
                    assert stuck_lines(log_path, session_id) == []
                    await trio.sleep(threshold + 0.3 - seen.stop_waiting_s)
                    seen = await session_of(client, session_id)
                    assert seen.stuck, seen
                assert not aborted  # the plugin call is awaited, so the stop is too
                code, show = await ops(marked, "show", session_id)
                assert code == 0 and find_key(show, "stuck") is True, show
                lines = stuck_lines(log_path, session_id)
                assert lines and all("t1" in line["msg"] for line in lines), lines
                # No call named: the one the stop waits on is named, then forced.
                code, forced = await ops(marked, "force", session_id)
                assert code == 0 and find_key(forced, "forced") is True, forced
                assert find_key(forced, "callId") == "w1", forced
            with trio.fail_after(10):
                while not tail_events(tail_path, "turn/end"):
                    await trio.sleep(0.05)
        finally:
            tail.kill()
            with trio.CancelScope(shield=True):
                await tail.wait()
        assert aborted[0][0] == 0, aborted
        (result,) = [e for e in tail_events(tail_path, "tool/result") if e["callId"] == "w1"]
        assert result["code"] == "ABORTED" and result["details"]["forced"] is True, result
        (end,) = tail_events(tail_path, "turn/end")
        assert end["end"]["kind"] == "aborted" and end["end"]["reason"]["kind"] == "operator"
        assert not alive(server_pid)
        agent.assert_balanced()
        async with connect(info.capabilities["ops"]["socket"]) as client:
            seen = await session_of(client, session_id)
        assert not seen.stuck and seen.phase == "idle" and seen.calls == (), seen


@pytest.mark.skipif(os.getuid() != 0, reason="needs root to connect as another user")
async def test_a_live_daemon_refuses_another_user(tmp_path: pathlib.Path,
                                                  marked: Marked) -> None:
    async with agent_daemon(marked) as agent:
        info = agent.daemon.info
        assert info is not None
        socket = pathlib.Path(info.capabilities["ops"]["socket"])
        assert await connect_as_nobody(socket) == "refused: PermissionError"  # 0600, 0700
        # Let uid 65534 reach the socket: the peer-credential check refuses it still.
        for path in (marked.run_dir, socket.parent):
            os.chmod(path, 0o711)
        os.chmod(socket, 0o666)
        assert (await connect_as_nobody(socket)).startswith("refused: ")
        os.chmod(socket, 0o600)
        for path in (marked.run_dir, socket.parent):
            os.chmod(path, 0o700)
        code, listing = await ops(marked, "ls")  # its own user still gets in
        assert code == 0, listing


NOBODY_CONNECTS = """
import socket, sys
s = socket.socket(socket.AF_UNIX)
s.settimeout(5)
try:
    s.connect(sys.argv[1])
    s.sendall(b'{"jsonrpc":"2.0","id":1,"method":"initialize",'
              b'"params":{"protocolVersion":"1.0"}}\\n')
    answer = s.recv(4096)
except OSError as exc:
    print("refused:", type(exc).__name__)
else:
    print("answered" if answer else "refused: closed")
"""


async def connect_as_nobody(socket: pathlib.Path) -> str:
    with trio.fail_after(10):
        done = await trio.run_process(["/usr/bin/python3", "-c", NOBODY_CONNECTS, str(socket)],
                                      user=65534, cwd="/", capture_stdout=True)
    return done.stdout.decode().strip()


@asynccontextmanager
async def logged_daemon(marked: Marked, log_path: pathlib.Path,
                        *extra_args: str) -> AsyncIterator[Agent]:
    """A daemon whose log (stderr) goes to ``log_path``."""
    holder: list[Agent] = []

    def on_event(params: SessionEventParams) -> None:
        holder[0].on_event(params)

    with open(log_path, "wb") as log:
        async with spawn_daemon(serve_command(*extra_args), env=marked.env(**QUIET),
                                stderr=log, notification_handlers={"session.event": on_event},
                                ) as daemon:
            await daemon.initialize()
            holder.append(Agent(daemon, marked.data_dir))
            yield holder[0]


async def session_of(client: OpsClient, session_id: str) -> OpsSession:
    (session,) = [s for s in (await client.sessions()).sessions if s.session_id == session_id]
    return session


def call_state(show: object) -> str:
    """The state of the one call listed (``running``, the default, is left out)."""
    calls = find_key(show, "calls")
    assert isinstance(calls, list) and len(calls) == 1, show
    return str(calls[0].get("state", "running"))


def stuck_lines(log_path: pathlib.Path, session_id: str) -> list[dict[str, Any]]:
    lines = [json.loads(line) for line in log_path.read_text().splitlines() if line]
    return [line for line in lines if line["level"] == "warning" and "stuck" in line["msg"]
            and session_id in line["msg"]]


def tail_events(path: pathlib.Path, kind: str) -> list[dict[str, Any]]:
    events = []
    for line in path.read_text().splitlines():
        try:
            event = json.loads(line)["event"]
        except ValueError:
            continue  # a line still being written
        if event["kind"] == kind:
            events.append(event)
    return events


async def test_tables_show_a_permission_pending_call(tmp_path: pathlib.Path,
                                                     marked: Marked) -> None:
    # The human-readable tables, from a live daemon: a Write waiting for a permission
    # prompt nobody answers; the operator's stop ends it before its body ran.
    script = [[call("w1", "Write", path="never.txt", content="x")]]
    async with agent_daemon(marked) as agent:
        session_id = await agent.new_session(tmp_path, script, mode="ask")
        async with trio.open_nursery() as nursery:
            nursery.start_soon(agent.prompt, "go")
            with trio.fail_after(15):
                while not agent.permission_requests:
                    await agent.changed.wait()
            listing = await ops_text(marked, "ls")
            assert session_id in listing and "running" in listing, listing
            shown = await ops_text(marked, "show", session_id)
            (row,) = [line for line in shown.splitlines() if line.startswith("w1 ")]
            assert row.split()[1:4] == ["Write", "mutating", "permission-pending"], shown
            aborted = await ops_text(marked, "abort", session_id)
            assert "ABORTED_BEFORE_DISPATCH" in aborted and "operator" in aborted, aborted
        assert not (tmp_path / "never.txt").exists()
        agent.assert_balanced()


async def ops_text(marked: Marked, *args: str) -> str:
    command = [sys.executable, "-m", "runtime", "ops", *args, "--timeout", "15"]
    with trio.fail_after(30):
        done = await trio.run_process(command, env=marked.env(), capture_stdout=True,
                                      capture_stderr=True, check=False)
    assert done.returncode == 0, done.stderr.decode()
    return done.stdout.decode()
async def test_a_call_the_scheduler_holds_back_is_queued(tmp_path: pathlib.Path,
                                                         marked: Marked) -> None:
    # Bash is a barrier: the Write after it waits in the scheduler, listed `queued`; the
    # operator's stop ends it before dispatch.
    script = [[call("b1", "Bash", command="echo busy; sleep 60"),
               call("w1", "Write", path="never.txt", content="x")]]
    async with agent_daemon(marked) as agent:
        session_id = await agent.new_session(tmp_path, script)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(agent.prompt, "go")
            await agent.wait_for(lambda e: isinstance(e, ToolProgressEvent))
            code, show = await ops(marked, "show", session_id)
            calls = find_key(show, "calls")
            assert isinstance(calls, list), show
            states = {c["callId"]: (c["class"], c.get("state", "running")) for c in calls}
            assert states == {"b1": ("process", "running"), "w1": ("mutating", "queued")}, show
            code, aborted = await ops(marked, "abort", session_id)
            assert code == 0, aborted
        turn_id = find_key(aborted, "turnId")
        assert isinstance(turn_id, str), aborted
        assert agent.results(turn_id)["w1"].code == "ABORTED_BEFORE_DISPATCH"
        code, show = await ops(marked, "show", session_id)
        assert not find_key(show, "calls"), show
        assert not (tmp_path / "never.txt").exists()


async def test_a_call_waiting_in_the_hosts_admission_queue_is_queued(
        tmp_path: pathlib.Path, marked: Marked) -> None:
    # One process slot at the host: session A's Bash takes it, session B's Bash waits in
    # the host's admission queue (the runtime has sent it), listed `queued`; the
    # operator's stop ends it before its body ran.
    config = tmp_path / "config.toml"
    config.write_text("[host.admission]\nper_class = { process = 1 }\n")
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    async with agent_daemon(marked, extra_args=("--config", str(config))) as agent:
        info = agent.daemon.info
        assert info is not None
        a_id = await agent.new_session(tmp_path / "a", [[
            call("a1", "Bash", command="echo busy; sleep 60")]])
        second = Agent(agent.daemon, marked.data_dir, marked.mark)
        b_id = await second.new_session(tmp_path / "b", [[
            call("b1", "Bash", command="touch never.txt")]])
        async with trio.open_nursery() as nursery:
            nursery.start_soon(agent.prompt, "go")
            await agent.wait_for(lambda e: isinstance(e, ToolProgressEvent))
            nursery.start_soon(second.prompt, "go")
            await agent.wait_for(lambda e: isinstance(e, ToolCallEvent) and e.call_id == "b1")
            async with connect(info.capabilities["ops"]["socket"]) as client:
                with trio.fail_after(10):  # until the host has registered b1
                    while [c.state for c in (await session_of(client, b_id)).calls] \
                            != ["queued"]:
                        await trio.sleep(0.05)
            code, show = await ops(marked, "show", b_id)
            assert code == 0 and call_state(show) == "queued", show
            code, show = await ops(marked, "show", a_id)
            assert code == 0 and call_state(show) == "running", show

            code, aborted = await ops(marked, "abort", b_id)
            assert code == 0, aborted
            turn_id = find_key(aborted, "turnId")
            assert isinstance(turn_id, str), aborted
            assert second.results(turn_id)["b1"].code == "ABORTED_BEFORE_DISPATCH"
            code, show = await ops(marked, "show", a_id)
            assert code == 0 and call_state(show) == "running", show
            code, aborted = await ops(marked, "abort", a_id)
            assert code == 0, aborted
        assert not (tmp_path / "b" / "never.txt").exists()
        agent.assert_balanced()
        second.assert_balanced()
        await agent.check_no_tool_process(within=5)
