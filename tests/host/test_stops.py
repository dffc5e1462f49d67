"""Each tool class's stop path, against a real host process."""

from __future__ import annotations

import os
import pathlib
import sys
import textwrap
import time

import psutil
import pytest
import trio

from protocol.messages.host import (
    PermissionRequestParams,
    PermissionRequestResult,
    ToolsOutputParams,
    ToolsStartedParams,
)
from protocol.tools import ToolResult
from tests.conftest import Marked
from tests.kit.host import running_host
from tests.kit.waiters import wait_until
from tests.support import command_line, marked_processes, stuck_grep_file

FAST = {"tools": {"kill_grace": 0.5}}
STUCK_HOST = [sys.executable, str(pathlib.Path(__file__).with_name("stuck_host.py"))]
TREE = (
    "echo started; "
    "sleep 60 & "
    "setsid sleep 60 & "
    "( sleep 60 & ) ; "
    "nohup sleep 60 >/dev/null 2>&1 & "
    "bash -c 'trap \"\" TERM; sleep 60' & "
    "sleep 60"
)


def slow_grep_tree(root: pathlib.Path) -> dict[str, str]:
    # Minutes of ripgrep reading a sparse file: a Grep that is read-only and real.
    return stuck_grep_file(root)


async def test_read_only_stop_returns_at_once(tmp_path: pathlib.Path, marked: Marked) -> None:
    stuck = slow_grep_tree(tmp_path)
    async with running_host(str(tmp_path), marked.env(), config=FAST) as host:
        async with trio.open_nursery() as nursery:
            results = []

            async def run() -> None:
                results.append(await host.execute("g1", "Grep", stuck))

            nursery.start_soon(run)
            await trio.sleep(0.3)
            sent = time.monotonic()
            state = await host.abort("g1", "Grep")
            assert state.found and state.state == "running" and state.body_invoked
        elapsed = time.monotonic() - sent
    (result,) = results
    assert result.code == "ABORTED" and result.body_invoked
    assert elapsed < 1.0, elapsed


@pytest.mark.parametrize("mechanism", ["cgroup", "process-tree"])
async def test_a_stopped_search_gets_the_hosts_priority_back(tmp_path: pathlib.Path,
                                                             marked: Marked,
                                                             mechanism: str) -> None:
    """A search runs lowered (nice 19, its autogroup too), and a process dies of TERM or
    KILL only once the scheduler runs it: under CPU load a lowered one waited up to a
    second for that, past its grace. Its stop gives it the host's priority back before the
    TERM, whichever way the tree is killed (its cgroup, or the fallback without cgroups):
    a stand-in ``rg`` says at which priority its TERM found it."""
    if os.geteuid() != 0:
        pytest.skip("raising a priority back needs CAP_SYS_NICE")
    ready, seen = tmp_path / "ready", tmp_path / "seen"
    stand_in = tmp_path / "lowered-rg"
    stand_in.write_text(f"#!{sys.executable}\n" + textwrap.dedent(f"""\
        import os, signal, time
        def priority():
            nice = str(os.getpriority(os.PRIO_PROCESS, 0))
            if not os.path.exists("/proc/self/autogroup"):
                return nice + " -"
            with open("/proc/self/autogroup") as group:
                return nice + " " + group.read().split()[-1]
        def on_term(signum, frame):
            with open({str(seen)!r}, "w") as out:
                out.write(priority())
            os._exit(0)
        signal.signal(signal.SIGTERM, on_term)
        with open({str(ready)!r}, "w") as out:
            out.write(priority())
        time.sleep(60)
        """))
    stand_in.chmod(0o755)
    env = marked.env(QUIESCE_RG=str(stand_in),
                     **({"QUIESCE_CGROUPS": "off"} if mechanism == "process-tree" else {}))
    async with running_host(str(tmp_path), env, config=FAST) as host:
        assert host.link.pid is not None
        host_nice = psutil.Process(host.link.pid).nice()
        async with trio.open_nursery() as nursery:
            results = []

            async def run() -> None:
                results.append(await host.execute("g1", "Grep", {"pattern": "zzz"}))

            nursery.start_soon(run)
            with trio.fail_after(10):
                while not (ready.exists() and ready.read_text()):
                    await trio.sleep(0.01)
            lowered_nice, lowered_group = ready.read_text().split()
            assert int(lowered_nice) > host_nice and lowered_group in ("19", "-")
            await host.abort("g1", "Grep")
    (result,) = results
    assert result.code == "ABORTED" and result.body_invoked
    nice, group = seen.read_text().split()
    assert int(nice) == host_nice and group in ("0", "-"), seen.read_text()


async def test_process_tree_stop_kills_every_member(tmp_path: pathlib.Path,
                                                    marked: Marked) -> None:
    async with running_host(str(tmp_path), marked.env(), config=FAST) as host:
        results = []
        async with trio.open_nursery() as nursery:
            async def run() -> None:
                results.append(await host.execute("b1", "Bash", {"command": TREE}))

            nursery.start_soon(run)
            await wait_until(lambda: host.output, within=10)
            with trio.fail_after(10):
                while len(marked_processes(marked.mark)) < 7:
                    await trio.sleep(0.05)
            sent = time.monotonic()
            await host.abort("b1", "Bash")
        elapsed = time.monotonic() - sent
        (result,) = results
        assert result.code == "ABORTED" and result.body_invoked
        assert "started" in str(result.content) + str(result.details)
        assert elapsed < 0.5 + 2.0, elapsed
        # A process that exits while being listed reads as "" and is not a survivor.
        tool_procs = [p for p in marked_processes(marked.mark)
                      if (cmd := command_line(p)) and "host" not in cmd]
        assert tool_procs == []


async def test_stop_during_permission_prompt(tmp_path: pathlib.Path, marked: Marked) -> None:
    late: list[str] = []

    async def answer_late(params: PermissionRequestParams) -> PermissionRequestResult:
        await trio.sleep(0.5)
        late.append(params.request_id)
        return PermissionRequestResult("allow-once")

    async with running_host(str(tmp_path), marked.env(), mode="ask", config=FAST,
                            answer=answer_late) as host:
        results = []
        async with trio.open_nursery() as nursery:
            async def run() -> None:
                results.append(await host.execute(
                    "w1", "Write", {"path": "x.txt", "content": "hello"}))

            nursery.start_soon(run)
            with trio.fail_after(10):
                await host.permission_asked.wait()
            await host.abort("w1", "Write")
        (result,) = results
        assert result.code == "ABORTED_BEFORE_DISPATCH" and not result.body_invoked
        assert host.withdrawn == [host.permission_requests[0].request_id]
        await trio.sleep(0.8)  # the late answer arrives and is refused
        assert late == [host.permission_requests[0].request_id]
        assert not (tmp_path / "x.txt").exists()


async def test_permission_denied_and_allowed(tmp_path: pathlib.Path, marked: Marked) -> None:
    decisions = iter(["deny", "allow-session"])

    async def answer(params: PermissionRequestParams) -> PermissionRequestResult:
        return PermissionRequestResult(next(decisions))  # type: ignore[arg-type]

    async with running_host(str(tmp_path), marked.env(), mode="ask", answer=answer) as host:
        denied = await host.execute("w1", "Write", {"path": "a.txt", "content": "1"})
        assert denied.code == "TOOL_DENIED" and not denied.body_invoked
        assert not (tmp_path / "a.txt").exists()
        allowed = await host.execute("w2", "Write", {"path": "a.txt", "content": "2"})
        assert not allowed.is_error and (tmp_path / "a.txt").read_text() == "2"
        again = await host.execute("w3", "Write", {"path": "a.txt", "content": "3"})
        assert not again.is_error and len(host.permission_requests) == 2


async def test_deny_for_the_session_is_not_asked_again(tmp_path: pathlib.Path,
                                                      marked: Marked) -> None:
    async def answer(params: PermissionRequestParams) -> PermissionRequestResult:
        return PermissionRequestResult("deny-session")

    async with running_host(str(tmp_path), marked.env(), mode="ask", answer=answer) as host:
        first = await host.execute("w1", "Write", {"path": "a.txt", "content": "1"})
        second = await host.execute("w2", "Write", {"path": "a.txt", "content": "2"})
        assert [first.code, second.code] == ["TOOL_DENIED", "TOOL_DENIED"]
        assert not first.body_invoked and not second.body_invoked
        assert len(host.permission_requests) == 1 and not (tmp_path / "a.txt").exists()
        read = await host.execute("r1", "Read", {"path": "missing.txt"})
        assert read.code != "TOOL_DENIED"  # read-only tools are never asked nor denied


async def test_permission_timeout_is_a_deny(tmp_path: pathlib.Path, marked: Marked) -> None:
    async with running_host(str(tmp_path), marked.env(), mode="ask",
                            config={"permission_timeout": 0.2}) as host:
        result = await host.execute("b1", "Bash", {"command": "touch made"})
        assert result.code == "TOOL_DENIED"
        assert host.withdrawn == [host.permission_requests[0].request_id]
        assert not (tmp_path / "made").exists()


async def test_stop_while_queued_in_admission(tmp_path: pathlib.Path, marked: Marked) -> None:
    config = {**FAST, "admission": {"per_class": {"process": 1}}}
    async with running_host(str(tmp_path), marked.env(), config=config) as host:
        results: dict[str, object] = {}
        async with trio.open_nursery() as nursery:
            async def run(call_id: str, command: str) -> None:
                results[call_id] = await host.execute(call_id, "Bash", {"command": command})

            nursery.start_soon(run, "first", "echo one; sleep 30")
            await wait_until(lambda: host.output, within=10)
            nursery.start_soon(run, "queued", "touch should-not-exist")
            await trio.sleep(0.2)
            state = await host.abort("queued", "Bash")
            assert state.state == "admission" and not state.body_invoked
            with trio.fail_after(2):
                while "queued" not in results:
                    await trio.sleep(0.01)
            await host.abort("first", "Bash")
        queued = results["queued"]
        assert queued.code == "ABORTED_BEFORE_DISPATCH"  # type: ignore[attr-defined]
        assert results["first"].code == "ABORTED"  # type: ignore[attr-defined]
        assert not (tmp_path / "should-not-exist").exists()


async def test_abort_is_idempotent(tmp_path: pathlib.Path, marked: Marked) -> None:
    async with running_host(str(tmp_path), marked.env(), config=FAST) as host:
        async with trio.open_nursery() as nursery:
            # TERM ignored: the call is still stopping (until the KILL past the grace) when
            # the second abort comes; a tree that dies of its TERM can settle before it.
            nursery.start_soon(host.execute, "b1", "Bash",
                               {"command": "trap '' TERM; echo go; sleep 30"})
            await wait_until(lambda: host.output, within=10)
            first = await host.abort("b1", "Bash")
            second = await host.abort("b1", "Bash", "operator")
            assert first == second
        after = await host.abort("b1", "Bash")
        assert after.found and after.state == "settled"


async def test_host_exits_when_runtime_pipe_closes(tmp_path: pathlib.Path,
                                                   marked: Marked) -> None:
    async with running_host(str(tmp_path), marked.env(), config=FAST) as host:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(host.execute, "b1", "Bash", {"command": TREE})
            await wait_until(lambda: host.output, within=10)
            pid = host.link.pid
            assert pid is not None
            process = host.link._process
            assert process is not None and process.stdin is not None
            await process.stdin.aclose()  # the runtime "dies": its pipe closes
            with trio.fail_after(10):
                await host.link.exited.wait()
            nursery.cancel_scope.cancel()
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    assert marked_processes(marked.mark) == []


async def test_tools_started_precedes_the_output_and_a_stopped_prompt_has_none(
        tmp_path: pathlib.Path, marked: Marked) -> None:
    async with running_host(str(tmp_path), marked.env()) as host:
        result = await host.execute("c1", "Bash", {"command": "echo one; echo two"})
        assert not result.is_error
        kinds = [type(n) for n in host.notices if n.call_id == "c1"]
        assert kinds[0] is ToolsStartedParams and kinds.count(ToolsStartedParams) == 1
        assert ToolsOutputParams in kinds
    async with running_host(str(tmp_path), marked.env(), mode="ask") as host:
        async with trio.open_nursery() as nursery:
            results = []

            async def run() -> None:
                results.append(await host.execute("c2", "Bash", {"command": "echo no"}))

            nursery.start_soon(run)
            with trio.fail_after(10):
                await host.permission_asked.wait()
            await host.abort("c2", "Bash")
        assert results[0].code == "ABORTED_BEFORE_DISPATCH"
        assert [n for n in host.notices if n.call_id == "c2"] == []


async def test_a_stuck_read_is_abandoned_and_other_reads_go_on(tmp_path: pathlib.Path,
                                                                marked: Marked) -> None:
    """A read-only body stuck in the kernel (a blocking open of a FIFO nobody writes, on a
    reader thread as Read's) holds neither its stop nor the Reads beside and after it."""
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "one").write_text("x\n")
    async with running_host(str(tmp_path), marked.env(), command=STUCK_HOST) as host:
        results: list[ToolResult] = []
        async with trio.open_nursery() as nursery:
            async def run() -> None:
                results.append(await host.execute("r1", "StuckRead", {"path": "fifo"}))

            nursery.start_soon(run)
            with trio.fail_after(10):
                while not any(c.state == "running" for c in (await host.stats()).calls):
                    await trio.sleep(0.01)
            await trio.sleep(0.1)  # its reader thread is in open(2)
            with trio.fail_after(5):
                async with trio.open_nursery() as reads:
                    for i in range(8):
                        async def read(i: int = i) -> None:
                            quick = await host.execute(f"q{i}", "Read", {"path": "one"})
                            assert not quick.is_error and "x" in quick.content[0].text
                        reads.start_soon(read)
            sent = time.monotonic()
            state = await host.abort("r1", "StuckRead")
            assert state.found and state.state == "running" and state.body_invoked
        elapsed = time.monotonic() - sent
        after = await host.execute("q-after", "Read", {"path": "one"})
        assert not after.is_error
    (result,) = results
    assert result.code == "ABORTED" and result.body_invoked
    assert elapsed < 1.0, elapsed
