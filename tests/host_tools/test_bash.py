"""Bash: output and exit status, streaming order, bounds, timeout, stop, leftovers."""

from __future__ import annotations

import time

import trio

from host.tools import TOOLS
from protocol.tools import BashArgs, TextContent, ToolResult
from runtime.proc.proctree import find_marked
from tests.kit.waiters import wait_until

from .conftest import TEST_GRACE, Harness


def text(result: ToolResult) -> str:
    return "\n".join(c.text for c in result.content if isinstance(c, TextContent))


async def bash(h: Harness, command: str, timeout_ms: int | None = None,
               **config: object) -> ToolResult:
    with trio.fail_after(10):
        return await TOOLS["Bash"].run(BashArgs(command, timeout_ms), h.ctx(**config))


async def stop_when_streamed(h: Harness, needle: str) -> None:
    await wait_until(lambda: needle in h.streamed())
    h.stop.set()


async def test_output_exit_status_cwd_and_marker(harness: Harness) -> None:
    result = await bash(harness, 'pwd; echo "$QUIESCE_TEST_MARKER"; cat; echo err >&2; exit 3')
    assert not result.is_error and result.body_invoked
    # Two pipes: stdout and stderr interleave in arrival order, each in its own order.
    assert harness.streamed("stdout") == f"{harness.root}\n{harness.marker[1]}\n"
    assert harness.streamed("stderr") == "err\n"
    lines = text(result).splitlines()
    assert sorted(lines[:3]) == sorted([str(harness.root), harness.marker[1], "err"])
    assert lines[-1] == "[exit status 3]"
    assert result.details["exitStatus"] == 3 and result.details["signal"] is None
    assert (await bash(harness, "true")).content == (TextContent("(no output)"),)


async def test_streaming_is_ordered(harness: Harness) -> None:
    await bash(harness, "echo one; sleep 0.1; echo two >&2; sleep 0.1; echo three")
    assert harness.outputs == [("stdout", "one\n"), ("stderr", "two\n"), ("stdout", "three\n")]


async def test_output_is_bounded(harness: Harness) -> None:
    result = await bash(harness, "yes 0123456789 | head -c 200000; echo END",
                        max_output_bytes=4096)
    assert sum(len(t.encode()) for _, t in harness.outputs) == 4096
    assert result.details["streamTruncated"] and result.details["truncated"]
    assert result.details["outputBytes"] == 200004
    out = text(result)
    assert len(out.encode()) < 4096 + 200 and "bytes of output omitted" in out
    assert out.startswith("0123456789") and "END" in out  # head and tail kept
    assert "live output stopped after 4096 bytes" in out


async def test_utf8_split_across_reads_is_not_mangled(harness: Harness) -> None:
    await bash(harness, "for i in $(seq 3000); do printf 'é€😀'; done",
               max_output_bytes=1 << 20)
    streamed = harness.streamed()
    assert "\ufffd" not in streamed and streamed == "é€😀" * 3000


async def test_timeout_kills_the_tree_and_keeps_partial_output(harness: Harness) -> None:
    started = time.monotonic()
    result = await bash(harness, "echo partial; sleep 30 & sleep 31", timeout_ms=300)
    elapsed = time.monotonic() - started
    assert result.code == "TOOL_TIMEOUT" and result.body_invoked
    assert "partial" in text(result) and "timed out after 0.3 s" in text(result)
    assert result.details["signal"] == "SIGTERM" and result.details["survivors"] == []
    assert elapsed < 0.3 + TEST_GRACE + 1.0
    assert find_marked(*harness.marker) == []


async def test_stop_returns_output_collected_before_termination(harness: Harness) -> None:
    async with trio.open_nursery() as nursery:
        nursery.start_soon(stop_when_streamed, harness, "before")
        started = time.monotonic()
        result = await bash(harness, "echo before; sleep 30; echo after")
    assert time.monotonic() - started < 1.0
    assert result.code == "ABORTED" and result.body_invoked
    assert "before" in text(result) and "after" not in text(result)
    assert result.details["output"] == "before\n"
    assert result.details["signal"] == "SIGTERM"


async def test_stop_of_a_term_ignoring_tree_takes_the_grace(harness: Harness) -> None:
    command = ("trap '' TERM; setsid bash -c \"trap '' TERM; sleep 60; :\" & "
               "nohup sleep 61 >/dev/null 2>&1 & echo up; while :; do sleep 0.05; done")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(stop_when_streamed, harness, "up")
        result = await bash(harness, command)
        stopped = time.monotonic()
    assert result.code == "ABORTED"
    assert result.details["signal"] == "SIGKILL" and result.details["killedAfterGrace"] >= 3
    assert TEST_GRACE * 1000 <= result.details["killMs"] < (TEST_GRACE + 0.5) * 1000
    assert time.monotonic() - stopped < 0.5
    assert find_marked(*harness.marker) == []


async def test_background_jobs_do_not_outlive_the_call(harness: Harness) -> None:
    started = time.monotonic()
    result = await bash(harness, "sleep 30 & setsid sleep 31 & echo done")
    assert time.monotonic() - started < 1.0
    assert not result.is_error and text(result).startswith("done")
    assert "2 background processes were still running" in text(result)
    assert find_marked(*harness.marker) == []


async def test_stop_before_start_spawns_nothing(harness: Harness) -> None:
    harness.stop.set()
    result = await bash(harness, "touch should-not-exist")
    assert result.code == "ABORTED" and not (harness.root / "should-not-exist").exists()


async def test_cancelling_the_body_kills_the_tree(harness: Harness) -> None:
    with trio.move_on_after(0.3):
        await bash(harness, "sleep 30 & setsid sleep 31 & wait")
    assert find_marked(*harness.marker) == []


def test_process_class() -> None:
    assert TOOLS["Bash"].tool_class.value == "process"
    assert TOOLS["GenerateImages"].tool_class.value == "process"
