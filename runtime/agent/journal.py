"""A session's durable events: numbered, appended to the log, then announced.

The order is the contract: an event reaches the client only after it is in
the log; ``turn/end`` only after the log is fsynced. Progress events are
announced, never logged; they carry the seq of the last durable event. An event
the log fails to take (``OSError``) is neither kept nor announced: the journal
holds exactly what the log holds.
"""

from __future__ import annotations

import pathlib
from collections.abc import Callable

from protocol.messages.events import AnnouncedEvent, DurableEvent
from runtime.agent.sessionlog import SessionLog

Announce = Callable[[AnnouncedEvent], None]


class Journal:
    def __init__(self, log: SessionLog, announce: Announce,
                 events: tuple[DurableEvent, ...] = ()) -> None:
        self._log = log
        self._announce = announce
        self.events: list[DurableEvent] = []
        # Each turn's events, and the order turns began in: a turn reads its own history
        # without scanning the whole session.
        self.by_turn: dict[str, list[DurableEvent]] = {}
        self.turn_order: list[str] = []
        for event in events:
            self._keep(event)

    def _keep(self, event: DurableEvent) -> None:
        self.events.append(event)
        turn = self.by_turn.get(event.turn_id)
        if turn is None:
            turn = self.by_turn[event.turn_id] = []
            self.turn_order.append(event.turn_id)
        turn.append(event)

    @property
    def log_path(self) -> pathlib.Path:
        return self._log.path

    @property
    def last_seq(self) -> int:
        return self.events[-1].seq if self.events else -1

    def append(self, make: Callable[[int], DurableEvent]) -> DurableEvent:
        event = make(self._log.next_seq())
        self._log.append(event)
        self._keep(event)
        self._announce(event)
        return event

    async def append_durably(self, make: Callable[[int], DurableEvent]) -> DurableEvent:
        """Append, fsync, then announce: for ``turn/end``. If the fsync fails (``OSError``)
        the event stays in the log and the journal, a true record whose durability is
        unconfirmed, and is not announced."""
        event = make(self._log.next_seq())
        self._log.append(event)
        self._keep(event)
        await self._log.sync()
        self._announce(event)
        return event

    def announce(self, make: Callable[[int], AnnouncedEvent]) -> None:
        self._announce(make(self.last_seq))

    def replay(self) -> None:
        for event in self.events:
            self._announce(event)

    def close(self) -> None:
        self._log.close()
