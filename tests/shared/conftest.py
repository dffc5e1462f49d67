"""Fixtures of the shared (runtime and host) process modules' tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from runtime.proc import cgroups


@pytest.fixture
def scratch_cgroup() -> Iterator[cgroups.HostCgroups]:
    """A host cgroup directory of this test process's own, removed after the test."""
    made = cgroups.HostCgroups.create()
    if isinstance(made, str):
        pytest.skip(f"no cgroups here: {made}")
    try:
        yield made
    finally:
        made.close()
