"""One session's hostile Grep or Glob cannot freeze, bloat or crash the shared host.

Against a real host process, with other sessions working beside:

- a catastrophic regex (``(a+)+$``) and a catastrophic glob: the host keeps answering
  (a ``host.stats`` round trip stays fast), another session's Read and Bash succeed;
- a brace bomb is refused ``INVALID_PARAMS`` at once, without the host growing;
- a Latin-1 file name goes through Glob, Grep and Read, and a result that cannot be
  encoded is that call's ``TOOL_FAILED``, the link unharmed.
"""

from __future__ import annotations

import os
import pathlib
import sys
import time
from typing import Any

import psutil  # type: ignore[import-untyped, unused-ignore]
import trio

from protocol.messages.host import SessionOpenParams
from protocol.tools import TextContent, ToolResult
from tests.conftest import Marked
from tests.kit.host import Host, running_host

FAST = {"tools": {"kill_grace": 0.5}}
HOSTILE = 25


def text(result: ToolResult) -> str:
    return "\n".join(c.text for c in result.content if isinstance(c, TextContent))


async def _open(host: Host, session_id: str, workspace: pathlib.Path) -> None:
    await host.link.request("session.open",
                            SessionOpenParams(session_id, str(workspace), "auto"))


async def _execute(host: Host, session_id: str, call_id: str, tool: str,
                   args: dict[str, Any]) -> ToolResult:
    from protocol.messages.host import ToolsExecuteParams
    result: ToolResult = await host.link.request(
        "tools.execute", ToolsExecuteParams(session_id, call_id, tool, args))
    return result


async def _stats_round_trips(host: Host, until: trio.Event, lags: list[float]) -> None:
    while not until.is_set():
        started = time.monotonic()
        await host.stats()
        lags.append(time.monotonic() - started)
        await trio.sleep(0.01)


async def test_catastrophic_patterns_do_not_freeze_the_host(tmp_path: pathlib.Path,
                                                            marked: Marked) -> None:
    hostile = tmp_path / "hostile"
    hostile.mkdir()
    (hostile / "evil.txt").write_text("a" * 30 + "b\n")
    (hostile / ("a" * 119 + "c")).write_text("x\n")
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("hello\n")
    async with running_host(str(hostile), marked.env(), config=FAST) as host:
        await _open(host, "s-other", other)
        results: dict[str, ToolResult] = {}
        lags: list[float] = []
        done = trio.Event()

        async def hostile_call(call_id: str, tool: str, args: dict[str, Any]) -> None:
            results[call_id] = await host.execute(call_id, tool, args)

        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_stats_round_trips, host, done, lags)
                for n in range(HOSTILE // 2 + 1):  # 13 Greps, 12 Globs
                    nursery.start_soon(hostile_call, f"g{n}", "Grep", {"pattern": "(a+)+$"})
                    if n < HOSTILE // 2:
                        nursery.start_soon(hostile_call, f"l{n}", "Glob",
                                           {"pattern": "*a*a*a*a*a*a*a*a*b"})
                read = await _execute(host, "s-other", "r1", "Read", {"path": "notes.txt"})
                bash = await _execute(host, "s-other", "b1", "Bash", {"command": "echo ok"})
                while len(results) < HOSTILE:
                    await trio.sleep(0.01)
                done.set()
        assert "hello" in text(read) and not read.is_error
        assert text(bash) == "ok" and not bash.is_error
        for call_id, result in results.items():
            assert not result.is_error, (call_id, result)
        assert text(results["g0"]) == "No matches found"  # as it should: it ends in b
        # The host kept answering: before ripgrep, one catastrophic Grep froze its loop
        # for 11 s. The bound leaves room for a loaded CI machine; the p99 figure is the
        # benchmark's (stop-loop-lag), not a timed test's.
        assert lags and max(lags) < 2.0, sorted(lags)[-5:]


async def test_a_brace_bomb_is_refused_at_once(tmp_path: pathlib.Path, marked: Marked) -> None:
    (tmp_path / "ab").write_text("x")
    async with running_host(str(tmp_path), marked.env(), config=FAST) as host:
        assert host.link.pid is not None
        rss_before = psutil.Process(host.link.pid).memory_info().rss
        started = time.monotonic()
        with trio.fail_after(10):
            bomb = await host.execute("b1", "Glob", {"pattern": "{a,b}" * 23})
            grep_bomb = await host.execute("b2", "Grep", {"pattern": "x",
                                                          "glob": "{a,b}" * 30})
        assert time.monotonic() - started < 2.0
        assert bomb.code == "INVALID_PARAMS" and "brace alternatives" in text(bomb)
        assert grep_bomb.code == "INVALID_PARAMS"
        grown = psutil.Process(host.link.pid).memory_info().rss - rss_before
        assert grown < 50 * 1024 * 1024
        assert (await host.execute("b3", "Glob", {"pattern": "{a,b}{a,b}"})).code is None


async def test_a_latin1_name_through_the_host(tmp_path: pathlib.Path, marked: Marked) -> None:
    with open(os.fsencode(tmp_path) + b"/caf\xe9.txt", "wb") as f:
        f.write(b"needle\n")
    async with running_host(str(tmp_path), marked.env(), config=FAST) as host:
        with trio.fail_after(10):
            listed = await host.execute("c1", "Glob", {"pattern": "*.txt"})
            found = await host.execute("c2", "Grep", {"pattern": "needle"})
            read = await host.execute("c3", "Read", {"path": text(listed)})
            stats = await host.stats()  # the link lives on
        assert text(listed) == "caf\\xe9.txt"
        assert text(found) == "caf\\xe9.txt:1:needle"
        assert "needle" in text(read) and not read.is_error
        assert stats.calls_in_flight == 0


BAD_RESULT_HOST = """
import sys
from dataclasses import replace
from host.tools import TOOLS
from protocol.tools import ok_result

async def bad(args, ctx):
    return ok_result("caf\\udce9")

TOOLS["Read"] = replace(TOOLS["Read"], body=bad)
from host.main import main
sys.exit(main(sys.argv[1:]))
"""


async def test_a_result_that_cannot_be_encoded_is_the_calls_error(
        tmp_path: pathlib.Path, marked: Marked) -> None:
    command = [sys.executable, "-c", BAD_RESULT_HOST]
    async with running_host(str(tmp_path), marked.env(), config=FAST,
                            command=command) as host:
        with trio.fail_after(10):
            bad = await host.execute("e1", "Read", {"path": "x"})
            after = await host.execute("e2", "Bash", {"command": "echo alive"})
        assert bad.code == "TOOL_FAILED" and "could not be encoded" in text(bad)
        assert text(after) == "alive"


async def test_host_stats_say_how_processes_are_attributed(tmp_path: pathlib.Path,
                                                           marked: Marked) -> None:
    async with running_host(str(tmp_path), marked.env(), config=FAST) as host:
        assert host.link.pid is not None
        with_cgroups = os.path.isdir(f"/sys/fs/cgroup/unified/quiesce-host-{host.link.pid}") \
            or os.path.isdir(f"/sys/fs/cgroup/quiesce-host-{host.link.pid}")
        assert (await host.stats()).process_isolation == (
            "cgroup" if with_cgroups else "process-tree")
    async with running_host(str(tmp_path), marked.env(QUIESCE_CGROUPS="off"),
                            config=FAST) as host:
        assert (await host.stats()).process_isolation == "process-tree"


async def test_one_sessions_burst_of_searches_runs_a_few_at_a_time(
        tmp_path: pathlib.Path, marked: Marked) -> None:
    """Searches beyond ``admission.per_session_searches`` wait for their session's turn:
    another session's search runs at once, and a stop reaches a search still waiting."""
    hostile = tmp_path / "hostile"
    hostile.mkdir()
    with open(hostile / "huge.bin", "wb") as f:  # sparse: ripgrep reads zeros for minutes
        f.truncate(64 << 30)
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("needle\n")
    config = {**FAST, "admission": {"per_session_searches": 2}}
    async with running_host(str(hostile), marked.env(), config=config) as host:
        await _open(host, "s-other", other)
        results: dict[str, ToolResult] = {}

        async def search(call_id: str) -> None:
            results[call_id] = await host.execute(call_id, "Grep",
                                                  {"pattern": "needle", "path": "huge.bin"})

        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:
                for n in range(3):
                    nursery.start_soon(search, f"g{n}")
                while (stats := await host.stats()).admission_waiting < 1:
                    await trio.sleep(0.01)
                assert stats.admission_running == 2
                found = await _execute(host, "s-other", "o1", "Grep", {"pattern": "needle"})
                assert text(found) == "notes.txt:1:needle"
                waiting = [c.call_id for c in stats.calls if c.state == "admission"]
                assert len(waiting) == 1
                aborted = await host.abort(waiting[0], "Grep")
                assert not aborted.body_invoked
                for n in range(3):
                    if f"g{n}" not in waiting:
                        await host.abort(f"g{n}", "Grep")
        assert results[waiting[0]].code == "ABORTED_BEFORE_DISPATCH"
        assert all(r.code == "ABORTED" for k, r in results.items() if k != waiting[0])
