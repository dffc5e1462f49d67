"""Fuzz the host (``python -m host``) on its raw pipes, as a broken runtime would drive it:
tens of thousands of bad, odd and valid frames over one host process; every request gets
the right answer (before ``initialize``, only ``initialize`` is served), the host stays
up, memory stays bounded (and stops growing), tombstones stay bounded, and a real tool
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
    before_handshake,
    draw_templates,
    fuzz_seed,
    host_command,
    in_two_halves,
    log_errors,
    ready_messages,
    spawned,
)

SESSION = "s-fuzz"
EXAMPLES = 30  # hypothesis examples, each one message of every kind: ~1,250 drawn
FRAMES = 21_000  # streamed after the handshake: the drawn messages, re-laid-out
MIN_FRAMES = 20_000
PRE_TEMPLATES = 200  # of them, streamed before the handshake as well
RSS_GROWTH_LIMIT = 16 * 2**20  # over the whole stream (the peak: twice that)
# Over its second half memory must stop growing. (A tombstone once kept its at-limit 8 MiB
# call id: the half holding that frame grew 8 MiB. Tombstones now keep a digest.)
RSS_PLATEAU_LIMIT = 4 * 2**20
TOMBSTONE_CAPACITY = 10_000  # HostConfig's default


async def test_fuzz_host(marked: Marked, tmp_path: pathlib.Path) -> None:
    seed_value = fuzz_seed()
    rnd = random.Random(seed_value)
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "notes.txt").write_text("alpha\nbeta\ngamma\n")
    link = wire.Link(tuple(wire.host_methods(session_id=SESSION)),
                     max_frame=DEFAULT_MAX_FRAME_SIZE)
    templates = draw_templates(wire.messages(link), examples=EXAMPLES,
                               seed_value=seed_value)
    ids = wire.Ids()
    where = f"(QUIESCE_FUZZ_SEED={seed_value}; host log {tmp_path / 'host.log'})"

    with trio.fail_after(90):
        async with spawned(host_command(), marked.env(), str(tmp_path / "host.log")) as host:
            # Out of order: everything before the handshake (no successful initialize).
            pre = await before_handshake(host, templates, ids, PRE_TEMPLATES, rnd, where)
            assert pre.codes[wire.NOT_INITIALIZED] > 0, pre.codes

            answer = await host.call({"jsonrpc": "2.0", "id": "hello", "method": "initialize",
                                      "params": {"protocolVersion": "1.0"}})
            assert answer["result"]["protocolVersion"] == "1.0"
            answer = await host.call({"jsonrpc": "2.0", "id": "open", "method": "session.open",
                                      "params": {"sessionId": SESSION,
                                                 "workspace": str(workspace),
                                                 "permissionMode": "auto"}})
            assert set(answer["result"]) <= {"sandbox"}, answer
            host.received.clear()
            baseline = host.rss_now()
            samples_from = len(host.rss)

            msgs = ready_messages(templates, ids, rnd, FRAMES)
            # The frame limit, at full size: exactly at it is served, one byte more is not,
            # and neither is a frame of 9 MiB (arriving in chunks of every size).
            limit = DEFAULT_MAX_FRAME_SIZE
            abort = {"sessionId": "s-other", "callId": "big", "tool": "Read"}
            for rid, size, answer_id, codes in [
                ("at-limit", limit, "at-limit", frozenset({wire.OK})),
                ("over-limit", limit + 1, None, frozenset({wire.INVALID_REQUEST})),
                ("far-over", 9 * 2**20, None, frozenset({wire.INVALID_REQUEST})),
            ]:
                frame = wire.exact_size_request("tools.abort", abort, "callId", size, rid)
                msgs.insert(rnd.randrange(len(msgs)),
                            wire.Msg(frame, wire.Answer(answer_id, codes), f"{rid} frame"))
            halves = await in_two_halves(host, msgs, rnd, label="host", baseline=baseline,
                                         samples_from=samples_from, where=where)
            first, second, middle_rss, rss = (halves.first, halves.second, halves.middle_rss,
                                              halves.rss)
            assert not host.undecodable, host.undecodable[:3]
            # It may report tool output; it must never ask (auto mode) or send anything else.
            assert {m.get("method") for m in host.from_peer} <= {"tools.output",
                                                                 "tools.started"}, \
                host.from_peer[:3]
            assert first.sent + second.sent >= MIN_FRAMES, (pre.sent, first.sent, second.sent)
            assert first.expected_answers + second.expected_answers > 15_000
            assert first.codes[wire.OK] + second.codes[wire.OK] > 1_000  # valid ones served

            # Bounded: nothing left in flight or queued, tombstones within capacity.
            stats = (await host.call({"jsonrpc": "2.0", "id": "stats",
                                      "method": "host.stats"}))["result"]
            assert stats["callsInFlight"] == 0 and stats["admissionWaiting"] == 0, stats
            assert stats["admissionRunning"] == 0, stats
            assert stats["tombstones"] <= TOMBSTONE_CAPACITY, stats
            end_rss = host.rss_now()
            assert end_rss - baseline < RSS_GROWTH_LIMIT, (baseline, end_rss, where)
            assert max(rss, default=0) - baseline < 2 * RSS_GROWTH_LIMIT, (baseline, rss, where)
            assert end_rss - middle_rss < RSS_PLATEAU_LIMIT, (middle_rss, end_rss, where)

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
