"""What every provider test against the fake server needs: no proxy from the environment,
no thread left behind, and the server itself."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
import trio

from tests.providers.fakeserver import FakeServer


@pytest.fixture(autouse=True)
def _no_proxies_no_threads(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in ("http_proxy", "https_proxy", "all_proxy", "HTTP_PROXY", "HTTPS_PROXY",
                 "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
    before = set(threading.enumerate())
    yield
    assert set(threading.enumerate()) <= before, "the test left threads behind"


@pytest.fixture
async def server(nursery: trio.Nursery) -> FakeServer:
    fake = FakeServer()
    await fake.start(nursery)
    return fake
