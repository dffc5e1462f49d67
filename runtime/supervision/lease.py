"""``HostLease``: one turn's hold on one host (shared with the turn's subagents).

The turn's first request takes the usable host (starting one if there is none) and every
later request goes to that same host. Once it is dead, nothing more of the turn reaches a
successor: a request raises ``HostNotReached`` (the call was never sent, its body never ran), and
the turn, which lost its host, ends. A host that died before the turn sent anything is no
loss to the turn: its first request finds the successor.

The lease also owns where the turn's requests that may outlive their call are awaited
(``start_soon``: a ``tools.abort``, a read-only call's execute, which a stop abandons and
whose late result is still logged): its own nursery, open while the lease is ``held()``.
The top-level turn holds it around its run (``Session.hold_turn``, the agent's
collaborator), inside the turn's shielded end, so a session's close cancels none
of it. When the turn is over (its ``turn/end`` durable, its stops answered) the lease waits,
shielded, at most ``END_WAIT`` for what still runs there, then cancels it (a late answer
is then dropped by the link): no nursery is lent from the daemon or the supervisor.
"""

from __future__ import annotations

import logging
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any, Protocol

import msgspec
import trio

from runtime.proc import cgroups
from runtime.supervision import cgroup_sweeps
from runtime.supervision.failures import HostNotReached
from runtime.supervision.generation import HostGeneration

log = logging.getLogger(__name__)

# How long a call the host died under waits for that host's cleanup (its leftover tool
# processes killed) before it reports HOST_CRASHED anyway: a bound, never a hang.
GONE_TIMEOUT = 10.0
# How long a held lease's end waits for its requests still running (a tools.abort, an
# abandoned read-only call's execute): the next turn of the session waits for this end, so
# a bound, not LATE_RESULT_WAIT.
END_WAIT = 5.0


class Succession(Protocol):
    """What a lease needs of its supervisor."""

    async def ensure_host(self) -> HostGeneration: ...


class HostLease:
    """One turn's hold on one host (see the module's text)."""

    def __init__(self, supervisor: Succession) -> None:
        self._supervisor = supervisor
        self._host: HostGeneration | None = None
        self._nursery: trio.Nursery | None = None
        self._running = 0  # tasks started in the nursery and not yet finished
        self._idle = trio.Event()

    @property
    def host(self) -> HostGeneration | None:
        return self._host

    async def _held(self) -> HostGeneration:
        if self._host is None:
            host = await self._supervisor.ensure_host()
            if self._host is None:  # concurrent first requests: the first one holds
                self._host = host
        return self._host

    async def ready(self) -> None:
        await self._held()

    @property
    def restarted(self) -> bool:
        return self._host is not None and self._host.restarted

    async def request(self, method: str, params: msgspec.Struct) -> Any:
        host = await self._held()
        if not host.usable:
            raise HostNotReached(f"host {host.link.pid} (generation {host.number}) of this turn "
                          "is gone")
        return await host.link.request(method, params)

    async def request_if_alive(self, method: str, params: msgspec.Struct) -> Any:
        """Send to the held host only: a stop never starts a host to deliver itself."""
        host = self._host
        if host is None or not host.usable:
            raise HostNotReached("this turn has no live host")
        return await host.link.request(method, params)

    @asynccontextmanager
    async def held(self) -> AsyncIterator[None]:
        """The lease's life: its nursery is open until the block ends, then what still
        runs in it gets ``END_WAIT`` and is cancelled. Shielded, the block with it (the
        turn's end is shielded anyway): a cancel from outside (a session's close) must
        not cut a ``tools.abort`` short; the turn is stopped by its own controller."""
        assert self._nursery is None, "a lease is held once"
        with trio.CancelScope(shield=True):
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                try:
                    yield
                finally:
                    with trio.move_on_after(END_WAIT):
                        while self._running:
                            await self._idle.wait()
                    if self._running:
                        log.info("%d request(s) of a turn still unanswered %.0f s after its "
                                 "end: no longer awaited", self._running, END_WAIT)
                    nursery.cancel_scope.cancel()

    def start_soon(self, fn: Callable[[], Awaitable[None]]) -> None:
        """Run ``fn`` in the lease's nursery, where the lease's requests that outlive
        their call are awaited; the lease must be ``held()``."""
        if self._nursery is None:
            raise RuntimeError("the lease is not held: nowhere to await its requests")
        self._running += 1
        self._nursery.start_soon(self._counted, fn)

    async def _counted(self, fn: Callable[[], Awaitable[None]]) -> None:
        try:
            await fn()
        finally:
            self._running -= 1
            if not self._running:
                self._idle.set()
                self._idle = trio.Event()

    async def end_call_processes(self, session_id: str, host_call_id: str) -> str | None:
        """A process call's grace ran out without the held host's result: its cgroup is
        killed (the path is known: ``runtime.proc.cgroups``), or, for a host without
        cgroups, the host is ended (killed, its trees swept) and waited for. How, or
        ``None`` if the turn holds no live host."""
        host = self._host
        if host is None or host.gone.is_set() or host.link.pid is None:
            return None
        pid = host.link.pid
        host_dir = cgroups.host_dir(pid)
        if host_dir is not None and await trio.to_thread.run_sync(os.path.isdir, host_dir):
            emptied = await cgroup_sweeps.kill_call_cgroup(pid, session_id, host_call_id)
            if emptied is None:
                return "cgroup-gone"  # settled (its cgroup removed), or never spawned
            if emptied:
                return "cgroup-killed"
        log.warning("host %s: a stopped process call's processes cannot be confirmed "
                    "gone; ending the host", pid)
        if host.usable:
            host.link.kill()
        await self.wait_host_gone()
        return "host-killed"

    async def wait_host_gone(self) -> bool:
        """After the held host died under a call: wait until its leftover tool processes
        are killed, at most ``GONE_TIMEOUT``; whether they were."""
        host = self._host
        if host is None:
            return True
        with trio.move_on_after(GONE_TIMEOUT):
            await host.gone.wait()
        if not host.gone.is_set():
            log.warning("host %s: its cleanup took longer than %.0f s; reporting its calls "
                        "crashed anyway", host.link.pid, GONE_TIMEOUT)
        return host.gone.is_set()
