"""One plugin ``tools/call`` request, and what became of it.

A request is listened to from sending until it is answered or its connection
ends, which may be after its call settled: an unconfirmed stop (the server read
the cancel, then said nothing of the call for the quiet window) settles the
call while the tool may still run. Whatever then comes for the request is
late: logged as a warning (the server ignored the cancel) and dropped, so a
call still has exactly one result.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import trio

from protocol.errors import RemoteError
from protocol.mcp import CallToolResult, ProgressParams

log = logging.getLogger(__name__)

ProgressSink = Callable[[ProgressParams], None]


@dataclass(frozen=True)
class CallOutcome:
    """What became of one ``tools/call``: exactly one of result, error, crashed or
    ``unconfirmed`` (the server read the cancel, then said nothing of the call for the
    quiet window: MCP gives no confirmation that the tool stopped)."""

    result: CallToolResult | None = None
    error: RemoteError | None = None
    crashed: str | None = None
    stopped: bool = False
    unconfirmed: bool = False


@dataclass
class PluginRequest:
    """One ``tools/call`` request, from sending to its answer (or its connection's end),
    which may come after the call settled: the request outlives an unconfirmed stop."""

    server: str
    request_id: str
    stop: trio.Event
    on_progress: ProgressSink
    outcome: CallOutcome | None = None
    done: trio.Event = field(default_factory=trio.Event)
    last_activity: float = 0.0
    cancel_sent: bool = False
    settled: bool = False
    late_progress: int = 0

    def progress(self, params: ProgressParams) -> None:
        if not self.settled:
            self.last_activity = trio.current_time()
            self.on_progress(params)
            return
        self.late_progress += 1
        if self.late_progress == 1:
            self._late(f"progress ({params.progress:g})")

    def deliver(self, outcome: CallOutcome) -> None:
        if not self.settled:
            self.outcome = replace(outcome, stopped=self.stop.is_set())
            self.done.set()
        elif outcome.crashed is None:
            self._late("an answer (error)" if outcome.error is not None else "an answer")

    def _late(self, what: str) -> None:
        if self.cancel_sent:
            log.warning("plugin %s sent %s for request %s after its stop was settled: the "
                        "server ignored the cancel; dropped", self.server, what,
                        self.request_id)
        else:
            log.info("plugin %s: %s for abandoned request %s dropped", self.server, what,
                     self.request_id)
