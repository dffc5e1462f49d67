"""What the stops leave behind, as both phases of the load test check it: the marked
processes still there right after the answers and ``LEFTOVER_WAIT`` later, and each
session's log on disk, which must balance."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import trio

from benchlib.harness import Bench, Member, Session
from protocol.messages.events import DurableEvent
from protocol.transcript import Transcript
from runtime.agent.sessionlog import read_log

LEFTOVER_WAIT = 5.0
"""Seconds a stop's processes (or a closed session's plugin server) may take to go."""

RACED_SEARCH = "rg"
"""A read-only call's search (Grep, Glob). A stop does not wait for a read-only call (the
per-class policy: it is raced), so when the answer arrives the host may still be ending
the search, or not have reaped it yet. Such a process must be gone within
``LEFTOVER_WAIT``; any other must be gone when the answer arrives."""


def raced(members: Sequence[Member]) -> tuple[list[str], list[str]]:
    """``members`` split: those no answer may leave behind, and raced searches exiting."""
    return ([m.describe() for m in members if m.name != RACED_SEARCH],
            [m.describe() for m in members if m.name == RACED_SEARCH])


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
