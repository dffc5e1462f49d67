"""A request's effect point: requests take effect in wire order, waiting holds nothing up.

The link's reader starts each request's handler and reads the next frame only once the
handler has *taken its effect* (opened the session, accepted the prompt, recorded the
stop's cause and started the stop) or answered (the rule is in docs/protocol.md, "Order
and bounds"). When a handler's effect is taken is declared once, where the handler is
registered in a method table:

- a plain handler (the default) takes its effect when it answers: the reader waits for
  the whole handler;
- :func:`answers_later` wraps one whose effect is taken as it starts: what it does
  before its first wait is its effect (it registers a prompt, sends its request on),
  and it may wait for a long time for its answer (a person deciding, a peer answering);
- :func:`marks_effect` wraps one that receives its request's :class:`Effect` as a second
  argument and takes it mid-way, after its ordering point (a session's load/close lock,
  a stop's start), by ``effect.take()`` or by passing it on as a ``task_status``.

Nothing else marks an effect: there is no "current request" a task could inherit, so a
task a handler starts, or a request a handler sends to a peer, never takes anyone's
effect by accident. A handler that sends a request to a peer and waits for its answer
must have taken its effect first (declared ``answers_later`` or marked): waiting on a
peer is waiting, and the peer's answer may need this very reader.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import msgspec
import trio

PlainHandler = Callable[[Any], Awaitable[msgspec.Struct]]
"""A request's handler whose effect is taken when it answers."""
MarkingHandler = Callable[[Any, "Effect"], Awaitable[Any]]
"""A request's handler given its :class:`Effect`, to take it where its effect is."""


class Effect:
    """The effect point of one request being handled: ``take()`` tells the link's reader,
    which sleeps in :meth:`wait` meanwhile, that it may read on. Idempotent, and harmless
    once the request was answered (a task the handler spawned may keep it). It is also a
    ``trio.TaskStatus[None]`` (``started()`` takes it), for functions that take a
    ``task_status`` to say where their effect is.

    What ``nursery.start`` gives the reader, at half its cost (the profile's): the handler
    runs in the handlers' nursery from the start, so no temporary nursery is opened and no
    task is moved between nurseries per request."""

    __slots__ = ("_reader", "taken")

    def __init__(self) -> None:
        self._reader: trio.lowlevel.Task | None = None
        self.taken = False

    def take(self) -> None:
        """The request has taken its effect: the link may read on."""
        self.taken = True
        reader, self._reader = self._reader, None
        if reader is not None:
            trio.lowlevel.reschedule(reader)

    def started(self, value: None = None) -> None:
        self.take()

    async def wait(self) -> None:
        """Sleep until the effect is taken (the reader's side)."""
        if self.taken:
            return
        self._reader = trio.lowlevel.current_task()

        def abort(_: Any) -> trio.lowlevel.Abort:
            self._reader = None  # the link is being cancelled: nobody waits for the effect
            return trio.lowlevel.Abort.SUCCEEDED

        await trio.lowlevel.wait_task_rescheduled(abort)


@dataclass(frozen=True, slots=True)
class Declared:
    """A handler whose effect is not taken at its answer: ``marks`` says whether it takes
    its :class:`Effect` as a second argument (else it is taken as the handler starts)."""

    handler: Callable[..., Awaitable[Any]]
    marks: bool


Handler = PlainHandler | Declared
"""What a method table holds for a request: a plain handler, or a declared one."""


def answers_later(handler: Callable[[Any], Awaitable[Any]]) -> Declared:
    """``handler`` takes its effect as it starts (before its first wait): the link reads
    on at once, while it waits for its answer."""
    return Declared(handler, marks=False)


def marks_effect(handler: MarkingHandler) -> Declared:
    """``handler(params, effect)`` takes its effect by ``effect.take()`` (at the latest
    it is taken when the handler answers)."""
    return Declared(handler, marks=True)


async def call_handler(handler: Handler, params: Any, effect: Effect) -> Any:
    """Run ``handler`` as it was declared, for a request whose effect point is ``effect``
    (the dispatcher's, and a wrapper's that guards another handler: declared with
    :func:`marks_effect`, it passes its own effect on)."""
    if isinstance(handler, Declared):
        if handler.marks:
            return await handler.handler(params, effect)
        effect.take()
        return await handler.handler(params)
    return await handler(params)


async def start_in_order(nursery: trio.Nursery,
                         serve: Callable[..., Awaitable[None]], *args: Any) -> None:
    """Start ``serve(*args, effect)`` in ``nursery``; return once it took its effect (or
    ended, also by an error: that error is the nursery's)."""
    effect = Effect()

    async def run() -> None:
        try:
            await serve(*args, effect)
        finally:
            effect.take()  # taken at the latest when it ends

    nursery.start_soon(run)
    await effect.wait()
