"""Tools on file systems that answer slowly or never (issue 31, items 1 and 10), against a
real host: a FUSE server of the test's own (``slowfuse.py``, root only) as the lower layer
of an overlay mount that is the workspace.

- a Read of a file whose lower layer never answers must not block the host's loop:
  another session's Read answers at once, and the stuck Read's stop answers too;
- a Grep that ripgrep cannot complete for a reason other than its pattern (an I/O error)
  names that reason, not an "invalid regular expression".
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import pathlib
import subprocess
import sys
from collections.abc import Iterator

import pytest
import trio

from protocol.messages.host import SessionOpenParams, ToolsExecuteParams
from protocol.tools import ToolResult
from tests.conftest import Marked
from tests.kit.host import Host, running_host

SERVER = pathlib.Path(__file__).with_name("slowfuse.py")
pytestmark = pytest.mark.skipif(
    sys.platform != "linux" or os.geteuid() != 0 or not os.path.exists("/dev/fuse"),
    reason="mounting a FUSE and an overlay file system needs root and /dev/fuse")

_MNT_DETACH = 2


def _mount(source: str, target: pathlib.Path, fstype: str, options: str) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.mount(source.encode(), os.fsencode(target), fstype.encode(), 0,
                  options.encode()) != 0:
        errno_ = ctypes.get_errno()
        raise OSError(errno_, f"mount {fstype} on {target}: {os.strerror(errno_)}")


def _unmount(target: pathlib.Path) -> None:
    ctypes.CDLL(None, use_errno=True).umount2(os.fsencode(target), _MNT_DETACH)


class Fuse:
    """The FUSE server and the mounts above it; ``release`` ends every held request."""

    def __init__(self, server: subprocess.Popen[bytes], lower: pathlib.Path) -> None:
        self.server = server
        self.lower = lower

    def release(self) -> None:
        if self.server.poll() is None:
            self.server.kill()  # closes /dev/fuse: every waiting request fails at once
            self.server.wait(10)
        if self.server.stdout is not None:
            self.server.stdout.close()


@contextlib.contextmanager
def slow_fuse(tmp_path: pathlib.Path, *, overlay: bool) -> Iterator[tuple[Fuse, pathlib.Path]]:
    """The FUSE file system, and the directory to use (an overlay above it, or itself)."""
    lower, upper, work, merged = (tmp_path / n for n in ("lower", "upper", "work", "merged"))
    for d in (lower, upper, work, merged):
        d.mkdir()
    server = subprocess.Popen([sys.executable, str(SERVER), str(lower)],
                              stdout=subprocess.PIPE)
    fuse = Fuse(server, lower)
    mounted: list[pathlib.Path] = []
    try:
        assert server.stdout is not None
        if server.stdout.readline().strip() != b"ready":
            pytest.skip("the FUSE file system could not be mounted")
        mounted.append(lower)
        if overlay:
            _mount("overlay", merged, "overlay",
                   f"lowerdir={lower},upperdir={upper},workdir={work}")
            mounted.append(merged)
        yield fuse, merged if overlay else lower
    finally:
        fuse.release()
        for target in reversed(mounted):
            _unmount(target)


async def _execute(host: Host, session: str, call_id: str, tool: str,
                   args: dict[str, object]) -> ToolResult:
    result: ToolResult = await host.link.request(
        "tools.execute", ToolsExecuteParams(session, call_id, tool, args))
    return result


async def test_a_read_on_an_overlay_over_a_stuck_fuse_never_blocks_the_host(
        tmp_path: pathlib.Path, marked: Marked) -> None:
    other = tmp_path / "other"
    other.mkdir()
    (other / "a.txt").write_text("hello\n")
    with slow_fuse(tmp_path, overlay=True) as (fuse, workspace):
        assert (workspace / "fast.txt").read_text() == "fast\n"  # the overlay works
        async with running_host(str(workspace), marked.env()) as host:
            try:
                await host.link.request("session.open",
                                        SessionOpenParams("s-other", str(other), "auto"))
                results: dict[str, ToolResult] = {}

                async def stuck_read() -> None:
                    results["r1"] = await host.execute("r1", "Read", {"path": "slow.txt"})

                async with trio.open_nursery() as nursery:
                    nursery.start_soon(stuck_read)
                    with trio.fail_after(10):  # its body runs
                        while "r1" not in {c.call_id for c in (await host.stats()).calls
                                           if c.state == "running"}:
                            await trio.sleep(0.02)
                    await trio.sleep(0.2)  # well into its read
                    with trio.fail_after(3):  # another session is served meanwhile
                        other_read = await _execute(host, "s-other", "o1", "Read",
                                                    {"path": "a.txt"})
                        stats = await host.stats()
                    assert other_read.code is None and "hello" in str(other_read.content)
                    assert stats.calls
                    with trio.fail_after(3):  # and the stuck Read's stop answers
                        aborted = await host.abort("r1", "Read")
                    assert aborted.found
                assert results["r1"].code == "ABORTED"
            finally:
                fuse.release()  # nothing of the host waits on it any longer


@pytest.mark.parametrize(("args", "why"), [
    # A walk that meets the unreadable file: ripgrep's I/O error, exit status 2.
    ({"pattern": "bad", "glob": "bad.txt"}, "Input/output error"),
    # The file named: ripgrep maps it and dies of SIGBUS at the read.
    ({"pattern": "bad", "path": "bad.txt"}, "SIGBUS"),
])
async def test_a_grep_that_ripgrep_cannot_read_says_why(
        tmp_path: pathlib.Path, marked: Marked, args: dict[str, str], why: str) -> None:
    with slow_fuse(tmp_path, overlay=False) as (fuse, workspace):
        async with running_host(str(workspace), marked.env()) as host:
            try:
                with trio.fail_after(10):
                    result = await host.execute("g1", "Grep", args)
                    valid = await host.execute("g2", "Grep", {"pattern": "(", "glob": "x"})
            finally:
                fuse.release()
    assert result.code == "TOOL_FAILED", result
    text = str(result.content)
    assert "invalid regular expression" not in text and why in text, text
    assert valid.code == "INVALID_PARAMS" and "invalid regular expression" in str(
        valid.content), valid


async def test_a_glob_that_ripgrep_cannot_list_says_why(tmp_path: pathlib.Path,
                                                       marked: Marked) -> None:
    with slow_fuse(tmp_path, overlay=False) as (fuse, workspace):
        assert sorted(os.listdir(workspace)) == ["bad.txt", "baddir", "fast.txt", "slow.txt"]
        async with running_host(str(workspace), marked.env()) as host:
            try:
                with trio.fail_after(10):
                    result = await host.execute("g1", "Glob", {"pattern": "*", "path": "baddir"})
                    valid = await host.execute("g2", "Glob", {"pattern": "*.txt"})
            finally:
                fuse.release()
    assert result.code == "TOOL_FAILED", result
    text = str(result.content)
    assert "invalid glob pattern" not in text and "Input/output error" in text, text
    # A walk that meets the unlistable directory still lists what it found.
    assert valid.code is None and "fast.txt" in str(valid.content), valid
