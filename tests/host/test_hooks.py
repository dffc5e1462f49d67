"""``hooks.run`` and ``hooks.abort`` on a real host: a hook is a process tree like Bash."""

from __future__ import annotations

import pathlib

import pytest
import trio

from protocol.errors import RemoteError
from protocol.messages.host import (
    HooksAbortParams,
    HooksAbortResult,
    HooksRunParams,
    HooksRunResult,
)
from tests.conftest import Marked
from tests.e2e.hookkit import gone, script, wait_for_file
from tests.kit.host import Host, running_host


async def run(host: Host, hook_id: str, command: str, stdin: str = "",
              limit: float = 10.0) -> HooksRunResult:
    result: HooksRunResult = await host.link.request("hooks.run", HooksRunParams(
        host.session_id, hook_id, (command,), stdin, limit))
    return result


async def test_a_hook_reads_its_input_and_its_output_is_bounded(tmp_path: pathlib.Path,
                                                                marked: Marked) -> None:
    big = "x" * 300_000  # more than a pipe holds: stdin is a file, not a pipe
    echo = script(tmp_path, "echo", "wc -c\nhead -c 200000 /dev/zero | tr '\\0' y >&2\n"
                  "pwd\nexit 3\n")
    async with running_host(str(tmp_path), marked.env()) as host:
        with trio.fail_after(10):
            result = await run(host, "h1", echo, big)
    assert result.outcome == "exited" and result.exit_status == 3
    assert result.stdout.split() == ["300000", str(tmp_path)]
    assert len(result.stderr.encode()) < 70_000 and "omitted" in result.stderr


async def test_abort_kills_the_tree_and_a_missing_command_fails(tmp_path: pathlib.Path,
                                                                marked: Marked) -> None:
    pid_file = tmp_path / "child.pid"
    tree = script(tmp_path, "tree", f'sleep 30 & echo $! > "{pid_file}"\nwait\n')
    async with running_host(str(tmp_path), marked.env()) as host:
        async with trio.open_nursery() as nursery:
            answers: list[HooksRunResult] = []

            async def go() -> None:
                answers.append(await run(host, "h2", tree))

            nursery.start_soon(go)
            child = int(await wait_for_file(pid_file))
            abort: HooksAbortResult = await host.link.request(
                "hooks.abort", HooksAbortParams(host.session_id, "h2"))
            assert abort.found
        (answer,) = answers
        assert answer.outcome == "stopped" and gone(child)
        again: HooksAbortResult = await host.link.request(
            "hooks.abort", HooksAbortParams(host.session_id, "h2"))
        assert not again.found
        missing = await run(host, "h3", str(tmp_path / "no-such-hook"))
        assert missing.outcome == "failed" and "could not start" in missing.error
        with pytest.raises(RemoteError):
            await host.link.request("hooks.run", HooksRunParams("s-other", "h4", (tree,), "",
                                                                1.0))


async def test_a_hook_past_its_timeout_is_killed(tmp_path: pathlib.Path,
                                                 marked: Marked) -> None:
    slow = script(tmp_path, "slow", "sleep 30\n")
    async with running_host(str(tmp_path), marked.env()) as host:
        with trio.fail_after(10):
            result = await run(host, "h5", slow, limit=0.2)
    assert result.outcome == "timeout" and 200 <= result.duration_ms < 3000


async def test_the_host_leaving_kills_a_running_hook(tmp_path: pathlib.Path,
                                                     marked: Marked) -> None:
    pid_file = tmp_path / "hook.pid"
    slow = script(tmp_path, "slow", f'echo $$ > "{pid_file}"\nexec sleep 30\n')
    async with running_host(str(tmp_path), marked.env()) as host, trio.open_nursery() as n:
        async def go() -> None:
            try:
                await run(host, "h6", slow)
            except Exception:  # noqa: BLE001 -- the link closes under it: any end will do
                pass

        n.start_soon(go)
        pid = int(await wait_for_file(pid_file))
        with trio.fail_after(10):
            await host.link.stop()
        assert gone(pid)
