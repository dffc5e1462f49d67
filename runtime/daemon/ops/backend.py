"""What the ops server needs from the daemon (implemented by ``runtime.daemon.daemon.Daemon``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import trio

from protocol.messages.client import AgentAbortResult
from protocol.messages.events import AnnouncedEvent
from protocol.messages.ops import (
    OpsForceResult,
    OpsRestartHostResult,
    OpsSessionsResult,
    OpsStatsResult,
)

EventListener = Callable[[str, AnnouncedEvent], None]  # (session id, event)


class OpsBackend(Protocol):
    async def ops_sessions(self) -> OpsSessionsResult:
        """Every session and its calls in flight; may ask the live host (briefly) which
        calls wait in its admission queue."""
        ...

    async def ops_abort(self, session_id: str, *,
                        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                        ) -> AgentAbortResult:
        """A stop with cause ``operator``; answers when settled, like ``agent.abort``.
        ``task_status`` is started once the stop is recorded and begun (its effect)."""
        ...

    async def ops_force(self, session_id: str, call_id: str) -> OpsForceResult: ...

    async def ops_restart_host(self) -> OpsRestartHostResult: ...

    async def ops_stats(self) -> OpsStatsResult: ...

    def add_event_listener(self, listener: EventListener) -> Callable[[], None]:
        """Call ``listener`` with every announced event; returns the remover."""
        ...
