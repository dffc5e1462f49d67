"""Fuzz ``quiesce serve``: tens of thousands of bad, odd and valid frames over one
daemon process; every request gets the right answer, the daemon stays up, memory
stays bounded, and a real request afterwards still works.

Hypothesis draws the messages (``tests/fuzz/wire.py``); each drawn message is then
streamed several times with fresh ids and a re-drawn layout (seeded, reproducible
with QUIESCE_FUZZ_SEED). QUIESCE_FUZZ_STRICT=1 adds the inputs of known, reported bugs.
"""

from __future__ import annotations

import pathlib
import random

import trio

from runtime.client import serve_command
from tests.conftest import Marked
from tests.fuzz import wire
from tests.fuzz.stream import (
    check,
    draw_templates,
    fuzz_seed,
    log_errors,
    require_clean,
    spawned,
    summary,
    tolerate_known_bugs,
)

MAX_FRAME = 16384  # small, so oversized frames are cheap to send
EXAMPLES = 30  # hypothesis examples, each one message of every kind: ~1,250 drawn
REPEATS = 16  # each streamed this many times, re-laid-out: ~20,000 frames
PRE_TEMPLATES = 200  # of them, streamed before the handshake as well
RSS_GROWTH_LIMIT = 50 * 2**20


async def test_fuzz_quiesce_serve(marked: Marked, tmp_path: pathlib.Path) -> None:
    seed_value = fuzz_seed()
    rnd = random.Random(seed_value)
    link = wire.Link(tuple(wire.client_methods(tolerate=tolerate_known_bugs())),
                     max_frame=MAX_FRAME)
    templates = draw_templates(wire.messages(link, oversize=MAX_FRAME), examples=EXAMPLES,
                               seed_value=seed_value)
    ids = wire.Ids()
    where = f"(QUIESCE_FUZZ_SEED={seed_value}; daemon log {tmp_path / 'daemon.log'})"

    with trio.fail_after(60):
        async with spawned(serve_command(), marked.env(QUIESCE_MAX_FRAME=str(MAX_FRAME)),
                           str(tmp_path / "daemon.log")) as daemon:
            # Out of order: everything before the handshake (no successful initialize).
            early = [t for t in templates if not t.initializes][:PRE_TEMPLATES]
            pre = wire.instantiate(early, ids, wire.PRE)
            await daemon.send_chunked([m.frame for m in pre], rnd)
            await daemon.settle(sum(m.answer is not None for m in pre), within=20)
            daemon.require_alive("before the handshake")
            require_clean(check(pre, daemon.received), where)
            daemon.received.clear()

            answer = await daemon.call({"jsonrpc": "2.0", "id": "hello", "method": "initialize",
                                        "params": {"protocolVersion": "1.0"}})
            assert answer["result"]["protocolVersion"] == "1.0"
            daemon.received.clear()
            baseline = daemon.rss_now()
            samples_from = len(daemon.rss)

            msgs: list[wire.Msg] = []
            for _ in range(REPEATS):
                order = list(templates)
                rnd.shuffle(order)
                msgs += wire.instantiate(order, ids, wire.READY, rnd)
            # A frame exactly at the limit is served; one byte more is not.
            at_limit = wire.exact_size_request("agent.prompt", {"sessionId": "s-000000000000"},
                                               "text", MAX_FRAME, "at-limit")
            msgs.append(wire.Msg(at_limit, wire.Answer("at-limit", frozenset({wire.NOT_FOUND})),
                                 "frame at the limit"))
            over = wire.exact_size_request("agent.prompt", {"sessionId": "s-000000000000"},
                                           "text", MAX_FRAME + 1, "over-limit")
            msgs.append(wire.Msg(over, wire.Answer(None, frozenset({wire.INVALID_REQUEST})),
                                 "frame one byte over the limit"))
            started = trio.current_time()
            await daemon.send_chunked([m.frame for m in msgs], rnd)
            await daemon.settle(sum(m.answer is not None for m in msgs), within=40)
            seconds = trio.current_time() - started
            daemon.require_alive("while answering the stream")
            report = check(msgs, daemon.received)
            rss = daemon.rss[samples_from:]
            print(summary("quiesce serve", report, rss, baseline, seconds), where)
            require_clean(report, where)
            assert not daemon.undecodable, daemon.undecodable[:3]
            assert not daemon.from_peer, daemon.from_peer[:3]  # no session: nothing to say
            assert report.expected_answers > 10_000

            end_rss = daemon.rss_now()
            assert end_rss - baseline < RSS_GROWTH_LIMIT, (baseline, end_rss, where)
            assert max(rss, default=0) - baseline < 2 * RSS_GROWTH_LIMIT, (baseline, rss, where)

            # Still serving, and correctly: a real session, then the list shows it.
            assert daemon.process.returncode is None
            opened = await daemon.call({"jsonrpc": "2.0", "id": "after", "method": "session.new",
                                        "params": {"workspace": str(tmp_path)}})
            session_id = opened["result"]["sessionId"]
            listed = await daemon.call({"jsonrpc": "2.0", "id": "list", "method": "session.list"})
            assert [s["sessionId"] for s in listed["result"]["sessions"]] == [session_id]
            (tmp_path / "notes.txt").write_text("alpha\nbeta\n")
            ran = await daemon.call({"jsonrpc": "2.0", "id": "read", "method": "debug.runTool",
                                     "params": {"sessionId": session_id, "tool": "Read",
                                                "args": {"path": "notes.txt"}}})
            assert "beta" in ran["result"]["result"]["content"][0]["text"], ran
            assert not log_errors(daemon.log_path), (where, log_errors(daemon.log_path)[:5])
            await daemon.stdin.aclose()
            with trio.fail_after(20):
                assert await daemon.process.wait() == 0
