"""``quiesce ops`` end to end against a live daemon."""

from __future__ import annotations

import json
import pathlib
import stat
import sys

import trio

from protocol.messages.events import ToolProgressEvent, TurnEnd
from tests.conftest import Marked
from tests.e2e.agent_harness import agent_daemon, call


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
    # A TERM-ignoring tree holds its stop for the host's 2 s kill grace.
    script = [[call("b1", "Bash", command="echo hold; trap '' TERM; sleep 60")]]
    async with agent_daemon(marked, extra_args=("--stuck-after", "0.3")) as agent:
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
