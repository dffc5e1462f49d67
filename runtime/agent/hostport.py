"""A turn's way to its host, and what a call's result says of it.

``HostPort`` is what host tools and hooks need of the turn's hold on its host (the
runtime's ``runtime.supervision.lease.HostLease``; the tests' fakes); ``lost_host`` reads a
call's result for the one thing the turn must know: that its host is gone.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import msgspec

from protocol.errors import ErrorCode
from protocol.tools import ToolResult

HOST_UNAVAILABLE = "hostUnavailable"  # details key of a result whose request was never sent
HOST_RESTARTED = "hostRestarted"  # details key of a call an operator's restart-host ended


class HostPort(Protocol):
    """A turn's way to its host (``runtime.supervision.lease.HostLease``). A request
    that gives no result raises one of ``runtime.supervision.failures``' kinds."""

    async def ready(self) -> None:
        """Until the turn holds a live host (one is started if need be)."""
        ...

    async def request(self, method: str, params: msgspec.Struct) -> Any: ...

    async def request_if_alive(self, method: str, params: msgspec.Struct) -> Any: ...

    async def wait_host_gone(self) -> bool:
        """After the host died under a call: until its leftover processes are killed
        (bounded); whether they were."""
        ...

    @property
    def restarted(self) -> bool:
        """Whether the held host was killed by an operator's restart, not a crash."""
        ...

    async def end_call_processes(self, session_id: str, host_call_id: str) -> str | None:
        """A process call's grace ran out without the host's result: make sure its
        processes are gone, by killing its cgroup, or, where it has none, the host (its
        trees swept). How (``cgroup-killed``, ``host-killed``), or ``None`` if the turn
        holds no live host."""
        ...

    def start_soon(self, fn: Callable[[], Awaitable[None]]) -> None:
        """Run ``fn`` in the lease's nursery: a ``tools.abort`` request, or an abandoned
        call's execute awaited for its late result, outlives the call that started it."""
        ...


def lost_host(result: ToolResult) -> bool:
    """Whether a call's result says the turn's host is gone: it died under the call, or
    was gone before the call could be sent."""
    return result.code == ErrorCode.HOST_CRASHED.name or (
        result.code == ErrorCode.ABORTED_BEFORE_DISPATCH.name
        and HOST_UNAVAILABLE in result.details)
