"""A request's effect point, awaited by the link's reader (the wire-order rule).

The reader starts each request's handler and reads the next frame only once the handler
has taken its effect (``started()``, through ``effect_taken``) or ended
(``runtime.link.endpoint``; the rule is in docs/protocol.md, "Order and bounds").
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import trio


class EffectGate:
    """What ``nursery.start`` gives the reader, at half its cost (the profile's): the reader
    sleeps until the request's handler calls ``started()`` (its effect point) or ends. The
    handler runs in the handlers' nursery from the start, so no temporary nursery is
    opened and no task is moved between nurseries per request. Idempotent."""

    __slots__ = ("_reader",)

    def __init__(self) -> None:
        self._reader: trio.lowlevel.Task | None = None

    def started(self, value: None = None) -> None:
        reader, self._reader = self._reader, None
        if reader is not None:
            trio.lowlevel.reschedule(reader)

    async def wait(self) -> None:
        self._reader = trio.lowlevel.current_task()

        def abort(_: Any) -> trio.lowlevel.Abort:
            self._reader = None  # the link is being cancelled: nobody waits for the effect
            return trio.lowlevel.Abort.SUCCEEDED

        await trio.lowlevel.wait_task_rescheduled(abort)


async def start_in_order(nursery: trio.Nursery, serve: Callable[..., Awaitable[None]],
                          *args: Any) -> None:
    """Start ``serve(*args, gate)`` in ``nursery``; return once it took its effect (or
    ended, also by an error: that error is the nursery's)."""
    gate = EffectGate()

    async def run() -> None:
        try:
            await serve(*args, gate)
        finally:
            gate.started()  # taken at the latest when it ends

    nursery.start_soon(run)
    await gate.wait()
