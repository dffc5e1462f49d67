"""What the stops leave behind, as both phases of the load test check it: the marked
processes still there right after the answers and ``LEFTOVER_WAIT`` later, and each
session's log on disk, which must balance."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import trio

from benchlib.harness import Bench, Member, Session, kill_all
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


@dataclass
class Leftovers:
    """The marked processes a phase's stops left: right after the answers, split by
    ``RACED_SEARCH``, and ``LEFTOVER_WAIT`` later."""

    right_after: list[str] = field(default_factory=list)
    """Right after the answers, but raced searches: what no answer may leave behind."""
    exiting: list[str] = field(default_factory=list)
    """Raced searches right after the answers."""
    later: list[str] = field(default_factory=list)
    """Any of them still there ``LEFTOVER_WAIT`` later (killed then)."""

    @property
    def clean(self) -> bool:
        return not (self.right_after or self.later)

    def detail(self) -> str:
        return (f"{len(self.right_after)} right after; {len(self.exiting)} raced searches "
                f"exiting; {len(self.later)} there {LEFTOVER_WAIT:g} s later")

    @classmethod
    def seen(cls, members: Sequence[Member]) -> Leftovers:
        """The leftovers ``members``, seen right after the answers."""
        return cls([m.describe() for m in members if m.name != RACED_SEARCH],
                   [m.describe() for m in members if m.name == RACED_SEARCH])

    async def wait_out(self, bench: Bench, ignore: frozenset[int] = frozenset()) -> None:
        """If any was seen: those (but ``ignore``) still there ``LEFTOVER_WAIT`` later,
        recorded and killed."""
        if self.right_after or self.exiting:
            left = await wait_gone(bench, ignore)
            self.later = [m.describe() for m in left]
            kill_all(left)


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
