"""Grep and Glob cannot read outside the workspace, whatever is swapped under them while
they run (issue 31, item 2): a directory of the workspace is flipped, atomically and
without pause, between a real directory and a symlink to an outside one while Greps and
Globs run against the real host. The host's check of the path and ripgrep's own opening of
it are two lookups; the kernel (Landlock: ripgrep reads only beneath the workspace)
closes the gap, and does so with the sandbox's mode ``off`` too.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import pathlib
import threading

import pytest
import trio

from host.sandbox.landlock import kernel_abi
from tests.conftest import Marked
from tests.kit.host import running_host

RENAME_EXCHANGE = 1 << 1
AT_FDCWD = -100
SECRET = "needle-OUTSIDE-secret"


def _exchange(a: str, b: str) -> None:
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    if libc.renameat2(AT_FDCWD, a.encode(), AT_FDCWD, b.encode(), RENAME_EXCHANGE) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def _tree(tmp_path: pathlib.Path) -> tuple[pathlib.Path, pathlib.Path]:
    workspace = tmp_path / "ws"
    (workspace / "d").mkdir(parents=True)
    (workspace / "d" / "f.txt").write_text("needle-inside\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "f.txt").write_text(SECRET + "\n")
    (outside / "outside-only-name.txt").write_text(SECRET + "\n")
    (workspace / "swap").symlink_to(outside)  # exchanged with d, over and over
    return workspace, outside


def _flipper(workspace: pathlib.Path, stop: threading.Event) -> None:
    a, b = str(workspace / "d"), str(workspace / "swap")
    while not stop.is_set():
        _exchange(a, b)


@pytest.mark.skipif(kernel_abi()[0] < 1, reason="needs Landlock")
@pytest.mark.parametrize("mode", ["workspace-write", "off"])
async def test_grep_and_glob_never_read_outside_under_a_symlink_flip(
        tmp_path: pathlib.Path, marked: Marked, mode: str) -> None:
    workspace, _ = _tree(tmp_path)
    stop = threading.Event()
    flipper = threading.Thread(target=_flipper, args=(workspace, stop), daemon=True)
    leaks: list[str] = []
    counts = {"Grep": 0, "Glob": 0}
    async with running_host(str(workspace), marked.env(),
                            config={"sandbox": {"mode": mode}}) as host:
        flipper.start()
        try:
            with trio.fail_after(100):  # inside pytest's own timeout: a clean failure
                for i in range(150):
                    for tool, args in (
                            ("Grep", {"pattern": "needle"}),
                            ("Grep", {"pattern": "needle", "path": "d"}),
                            ("Grep", {"pattern": "needle", "path": "d/f.txt"}),
                            ("Glob", {"pattern": "**/*.txt"}),
                            ("Glob", {"pattern": "*", "path": "d"})):
                        result = await host.execute(f"c{i}-{tool}-{len(args)}", tool, args)
                        text = "".join(getattr(c, "text", "") for c in result.content)
                        counts[tool] += 1
                        if SECRET in text or "outside-only-name" in text:
                            leaks.append(f"{tool} {args}: {text[:200]!r}")
        finally:
            stop.set()
            flipper.join(5)
    assert not leaks, f"{len(leaks)} of {sum(counts.values())} searches read outside: {leaks[:3]}"
