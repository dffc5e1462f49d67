from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support import marked_env, new_mark, wait_no_marked_processes


class Marked:
    def __init__(self) -> None:
        self.mark = new_mark()

    def env(self, **extra: str) -> dict[str, str]:
        return marked_env(self.mark, **extra)


@pytest.fixture
def marked() -> Iterator[Marked]:
    """An environment for spawned processes; the test fails if any of them survives it."""
    m = Marked()
    yield m
    survivors = wait_no_marked_processes(m.mark)
    assert not survivors, f"processes left alive: {[p.pid for p in survivors]}"
