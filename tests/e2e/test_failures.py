"""Failures that must still end in an answered stop, a balanced log and no process."""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import signal
import sys

import pytest
import trio

from protocol.errors import ErrorCode, RemoteError
from protocol.messages.client import OpenAIProviderConfig, SessionLoadParams, SessionNewParams
from protocol.messages.common import Empty
from protocol.messages.events import ToolProgressEvent, TurnEnd, TurnStart
from tests.conftest import Marked
from tests.kit.daemon import agent_daemon, call, text
from tests.providers.fakeserver import FakeServer, Reply
from tests.support import command_line, marked_processes


async def test_a_model_answer_the_scheduler_refuses_ends_the_turn_not_the_daemon(
        tmp_path: pathlib.Path, marked: Marked) -> None:
    script = [[call("same", "Read", path="a"), call("same", "Glob", pattern="*")],
              [text("still serving")]]
    async with agent_daemon(marked) as agent:
        await agent.new_session(tmp_path, script)
        with trio.fail_after(15):
            first = await agent.prompt("go")
            second = await agent.prompt("again")
        assert first.stop_reason == "error" and second.stop_reason == "end_turn"
        end = agent.turn_end_on_disk(first.turn_id or "")
        assert end is not None and end.end.kind == "error" and "unique" in (end.end.error or "")
        agent.assert_balanced()
    assert agent.daemon.process.returncode == 0


async def test_stop_while_the_model_server_has_not_answered(tmp_path: pathlib.Path,
                                                            marked: Marked) -> None:
    server = FakeServer()
    server.queue(Reply(stall=True))
    async with trio.open_nursery() as nursery:
        await server.start(nursery)
        async with agent_daemon(marked, env_extra={"QUIESCE_TEST_KEY": "k"}) as agent:
            result = await agent.daemon.request("session.new", SessionNewParams(
                str(tmp_path), "auto", OpenAIProviderConfig(
                    base_url=server.base_url, model="m", api_key_env="QUIESCE_TEST_KEY")))
            agent.session_id = result.session_id
            async with trio.open_nursery() as turn:
                turn.start_soon(agent.prompt, "hi")
                with trio.fail_after(10):
                    await server.received.wait()
                with trio.fail_after(5):
                    aborted = await agent.abort()
            assert aborted.outcome == "aborted"
            with trio.fail_after(5):
                await server.gone.wait()
        nursery.cancel_scope.cancel()


async def test_a_session_whose_workspace_vanished_still_answers(tmp_path: pathlib.Path,
                                                                marked: Marked) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    async with agent_daemon(marked) as first:
        session_id = await first.new_session(workspace, [[text("one")], [text("two")]])
        await first.prompt("hi")
    shutil.rmtree(workspace)
    async with agent_daemon(marked) as second:
        second.session_id = session_id
        with pytest.raises(RemoteError) as info:
            await second.daemon.request("session.load", SessionLoadParams(session_id))
        assert info.value.code == ErrorCode.INVALID_PARAMS
        again = await second.daemon.request("session.load", SessionLoadParams(session_id))
        assert again.session_id == session_id
        with trio.fail_after(10):
            answer = await second.prompt("are you there?")
        assert answer.stop_reason in {"end_turn", "error"}


async def test_restart_host_ends_calls_host_crashed(tmp_path: pathlib.Path,
                                                    marked: Marked) -> None:
    script = [[call("b1", "Bash", command="echo up; sleep 60 & sleep 60")]]
    async with agent_daemon(marked) as agent:
        await agent.new_session(tmp_path, script)
        async with trio.open_nursery() as nursery:
            prompts = agent.prompt_soon(nursery, "go")
            await agent.wait_for(lambda e: isinstance(e, ToolProgressEvent))
            command = [sys.executable, "-m", "runtime", "ops", "restart-host", "--json"]
            with trio.fail_after(30):
                done = await trio.run_process(command, env=marked.env(), capture_stdout=True,
                                              capture_stderr=True, check=False)
            assert done.returncode == 0, done.stderr
        assert prompts[0].stop_reason == "error"
        result = agent.results(prompts[0].turn_id or "")["b1"]
        assert result.code == "HOST_CRASHED" and result.details["hostRestarted"] == "operator"
        end = agent.turn_end_on_disk(prompts[0].turn_id or "")
        assert end is not None  # said as what it was, not as a crash
        assert end.end.error == "an operator restarted the host under b1"
        agent.assert_balanced()
        stats_command = [sys.executable, "-m", "runtime", "ops", "stats", "--json"]
        with trio.fail_after(30):
            stats = await trio.run_process(stats_command, env=marked.env(),
                                           capture_stdout=True, check=True)
        figures = json.loads(stats.stdout.decode().strip().splitlines()[-1])
        assert figures["hostRestarts"] == 1
        assert figures.get("hostCrashes", 0) == 0  # zero is omitted on the wire


async def test_sighup_to_runtime_and_host_leaves_nothing(tmp_path: pathlib.Path,
                                                         marked: Marked) -> None:
    script = [[call("b1", "Bash", command="echo up; (setsid sleep 60 &); sleep 60")]]
    async with agent_daemon(marked) as agent:
        await agent.new_session(tmp_path, script)
        assert agent.daemon.info is not None
        host_pid = int(agent.daemon.info.capabilities["host"]["pid"])
        async with trio.open_nursery() as nursery:
            async def prompt() -> None:
                try:
                    await agent.prompt("go")
                except Exception:  # noqa: BLE001 - the daemon may go before answering
                    return

            nursery.start_soon(prompt)
            await agent.wait_for(lambda e: isinstance(e, ToolProgressEvent))
            # What a closing terminal does to its process group.
            os.kill(host_pid, signal.SIGHUP)
            agent.daemon.process.send_signal(signal.SIGHUP)
            with trio.fail_after(20):
                code = await agent.daemon.process.wait()
        assert code == 0
    with trio.fail_after(10):
        while [p for p in marked_processes(marked.mark) if "sleep" in command_line(p)]:
            await trio.sleep(0.05)
    ends = [e for e in agent.log() if isinstance(e, TurnEnd)]
    assert ends and ends[-1].end.kind in {"aborted", "error"}
    agent.assert_balanced()


async def test_sigterm_during_permission_prompt_is_a_stop_not_a_denial(
        tmp_path: pathlib.Path, marked: Marked) -> None:
    # The client link closes under the prompt as the daemon shuts down: the call was
    # stopped before it ran, and the user never said no.
    script = [[call("w1", "Write", path="w.txt", content="x")]]
    async with agent_daemon(marked) as agent:
        await agent.new_session(tmp_path, script, mode="ask")
        async with trio.open_nursery() as nursery:
            async def prompt() -> None:
                try:
                    await agent.prompt("go")
                except Exception:  # noqa: BLE001 - the daemon may go before answering
                    return

            nursery.start_soon(prompt)
            with trio.fail_after(10):
                while not agent.permission_requests:
                    await trio.sleep(0.02)
            agent.daemon.process.send_signal(signal.SIGTERM)
            with trio.fail_after(20):
                code = await agent.daemon.process.wait()
        assert code == 0
    (end,) = [e for e in agent.log() if isinstance(e, TurnEnd)]
    assert end.end.kind == "aborted"
    assert agent.results(end.turn_id)["w1"].code == "ABORTED_BEFORE_DISPATCH"
    assert not (tmp_path / "w.txt").exists()
    agent.assert_balanced()


async def test_two_daemons_never_write_one_session(tmp_path: pathlib.Path,
                                                   marked: Marked) -> None:
    script = [[text("busy"), {"sleepMs": 60_000}]]
    async with agent_daemon(marked) as a, agent_daemon(marked) as b:
        session_id = await a.new_session(tmp_path, script)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(a.prompt, "go")
            await a.wait_for(lambda e: isinstance(e, TurnStart))
            listed = await b.daemon.request("session.list", Empty())
            (info,) = listed.sessions
            assert info.session_id == session_id and not info.interrupted
            with pytest.raises(RemoteError) as refused:
                await b.daemon.request("session.load", SessionLoadParams(session_id))
            assert refused.value.code == ErrorCode.BUSY
            await a.abort()
        a.assert_balanced()
