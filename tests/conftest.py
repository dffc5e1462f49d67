from __future__ import annotations

import pathlib
from collections.abc import Iterator

import pytest

from tests.support import marked_env, new_mark, wait_no_marked_processes


class Marked:
    def __init__(self, data_dir: pathlib.Path) -> None:
        self.mark = new_mark()
        self.data_dir = data_dir

    def env(self, **extra: str) -> dict[str, str]:
        return marked_env(self.mark, QUIESCE_DATA_DIR=str(self.data_dir), **extra)


@pytest.fixture
def marked(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Marked]:
    """An environment for spawned processes (data kept in a temporary directory); the
    test fails if any process started with it survives the test."""
    m = Marked(tmp_path_factory.mktemp("data"))
    yield m
    survivors = wait_no_marked_processes(m.mark)
    assert not survivors, f"processes left alive: {[p.pid for p in survivors]}"
