"""Fuzz the host (``python -m host``) on its raw pipes, as a broken runtime would drive it:
tens of thousands of bad, odd and valid frames over one host process; every request gets
the right answer, the host stays up, memory and tombstones stay bounded, and a real tool
call afterwards still works.

Hypothesis draws the messages (``tests/fuzz/wire.py``); each is streamed several times
with fresh ids and a re-drawn layout (seeded, reproducible with QUIESCE_FUZZ_SEED).
"""

from __future__ import annotations

import pathlib
import random

import trio

from protocol.framing import DEFAULT_MAX_FRAME_SIZE
from tests.conftest import Marked
from tests.fuzz import wire
from tests.fuzz.stream import (
    check,
    draw_templates,
    fuzz_seed,
    host_command,
    log_errors,
    require_clean,
    spawned,
    summary,
    tolerate_known_bugs,
)

SESSION = "s-fuzz"
EXAMPLES = 30  # hypothesis examples, each one message of every kind: ~1,250 drawn
REPEATS = 16  # each streamed this many times, re-laid-out: ~20,000 frames
RSS_GROWTH_LIMIT = 50 * 2**20
TOMBSTONE_CAPACITY = 10_000  # HostConfig's default


async def test_fuzz_host(marked: Marked, tmp_path: pathlib.Path) -> None:
    seed_value = fuzz_seed()
    rnd = random.Random(seed_value)
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "notes.txt").write_text("alpha\nbeta\ngamma\n")
    link = wire.Link(tuple(wire.host_methods(session_id=SESSION,
                                             tolerate=tolerate_known_bugs())),
                     max_frame=DEFAULT_MAX_FRAME_SIZE)
    templates = draw_templates(wire.messages(link), examples=EXAMPLES,
                               seed_value=seed_value)
    ids = wire.Ids()
    where = f"(QUIESCE_FUZZ_SEED={seed_value}; host log {tmp_path / 'host.log'})"

    with trio.fail_after(60):
        async with spawned(host_command(), marked.env(), str(tmp_path / "host.log")) as host:
            answer = await host.call({"jsonrpc": "2.0", "id": "hello", "method": "initialize",
                                      "params": {"protocolVersion": "1.0"}})
            assert answer["result"]["protocolVersion"] == "1.0"
            answer = await host.call({"jsonrpc": "2.0", "id": "open", "method": "session.open",
                                      "params": {"sessionId": SESSION,
                                                 "workspace": str(workspace),
                                                 "permissionMode": "auto"}})
            assert answer["result"] == {}
            host.received.clear()
            baseline = host.rss_now()
            samples_from = len(host.rss)

            msgs: list[wire.Msg] = []
            for _ in range(REPEATS):
                order = list(templates)
                rnd.shuffle(order)
                msgs += wire.instantiate(order, ids, wire.READY, rnd)
            # The frame limit, at full size: exactly at it is served, one byte more is not,
            # and neither is a frame of 9 MiB (arriving in chunks of every size).
            limit = DEFAULT_MAX_FRAME_SIZE
            abort = {"sessionId": "s-other", "callId": "big", "tool": "Read"}
            for rid, size, answer_id, codes in [
                ("at-limit", limit, "at-limit", frozenset({wire.OK})),
                ("over-limit", limit + 1, None, frozenset({wire.INVALID_REQUEST})),
                ("far-over", 9 * 2**20, None, frozenset({wire.INVALID_REQUEST})),
            ]:
                frame = wire.exact_size_request("tools.abort", abort, "reason", size, rid)
                msgs.insert(rnd.randrange(len(msgs)),
                            wire.Msg(frame, wire.Answer(answer_id, codes), f"{rid} frame"))
            started = trio.current_time()
            await host.send_chunked([m.frame for m in msgs], rnd)
            await host.settle(sum(m.answer is not None for m in msgs), within=40)
            seconds = trio.current_time() - started
            host.require_alive("while answering the stream")
            report = check(msgs, host.received)
            rss = host.rss[samples_from:]
            print(summary("host", report, rss, baseline, seconds), where)
            require_clean(report, where)
            assert not host.undecodable, host.undecodable[:3]
            # It may report tool output; it must never ask (auto mode) or send anything else.
            assert {m.get("method") for m in host.from_peer} <= {"tools.output"}, \
                host.from_peer[:3]
            assert report.expected_answers > 10_000

            # Bounded: nothing left in flight or queued, tombstones within capacity.
            stats = (await host.call({"jsonrpc": "2.0", "id": "stats",
                                      "method": "host.stats"}))["result"]
            assert stats["callsInFlight"] == 0 and stats["admissionWaiting"] == 0, stats
            assert stats["admissionRunning"] == 0, stats
            assert stats["tombstones"] <= TOMBSTONE_CAPACITY, stats
            end_rss = host.rss_now()
            assert end_rss - baseline < RSS_GROWTH_LIMIT, (baseline, end_rss, where)
            assert max(rss, default=0) - baseline < 2 * RSS_GROWTH_LIMIT, (baseline, rss, where)

            # Still serving, and correctly: a real Read in the session.
            assert host.process.returncode is None
            read = await host.call({"jsonrpc": "2.0", "id": "read", "method": "tools.execute",
                                    "params": {"sessionId": SESSION, "callId": "final",
                                               "tool": "Read", "args": {"path": "notes.txt"}}})
            result = read["result"]
            assert not result.get("isError") and "beta" in result["content"][0]["text"], result
            assert not log_errors(host.log_path), (where, log_errors(host.log_path)[:5])
            await host.stdin.aclose()
            with trio.fail_after(20):
                assert await host.process.wait() == 0
