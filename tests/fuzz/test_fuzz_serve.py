"""Fuzz ``quiesce serve``: tens of thousands of bad, odd and valid frames over one
daemon process; every request gets the right answer, the daemon stays up, memory
stays bounded (and stops growing), and a real request afterwards still works.

Hypothesis draws the messages (``tests/fuzz/wire.py``); each drawn message is then
streamed several times with fresh ids and a re-drawn layout (seeded, reproducible
with QUIESCE_FUZZ_SEED). A session is live in the daemon: valid prompts, aborts and
tool runs name it half of the time, so they run real turns and real tool calls.
"""

from __future__ import annotations

import pathlib
import random
import time

import msgspec
import trio

from protocol.messages.events import SessionMeta, ToolCallEvent
from protocol.transcript import balance_problems
from runtime.agent.sessionlog import read_log
from runtime.clients.daemon_client import serve_command
from tests.conftest import Marked
from tests.fuzz import wire
from tests.fuzz.stream import (
    before_handshake,
    draw_templates,
    fuzz_seed,
    in_two_halves,
    log_errors,
    ready_messages,
    spawned,
)

MAX_FRAME = 16384  # small, so oversized frames are cheap to send
EXAMPLES = 30  # hypothesis examples, each one message of every kind: ~1,250 drawn
FRAMES = 21_000  # streamed after the handshake: the drawn messages, re-laid-out
MIN_FRAMES = 20_000
PRE_TEMPLATES = 200  # of them, streamed before the handshake as well
RSS_GROWTH_LIMIT = 16 * 2**20  # over the whole stream (the peak: twice that)
RSS_PLATEAU_LIMIT = 4 * 2**20  # over its second half: memory stops growing
LIVE = "s-feedfacefeed"  # the live session's id, known before hypothesis draws
SCRIPT = [
    [{"toolCall": {"id": "r1", "name": "Read", "args": {"path": "notes.txt"}}}],
    [{"text": "read it"}],
    [{"toolCall": {"id": "b1", "name": "Bash", "args": {"command": "echo fuzz"}}}],
    [{"text": "done"}],
]  # then the script is spent: every later turn ends with a provider error


def write_live_session(data_dir: pathlib.Path, workspace: pathlib.Path) -> None:
    """A session log the daemon loads as ``LIVE`` (mode auto, the scripted provider)."""
    sessions = data_dir / "sessions"
    sessions.mkdir(parents=True, exist_ok=True)
    meta = SessionMeta(0, "", LIVE, str(workspace), "auto", time.time(),
                       {"kind": "scripted", "script": SCRIPT})
    (sessions / f"{LIVE}.jsonl").write_bytes(msgspec.json.encode(meta) + b"\n")


async def test_fuzz_quiesce_serve(marked: Marked, tmp_path: pathlib.Path) -> None:
    seed_value = fuzz_seed()
    rnd = random.Random(seed_value)
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "notes.txt").write_text("alpha\nbeta\n")
    write_live_session(marked.data_dir, workspace)
    link = wire.Link(tuple(wire.client_methods(live_session=LIVE)), max_frame=MAX_FRAME)
    templates = draw_templates(wire.messages(link, oversize=MAX_FRAME), examples=EXAMPLES,
                               seed_value=seed_value)
    ids = wire.Ids()
    where = f"(QUIESCE_FUZZ_SEED={seed_value}; daemon log {tmp_path / 'daemon.log'})"

    with trio.fail_after(90):
        async with spawned(serve_command(), marked.env(QUIESCE_MAX_FRAME=str(MAX_FRAME)),
                           str(tmp_path / "daemon.log")) as daemon:
            # Out of order: everything before the handshake (no successful initialize).
            pre = await before_handshake(daemon, templates, ids, PRE_TEMPLATES, rnd, where)

            answer = await daemon.call({"jsonrpc": "2.0", "id": "hello", "method": "initialize",
                                        "params": {"protocolVersion": "1.0"}})
            assert answer["result"]["protocolVersion"] == "1.0"
            loaded = await daemon.call({"jsonrpc": "2.0", "id": "live", "method": "session.load",
                                        "params": {"sessionId": LIVE}})
            assert loaded["result"]["sessionId"] == LIVE, loaded
            daemon.received.clear()
            baseline = daemon.rss_now()
            samples_from = len(daemon.rss)

            msgs = ready_messages(templates, ids, rnd, FRAMES)
            # A frame exactly at the limit is served; one byte more is not.
            at_limit = wire.exact_size_request("agent.prompt", {"sessionId": "s-000000000000"},
                                               "text", MAX_FRAME, "at-limit")
            msgs.append(wire.Msg(at_limit, wire.Answer("at-limit", frozenset({wire.NOT_FOUND})),
                                 "frame at the limit"))
            over = wire.exact_size_request("agent.prompt", {"sessionId": "s-000000000000"},
                                           "text", MAX_FRAME + 1, "over-limit")
            msgs.append(wire.Msg(over, wire.Answer(None, frozenset({wire.INVALID_REQUEST})),
                                 "frame one byte over the limit"))
            halves = await in_two_halves(daemon, msgs, rnd, label="quiesce serve",
                                         baseline=baseline, samples_from=samples_from,
                                         where=where)
            first, second, middle_rss, rss = (halves.first, halves.second, halves.middle_rss,
                                              halves.rss)
            assert not daemon.undecodable, daemon.undecodable[:3]
            sent = pre.sent + first.sent + second.sent
            assert first.sent + second.sent >= MIN_FRAMES, sent
            assert first.expected_answers + second.expected_answers > 15_000

            # The live session did work, and said so only through its events.
            assert {m.get("method") for m in daemon.from_peer} == {"session.event"}, \
                [m for m in daemon.from_peer if m.get("method") != "session.event"][:3]
            kinds = {m["params"]["event"]["kind"] for m in daemon.from_peer}
            assert {"turn/start", "tool/call", "tool/result", "turn/end"} <= kinds, kinds
            events = read_log(marked.data_dir / "sessions" / f"{LIVE}.jsonl").events
            assert any(isinstance(e, ToolCallEvent) for e in events)
            assert not balance_problems(events), balance_problems(events)

            end_rss = daemon.rss_now()
            assert end_rss - baseline < RSS_GROWTH_LIMIT, (baseline, end_rss, where)
            assert max(rss, default=0) - baseline < 2 * RSS_GROWTH_LIMIT, (baseline, rss, where)
            assert end_rss - middle_rss < RSS_PLATEAU_LIMIT, (middle_rss, end_rss, where)

            # Still serving, and correctly: a real session, then the list shows it.
            assert daemon.process.returncode is None
            opened = await daemon.call({"jsonrpc": "2.0", "id": "after", "method": "session.new",
                                        "params": {"workspace": str(tmp_path)}})
            session_id = opened["result"]["sessionId"]
            listed = await daemon.call({"jsonrpc": "2.0", "id": "list", "method": "session.list"})
            assert {s["sessionId"] for s in listed["result"]["sessions"]} == {session_id, LIVE}
            (tmp_path / "notes.txt").write_text("alpha\nbeta\n")
            ran = await daemon.call({"jsonrpc": "2.0", "id": "read", "method": "debug.runTool",
                                     "params": {"sessionId": session_id, "tool": "Read",
                                                "args": {"path": "notes.txt"}}})
            assert "beta" in ran["result"]["result"]["content"][0]["text"], ran
            assert not log_errors(daemon.log_path), (where, log_errors(daemon.log_path)[:5])
            await daemon.stdin.aclose()
            with trio.fail_after(20):
                assert await daemon.process.wait() == 0
