"""A host that dies or hangs under a turn: every call gets a result, nothing survives, a
fresh host serves the next turn."""

from __future__ import annotations

import os
import pathlib
import shutil
import signal
import sys
import time

import psutil
import pytest
import trio

from protocol.messages.client import AgentPromptResult
from protocol.messages.events import ToolCallEvent, ToolProgressEvent, TurnEnd
from runtime.supervision.link import KILL_EXIT_TIMEOUT
from runtime.supervision.supervisor import (
    DEFAULT_LIVENESS_TIMEOUT,
    DEFAULT_PING_INTERVAL,
    HostSupervisor,
)
from tests.conftest import Marked
from tests.kit.daemon import Agent, agent_daemon, call, text
from tests.kit.waiters import wait_file
from tests.support import (
    MARK_VAR,
    STUCK_GREP_FILE,
    command_line,
    marked_processes,
    stuck_grep_file,
)

DOUBLE_FORK = "echo up; ( setsid sleep 60 & ) ; ( sleep 60 & ) ; sleep 60"


def host_pid(agent: Agent) -> int:
    assert agent.daemon.info is not None
    return int(agent.daemon.info.capabilities["host"]["pid"])


def tool_processes(mark: str, *exclude: int) -> list[psutil.Process]:
    return [p for p in marked_processes(mark)
            if p.pid not in exclude and "sleep" in command_line(p)]


@pytest.mark.parametrize(("tool", "args", "started"), [
    ("Bash", {"command": DOUBLE_FORK}, "progress"),
    ("Grep", {"pattern": "zzz", "path": STUCK_GREP_FILE}, "call"),
    ("Write", {"path": "w.txt", "content": "x"}, "permission"),
])
async def test_host_killed_mid_call(tmp_path: pathlib.Path, marked: Marked, tool: str,
                                    args: dict[str, object], started: str) -> None:
    stuck_grep_file(tmp_path)
    script = [[call("c1", tool, **args)], [text("second turn works")]]
    async with agent_daemon(marked) as agent:
        await agent.new_session(tmp_path, script, mode="ask" if tool == "Write" else "auto")
        first_host = host_pid(agent)
        async with trio.open_nursery() as nursery:
            prompts = agent.prompt_soon(nursery, "go")
            if started == "progress":
                await agent.wait_for(lambda e: isinstance(e, ToolProgressEvent))
                with trio.fail_after(10):
                    while len(tool_processes(marked.mark)) < 3:
                        await trio.sleep(0.05)
            elif started == "call":
                await agent.wait_for(lambda e: isinstance(e, ToolCallEvent))
                await trio.sleep(0.3)
            else:
                with trio.fail_after(10):
                    while not agent.permission_requests:
                        await agent.changed.wait()
            os.kill(first_host, signal.SIGKILL)
        (result,) = prompts
        assert result.stop_reason == "error"
        results = agent.results(result.turn_id or "")
        assert results["c1"].code == "HOST_CRASHED"
        end = agent.turn_end_on_disk(result.turn_id or "")
        assert end is not None and end.end.kind == "error"
        agent.assert_balanced()
        # A crashed call settles only once the dead host's processes are gone.
        assert tool_processes(marked.mark) == []
        # The next turn gets a fresh host.
        with trio.fail_after(20):
            second = await agent.prompt("again")
        assert second.stop_reason == "end_turn"
        assert not (tmp_path / "w.txt").exists()


async def test_hung_host_is_detected_killed_and_replaced(tmp_path: pathlib.Path,
                                                         marked: Marked) -> None:
    script = [[call("b1", "Bash", command="echo up; sleep 60")], [text("fine")]]
    args = ("--ping-interval", "0.2", "--liveness-timeout", "0.6")
    async with agent_daemon(marked, extra_args=args) as agent:
        await agent.new_session(tmp_path, script)
        pid = host_pid(agent)
        async with trio.open_nursery() as nursery:
            prompts = agent.prompt_soon(nursery, "go")
            await agent.wait_for(lambda e: isinstance(e, ToolProgressEvent))
            os.kill(pid, signal.SIGSTOP)
            # A renderer's Stop during the hang must still get its answer.
            with trio.fail_after(15):
                aborted = await agent.abort()
        assert aborted.turn_id == prompts[0].turn_id
        assert prompts[0].stop_reason in {"error", "cancelled"}
        results = agent.results(prompts[0].turn_id or "")
        assert results["b1"].code == "HOST_CRASHED"
        # The stop was settled by the crash: its answer says what it stopped.
        end = agent.turn_end_on_disk(prompts[0].turn_id or "")
        assert end is not None and aborted.outcome == end.end.kind  # never a contradiction
        assert aborted.settled_ms > 0
        assert aborted.cause is not None and aborted.cause.kind == "user"
        assert [(c.call_id, c.code) for c in aborted.tool_calls] == [("b1", "HOST_CRASHED")]
        assert not psutil.pid_exists(pid) or \
            psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
        agent.assert_balanced()
        assert any(isinstance(e, TurnEnd) for e in agent.log())
        with trio.fail_after(20):
            second = await agent.prompt("again")
        assert second.stop_reason == "end_turn"


async def test_a_crash_stops_the_rest_of_its_step(tmp_path: pathlib.Path,
                                                  marked: Marked) -> None:
    # The Write waits behind the Bash (both exclusive). The host dies under the Bash:
    # the Write must not run on the host that replaces it, within the dying turn.
    script = [[call("b1", "Bash", command="echo up; trap '' TERM; sleep 60"),
               call("w1", "Write", path="after-crash.txt", content="x")],
              [text("second turn works")]]
    async with agent_daemon(marked) as agent:
        await agent.new_session(tmp_path, script)
        first_host = host_pid(agent)
        async with trio.open_nursery() as nursery:
            prompts = agent.prompt_soon(nursery, "go")
            await agent.wait_for(lambda e: isinstance(e, ToolProgressEvent))
            with trio.fail_after(10):
                while not tool_processes(marked.mark):
                    await trio.sleep(0.02)
            os.kill(first_host, signal.SIGKILL)
        (result,) = prompts
        # Right at the answer: the TERM-ignoring sleep was killed before the turn settled.
        assert tool_processes(marked.mark) == []
        assert result.stop_reason == "error"
        results = agent.results(result.turn_id or "")
        assert results["b1"].code == "HOST_CRASHED"
        assert results["w1"].code == "ABORTED_BEFORE_DISPATCH"
        assert "hostUnavailable" in results["w1"].details
        end = agent.turn_end_on_disk(result.turn_id or "")
        assert end is not None and end.end.kind == "error"
        agent.assert_balanced()
        with trio.fail_after(20):
            second = await agent.prompt("again")
        assert second.stop_reason == "end_turn"
    assert not (tmp_path / "after-crash.txt").exists()


async def test_host_killed_under_a_running_write(tmp_path: pathlib.Path,
                                                 marked: Marked) -> None:
    # The Write's body first creates its nested folders (tens of ms): the first one
    # appearing means the body runs, and the host is killed at that moment. A machine that
    # finishes the body before the kill lands gets another try.
    nested = ["d"] * 500
    content = "x" * 1_000_000
    attempts = 3
    script: list[list[dict[str, object]]] = []
    for attempt in range(attempts):
        script += [[call(f"w{attempt}", "Write", path="/".join([str(attempt), *nested, "f"]),
                         content=content)], [text("written")]]
    try:
        async with agent_daemon(marked) as agent:
            await agent.new_session(tmp_path, script)
            for attempt in range(attempts):
                prompts: list[AgentPromptResult] = []
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(prompt_into, agent, prompts)
                    with trio.fail_after(20):
                        await trio.to_thread.run_sync(
                            kill_host_when_exists, tmp_path / str(attempt),
                            agent.daemon.process.pid)
                (answer,) = prompts
                result = agent.results(answer.turn_id or "")[f"w{attempt}"]
                if result.code is not None:
                    break  # else the body outran the kill: try again
            assert result.code == "HOST_CRASHED", "never killed under a running Write"
            assert result.is_error and answer.stop_reason == "error"  # the body possibly ran
            target = tmp_path.joinpath(str(attempt), *nested, "f")
            assert not target.exists() or target.read_text() == content  # atomic
            agent.assert_balanced()
            end = agent.turn_end_on_disk(answer.turn_id or "")
            assert end is not None and end.end.kind == "error"
    finally:
        shutil.rmtree(tmp_path, ignore_errors=True)  # deep: not left to pytest's cleanup


async def prompt_into(agent: Agent, answers: list[AgentPromptResult]) -> None:
    answers.append(await agent.prompt("go"))


def kill_host_when_exists(path: pathlib.Path, daemon_pid: int, within: float = 20.0) -> None:
    """SIGKILL the daemon's host the moment ``path`` appears (a thread, polling; it gives
    up after ``within`` seconds, so a run that never gets there fails instead of spinning)."""
    deadline = time.monotonic() + within
    while not path.exists():
        if time.monotonic() > deadline:
            return
        time.sleep(0.0002)
    for child in psutil.Process(daemon_pid).children():
        if "host" in command_line(child).split() and child.status() != psutil.STATUS_ZOMBIE:
            child.kill()


# A host that answers the handshake, leaves a tool process, closes its stdout and lives
# on; its successor (the flag file exists) answers every request with {}.
CLOSING_HOST = r"""
import json, os, subprocess, sys, time
first = not os.path.exists(sys.argv[1])
open(sys.argv[1], "a").close()
def answer(request, result):
    reply = {"jsonrpc": "2.0", "id": request["id"], "result": result}
    sys.stdout.write(json.dumps(reply) + "\n")
    sys.stdout.flush()
answer(json.loads(sys.stdin.readline()),
       {"protocolVersion": "1.0", "serverInfo": {"name": "fake", "version": "0"}})
if first:
    subprocess.Popen(["sleep", "60"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                     env=dict(os.environ, QUIESCE_HOST_CALL=f"{os.getpid()}:c1"))
    time.sleep(0.3)
    os.close(1)
    time.sleep(60)
for line in sys.stdin:
    answer(json.loads(line), {})
"""


def leftovers(mark: str) -> list[psutil.Process]:
    return [p for p in marked_processes(mark) if command_line(p) == "sleep 60"]


def running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


async def test_a_host_that_closes_its_pipe_but_lives_is_killed_not_doubled(
        tmp_path: pathlib.Path, marked: Marked) -> None:
    command = ["env", f"{MARK_VAR}={marked.mark}", sys.executable, "-c", CLOSING_HOST,
               str(tmp_path / "started")]
    supervisor = HostSupervisor(command=command, ping_interval=60)
    async with trio.open_nursery() as nursery:
        with trio.fail_after(20):
            await nursery.start(supervisor.run)
        first = supervisor.link
        assert first is not None and first.pid is not None
        with trio.fail_after(10):
            while not leftovers(marked.mark):
                await trio.sleep(0.01)
            while not first.closed:
                await trio.sleep(0.01)
            successor = await supervisor.ensure()  # what the next request would do
        # The successor started only once its predecessor was dead and its leftovers gone.
        assert successor.pid != first.pid
        assert not running(first.pid)
        assert leftovers(marked.mark) == []
        assert supervisor.crashes == 1
        with trio.fail_after(10):
            await supervisor.stop()
        nursery.cancel_scope.cancel()


async def test_an_unmarked_escapee_of_a_crashed_host_is_killed(tmp_path: pathlib.Path,
                                                               marked: Marked) -> None:
    # It clears its environment (no marker, not even the test's) and leaves the session;
    # orphaned, it is adopted by the host, then, the host killed, by the runtime.
    pid_file = tmp_path / "escapee.pid"
    command = (f"env -i setsid sh -c 'sleep 300 & echo $! > {pid_file}'; "
               "echo up; sleep 60")
    script = [[call("b1", "Bash", command=command)], [text("after")]]
    try:
        async with agent_daemon(marked) as agent:
            await agent.new_session(tmp_path, script)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(agent.prompt, "go")
                await agent.wait_for(lambda e: isinstance(e, ToolProgressEvent))
                await wait_file(pid_file, 10, strip=True)
                escapee = psutil.Process(int(pid_file.read_text()))
                with trio.fail_after(10):  # its shell exited: the host adopted it
                    while escapee.ppid() != host_pid(agent):
                        await trio.sleep(0.02)
                os.kill(host_pid(agent), signal.SIGKILL)
            # The crashed turn answered: the escapee is gone by now (reaped, not a zombie).
            assert not psutil.pid_exists(escapee.pid), command_line(escapee)
            agent.assert_balanced()
    finally:  # the test's marker cannot find it: never left behind by a failure
        text_pid = pid_file.read_text().strip() if pid_file.exists() else ""
        if text_pid and psutil.pid_exists(int(text_pid)):
            os.kill(int(text_pid), signal.SIGKILL)


async def test_a_stopped_host_is_replaced_with_the_default_liveness(
        tmp_path: pathlib.Path, marked: Marked) -> None:
    # The defaults (a ping every 2 s, answered within 10 s; a process call's grace 10 s): a
    # Stop pressed under a SIGSTOPped host answers once the grace runs out (the call's
    # cgroup killed: ABORTED) or the host is killed (HOST_CRASHED), whichever comes first;
    # the host is killed (SIGKILL ends a stopped process too) within ~12 s, and the next
    # turn gets a fresh one.
    script = [[call("b1", "Bash", command="echo up; sleep 60")],
              [call("r2", "Read", path="a.txt")], [text("fine")]]
    (tmp_path / "a.txt").write_text("served\n")
    bound = DEFAULT_PING_INTERVAL + DEFAULT_LIVENESS_TIMEOUT + KILL_EXIT_TIMEOUT + 3
    async with agent_daemon(marked) as agent:
        await agent.new_session(tmp_path, script)
        pid = host_pid(agent)
        async with trio.open_nursery() as nursery:
            prompts = agent.prompt_soon(nursery, "go")
            await agent.wait_for(lambda e: isinstance(e, ToolProgressEvent))
            os.kill(pid, signal.SIGSTOP)
            started = time.monotonic()
            aborted = await agent.stop_and_check(within=bound, spare=(pid,))
        assert aborted.turn_id == prompts[0].turn_id
        assert [c.call_id for c in aborted.tool_calls] == ["b1"]
        assert aborted.tool_calls[0].code in {"ABORTED", "HOST_CRASHED"}
        with trio.fail_after(bound - (time.monotonic() - started)):
            while running(pid):
                await trio.sleep(0.05)
        took = time.monotonic() - started
        assert took > DEFAULT_LIVENESS_TIMEOUT - 1  # it was the liveness ping that ended it
        agent.assert_balanced()
        assert tool_processes(marked.mark) == []
        with trio.fail_after(20):
            second = await agent.prompt("again")
        assert second.stop_reason == "end_turn"
        assert agent.results(second.turn_id or "")["r2"].code is None
        (host,) = [p for p in psutil.Process(agent.daemon.process.pid).children()
                   if "host" in command_line(p).split()]
        assert host.pid != pid


async def test_a_runtime_stopped_with_its_host_keeps_it(tmp_path: pathlib.Path,
                                                       marked: Marked) -> None:
    # Ctrl-Z in a terminal stops the runtime and its host together; both resume together.
    # The host did not fail to answer: the runtime, stopped too, was not there to listen.
    # A ping whose deadline passed while the runtime itself stood still is not a hung host.
    (tmp_path / "a.txt").write_text("served\n")
    script = [[call("r1", "Read", path="a.txt")], [text("fine")]]
    args = ("--ping-interval", "0.2", "--liveness-timeout", "1")
    async with agent_daemon(marked, extra_args=args) as agent:
        await agent.new_session(tmp_path, script)
        pid, runtime = host_pid(agent), agent.daemon.process.pid
        await trio.sleep(0.5)  # pings are flowing
        os.kill(runtime, signal.SIGSTOP)
        os.kill(pid, signal.SIGSTOP)
        await trio.sleep(3)  # well past the liveness timeout
        os.kill(pid, signal.SIGCONT)
        os.kill(runtime, signal.SIGCONT)
        await trio.sleep(2)  # several pings after the resume
        assert running(pid)
        with trio.fail_after(20):
            answer = await agent.prompt("go")
        assert answer.stop_reason == "end_turn"
        assert agent.results(answer.turn_id or "")["r1"].code is None
        hosts = [p.pid for p in psutil.Process(runtime).children()
                 if "host" in command_line(p).split()]
        assert hosts == [pid]
