from __future__ import annotations

import pathlib
import tracemalloc

import pytest

from host.tombstones import TombstoneRegistry
from tests.conftest import Marked
from tests.kit.answers import allow
from tests.kit.host import running_host


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_tombstone_hit_is_consumed_once() -> None:
    reg = TombstoneRegistry(ttl=10)
    reg.add(("s", "c1", "Bash"))
    assert ("s", "c1", "Bash") in reg
    assert reg.take(("s", "c1", "Bash"))
    assert not reg.take(("s", "c1", "Bash"))


def test_tombstone_never_matches_another_tool() -> None:
    reg = TombstoneRegistry(ttl=10)
    reg.add(("s", "c1", "Bash"))
    assert not reg.take(("s", "c1", "Write"))
    assert not reg.take(("other", "c1", "Bash"))
    assert reg.take(("s", "c1", "Bash"))


def test_tombstones_expire() -> None:
    clock = FakeClock()
    reg = TombstoneRegistry(ttl=5, clock=clock)
    reg.add(("s", "c1", "Bash"))
    clock.now = 4.9
    assert ("s", "c1", "Bash") in reg
    clock.now = 5.0
    assert not reg.take(("s", "c1", "Bash"))
    reg.add(("s", "c2", "Bash"))
    clock.now = 20
    assert len(reg) == 0 and reg.expired == 2


def test_capacity_drops_the_oldest() -> None:
    reg = TombstoneRegistry(ttl=60, capacity=3)
    for i in range(5):
        reg.add(("s", f"c{i}", "Read"))
    assert len(reg) == 3 and reg.evicted == 2
    assert not reg.take(("s", "c0", "Read")) and not reg.take(("s", "c1", "Read"))
    assert reg.take(("s", "c4", "Read"))


def test_bad_configuration_is_refused() -> None:
    with pytest.raises(ValueError):
        TombstoneRegistry(ttl=0)
    with pytest.raises(ValueError):
        TombstoneRegistry(capacity=0)


async def test_early_abort_stops_the_call_before_permission(tmp_path: pathlib.Path,
                                                           marked: Marked) -> None:
    async with running_host(str(tmp_path), marked.env(), mode="ask", answer=allow) as host:
        state = await host.abort("c1", "Bash")
        assert not state.found and state.state == "tombstoned"
        result = await host.execute("c1", "Bash", {"command": "touch made"})
        assert result.code == "ABORTED_BEFORE_DISPATCH" and not result.body_invoked
        assert host.permission_requests == []
        assert not (tmp_path / "made").exists()
        # Same call id, another tool: unaffected.
        await host.abort("c2", "Bash")
        other = await host.execute("c2", "Write", {"path": "w.txt", "content": "ok"})
        assert not other.is_error and (tmp_path / "w.txt").read_text() == "ok"


async def test_expired_tombstone_no_longer_stops(tmp_path: pathlib.Path,
                                                 marked: Marked) -> None:
    import trio

    async with running_host(str(tmp_path), marked.env(), config={"tombstone_ttl": 0.2}) as host:
        await host.abort("c1", "Bash")
        await trio.sleep(0.4)
        result = await host.execute("c1", "Bash", {"command": "echo ran"})
        assert not result.is_error and "ran" in str(result.content)


async def test_tombstone_capacity_and_count_are_observable(tmp_path: pathlib.Path,
                                                           marked: Marked) -> None:
    from protocol.messages.common import Empty

    async with running_host(str(tmp_path), marked.env(),
                            config={"tombstone_capacity": 2}) as host:
        for i in range(3):
            await host.abort(f"early-{i}", "Bash")
        stats = await host.link.request("host.stats", Empty())
        assert stats.tombstones == 2 and stats.tombstones_evicted == 1
        # The evicted (oldest) one no longer stops its call; the newest still does.
        oldest = await host.execute("early-0", "Bash", {"command": "echo ran"})
        newest = await host.execute("early-2", "Bash", {"command": "echo ran"})
        assert not oldest.is_error and newest.code == "ABORTED_BEFORE_DISPATCH"
        stats = await host.link.request("host.stats", Empty())
        assert stats.tombstones == 1 and stats.calls_in_flight == 0


def test_memory_is_bounded_by_count_not_by_id_length() -> None:
    # Ids are bounded only by the frame limit: tombstones of 1 MiB call ids must not
    # keep a MiB each (the host fuzz's 8 MiB plateau growth was one such tombstone).
    registry = TombstoneRegistry(capacity=100)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for n in range(20):
            registry.add(("s", f"{n}-" + "x" * 2**20, "Read"))
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert held < 64 * 1024, held
    assert ("s", "3-" + "x" * 2**20, "Read") in registry
    assert ("s", "3-" + "x" * 2**20, "Grep") not in registry


def test_keys_that_join_alike_stay_apart() -> None:
    registry = TombstoneRegistry()
    registry.add(("a", "b\0c", "Read"))
    assert ("a\0b", "c", "Read") not in registry
    assert registry.take(("a", "b\0c", "Read"))
    registry.add(("s", "\udcff", "Read"))  # a lone surrogate is a key like any other
    assert ("s", "\udcff", "Read") in registry
