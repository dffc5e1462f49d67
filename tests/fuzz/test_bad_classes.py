"""Memory stays bounded under 20,000 frames of each class of bad input, one class after
the other: oversized frames, deep nesting, batches at and over the member limit, lone
surrogate escapes. For ``quiesce serve`` (a small frame limit, so oversized frames are
cheap) and for the host (whose 8 MiB limit makes 20,000 oversized frames 160 GB: that
class is the daemon's only). Every frame is answered as it deserves; RSS after each
class stays within a few MiB of where the run started (after a short warm-up of every
class, so the allocator's first arenas are not counted).

A batch at the limit is 256 messages: the suite streams 4,000 of them (a million
members, ~10 s); ``QUIESCE_BAD_FRAMES_FULL=1`` streams 20,000 of that class too."""

from __future__ import annotations

import os
import pathlib
import time
from collections.abc import Callable

import trio

from protocol.bounds import MAX_BATCH_MEMBERS
from runtime.clients.daemon_client import serve_command
from tests.conftest import Marked
from tests.fuzz.stream import Peer, host_command, spawned

MAX_FRAME = 16384
FRAMES = 20_000
FULL = bool(os.environ.get("QUIESCE_BAD_FRAMES_FULL"))
WARM_UP = 500
RSS_LIMIT = 6 * 2**20
INVALID_REQUEST, PARSE, METHOD_NOT_FOUND, INVALID_PARAMS = -32600, -32700, -32601, -32602

Frame = Callable[[int], bytes]


def oversized(i: int) -> bytes:
    return b'{"jsonrpc":"2.0","id":%d,"method":"session.list","params":{"p":"%s"}}' % (
        i, b"p" * MAX_FRAME)


def deep(i: int) -> bytes:
    return b'{"jsonrpc":"2.0","id":%d,"method":"x","params":{"a":%s1%s}}' % (
        i, b"[" * 3000, b"]" * 3000)


def batch_at_limit(i: int) -> bytes:
    quiet = b'{"jsonrpc":"2.0","id":%d,"result":null}' % -i  # an answer nobody waits for
    last = b'{"jsonrpc":"2.0","id":%d,"method":"no.such.method"}' % i
    return b"[" + b",".join([quiet] * (MAX_BATCH_MEMBERS - 1) + [last]) + b"]"


def batch_over_limit(i: int) -> bytes:
    return b"[" + b",".join([b"%d" % i] * (MAX_BATCH_MEMBERS + 1 + i % 2000)) + b"]"


def lone_surrogate(i: int) -> bytes:
    return b'{"jsonrpc":"2.0","id":%d,"method":"initialize","params":{"k\\udcff":"\\ud83d"}}' % i


CLASSES: dict[str, tuple[Frame, int]] = {  # the code each frame's answer carries
    "oversized": (oversized, INVALID_REQUEST),
    "deep": (deep, PARSE),
    "batch at the limit": (batch_at_limit, METHOD_NOT_FOUND),
    "batch over the limit": (batch_over_limit, INVALID_REQUEST),
    "lone surrogate": (lone_surrogate, INVALID_PARAMS),
}


def _code(answer: object) -> int | None:
    item = answer[0] if isinstance(answer, list) and answer else answer
    return item.get("error", {}).get("code") if isinstance(item, dict) else None


async def _stream(peer: Peer, make: Frame, count: int, code: int, start: int) -> None:
    peer.received.clear()
    data = b"".join(make(start + i) + b"\n" for i in range(count))
    for at in range(0, len(data), 1 << 20):
        await peer.stdin.send_all(data[at:at + (1 << 20)])
    with trio.fail_after(120):
        while len(peer.received) < count:
            await peer.changed.wait()
    peer.require_alive()
    codes = {_code(a) for a in peer.received}
    assert codes == {code}, (make.__name__, codes, peer.received[:2])


async def _classes(peer: Peer, classes: list[str]) -> dict[str, int]:
    """Warm up, then 20,000 frames of each class; RSS growth after each, in bytes."""
    for number, name in enumerate(classes):
        make, code = CLASSES[name]
        await _stream(peer, make, WARM_UP, code, 10_000_000 * (number + 1))
    baseline = peer.rss_now()
    growth = {}
    for number, name in enumerate(classes):
        make, code = CLASSES[name]
        started = time.monotonic()
        count = FRAMES if FULL or make is not batch_at_limit else FRAMES // 5
        await _stream(peer, make, count, code, 100_000_000 * (number + 1))
        growth[name] = peer.rss_now() - baseline
        print(f"{name}: {time.monotonic() - started:.1f} s, RSS {growth[name] / 2**20:+.1f} MiB")
    return growth


async def test_daemon_memory_is_bounded_per_bad_class(marked: Marked,
                                                      tmp_path: pathlib.Path) -> None:
    with trio.fail_after(600):
        async with spawned(serve_command(), marked.env(QUIESCE_MAX_FRAME=str(MAX_FRAME)),
                           str(tmp_path / "daemon.log")) as daemon:
            growth = await _classes(daemon, list(CLASSES))
            assert all(g < RSS_LIMIT for g in growth.values()), growth
            answer = await daemon.call({"jsonrpc": "2.0", "id": "after", "method":
                                        "initialize", "params": {"protocolVersion": "1.0"}})
            assert answer["result"]["protocolVersion"] == "1.0"


async def test_host_memory_is_bounded_per_bad_class(marked: Marked,
                                                    tmp_path: pathlib.Path) -> None:
    with trio.fail_after(600):
        async with spawned(host_command(), marked.env(), str(tmp_path / "host.log")) as host:
            growth = await _classes(host, [c for c in CLASSES if c != "oversized"])
            assert all(g < RSS_LIMIT for g in growth.values()), growth
            answer = await host.call({"jsonrpc": "2.0", "id": "after", "method": "initialize",
                                      "params": {"protocolVersion": "1.0"}})
            assert answer["result"]["protocolVersion"] == "1.0"
