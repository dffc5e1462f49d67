"""One host of the supervisor's succession, and a start of one.

A ``HostGeneration`` lives from its handshake to its cleanup: it is *usable* while its link
is up, and *gone* (``gone``) once it is dead and reaped and the tool processes it left are
killed; a successor never starts before. A start that fails is ``HostStartFailed``, a
``HostNotReached``: the request that needed the host was never sent.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import trio

from runtime.supervision.failures import HostNotReached
from runtime.supervision.link import HostLink


class HostStartFailed(HostNotReached):
    """No host could be started: the request that needed one was never sent."""


@dataclass(eq=False)
class StartAttempt:
    done: trio.Event = field(default_factory=trio.Event)
    failure: str | None = None
    ended_at: float = 0.0


@dataclass(eq=False)
class HostGeneration:
    """One host of the supervisor's succession, from its handshake to its cleanup."""

    number: int
    link: HostLink
    gone: trio.Event = field(default_factory=trio.Event)
    """Set once the host is dead and reaped and the tool processes it left are killed."""
    restarted: bool = False
    """Killed by an operator's restart (``quiesce ops restart-host``), not crashed."""

    @property
    def usable(self) -> bool:
        # ``closed`` too: the link's watcher sets ``down`` only once it next runs, and a
        # request meanwhile would go to a link already closed.
        return not self.link.down.is_set() and not self.link.closed


def describe(error: BaseException) -> str:
    """The first error of a (nested) group, named: a timeout's message is empty."""
    while isinstance(error, BaseExceptionGroup):
        error = error.exceptions[0]
    return f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
