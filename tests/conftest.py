from __future__ import annotations

import os
import pathlib
import shutil
import tempfile
import time
from collections.abc import Iterator

import pytest

from tests.support import marked_env, new_mark, wait_no_marked_processes


class Marked:
    def __init__(self, data_dir: pathlib.Path, run_dir: pathlib.Path) -> None:
        self.mark = new_mark()
        self.data_dir = data_dir
        self.run_dir = run_dir  # XDG_RUNTIME_DIR: where the ops socket goes

    def env(self, **extra: str) -> dict[str, str]:
        return marked_env(self.mark, QUIESCE_DATA_DIR=str(self.data_dir),
                          XDG_RUNTIME_DIR=str(self.run_dir), **extra)


@pytest.fixture
def marked(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Marked]:
    """An environment for spawned processes (data kept in a temporary directory); the
    test fails if any process started with it survives the test."""
    run_dir = pathlib.Path(tempfile.mkdtemp(prefix="qrun-"))  # short: socket paths are bounded
    m = Marked(tmp_path_factory.mktemp("data"), run_dir)
    yield m
    survivors = wait_no_marked_processes(m.mark)
    shutil.rmtree(run_dir, ignore_errors=True)
    assert not survivors, f"processes left alive: {[p.pid for p in survivors]}"


@pytest.fixture(autouse=True)
def no_cgroup_left() -> Iterator[None]:
    """No test leaves a host's cgroup directory behind (``quiesce-host-<pid>`` of a host
    that is gone); one left is removed, and fails the test."""
    from runtime.proc import cgroups

    yield
    base = cgroups.own_cgroup_dir()
    if base is None or not os.path.isdir(base):
        return
    left = [name for name in os.listdir(base) if name.startswith(cgroups.HOST_PREFIX)
            and not _alive(int(name[len(cgroups.HOST_PREFIX):]))]
    for name in left:
        path = os.path.join(base, name)
        cgroups.Cgroup(path).kill()
        for _ in range(100):
            if cgroups.remove_tree(path):
                break
            time.sleep(0.02)
    assert not left, f"cgroups left behind: {left}"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
