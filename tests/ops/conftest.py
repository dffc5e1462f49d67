from __future__ import annotations

import pathlib
import shutil
import tempfile
from collections.abc import Iterator

import pytest


@pytest.fixture
def xdg(monkeypatch: pytest.MonkeyPatch) -> Iterator[pathlib.Path]:
    """A private XDG_RUNTIME_DIR, short because a socket path has at most 107 bytes."""
    base = pathlib.Path(tempfile.mkdtemp(prefix="qops-"))
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(base))
    try:
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)
