"""What the stops leave behind, as both phases of the load test check it: the marked
processes still alive (waited for up to ``LEFTOVER_WAIT``), and each session's log on
disk, which must balance."""

from __future__ import annotations

import time
from typing import Any

import trio

from benchlib.harness import Bench, Session
from protocol.messages.events import DurableEvent
from protocol.transcript import Transcript
from runtime.agent.sessionlog import read_log

LEFTOVER_WAIT = 5.0
"""Seconds a stop's processes (or a closed session's plugin server) may take to go."""


def transcript_problems(events: tuple[DurableEvent, ...] | list[DurableEvent]) -> list[str]:
    """Why a session log does not balance, by the transcript rulebook: a ``tool/call``
    without exactly one ``tool/result`` in the same turn and step (or the reverse), a turn
    without exactly one ``turn/start`` and one ``turn/end``."""
    transcript = Transcript(events)
    return transcript.call_problems() + transcript.turn_problems()


def session_log(bench: Bench, session: Session) -> tuple[DurableEvent, ...]:
    """The durable events of ``session``'s log on disk, in the daemon's data directory."""
    return read_log(bench.workdir / "data" / "sessions" / f"{session.session_id}.jsonl").events


async def wait_gone(bench: Bench, ignore: set[int] | frozenset[int] = frozenset()
                    ) -> list[Any]:
    """The marked processes (but ``ignore``) still alive after up to ``LEFTOVER_WAIT``."""
    deadline = time.monotonic() + LEFTOVER_WAIT
    while True:
        left = [m for m in await trio.to_thread.run_sync(bench.members) if m.pid not in ignore]
        if not left or time.monotonic() > deadline:
            return left
        await trio.sleep(0.05)
