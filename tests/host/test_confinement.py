"""Confinement is checked again right before the side effect, after a permission wait."""

from __future__ import annotations

import os
import pathlib

import trio

from protocol.messages.host import PermissionRequestParams, PermissionRequestResult
from tests.conftest import Marked
from tests.kit.host import running_host


async def test_symlink_swapped_during_permission_wait(tmp_path: pathlib.Path,
                                                      marked: Marked) -> None:
    workspace = tmp_path / "ws"
    (workspace / "inside").mkdir(parents=True)
    outside = tmp_path / "outside"
    outside.mkdir()
    os.symlink(workspace / "inside", workspace / "link")

    async def swap_then_allow(params: PermissionRequestParams) -> PermissionRequestResult:
        (workspace / "link").unlink()
        os.symlink(outside, workspace / "link")  # now points out of the workspace
        return PermissionRequestResult("allow-once")

    async with running_host(str(workspace), marked.env(), mode="ask",
                            answer=swap_then_allow) as host:
        with trio.fail_after(10):
            result = await host.execute("w1", "Write", {"path": "link/f.txt", "content": "x"})
        assert result.code == "PATH_OUTSIDE_WORKSPACE"
        assert list(outside.iterdir()) == []
