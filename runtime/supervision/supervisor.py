"""The runtime's host, kept alive: started on demand, watched, replaced after a crash.

A host that exits, closes its pipe (it is then killed: a host that stopped talking
is dead to us even if its process lives on) or stops answering the liveness ping
within ``liveness_timeout`` (killed: SIGKILL works on a stopped process too) is
dead. Requests in flight fail with ``HostLost`` (``HOST_CRASHED`` for a call whose
execute was sent; ``HostNotReached`` for one never sent: ``failures.py``), the tool
processes the dead host started are killed by the marker it set on them, and only then is
the host ``gone`` (``HostGeneration.gone``): a successor is never started beside
it, and the next request starts a fresh host with a new handshake, to which every
open session is re-announced. A killed host that cannot exit within ``KILL_EXIT_TIMEOUT`` (a
thread stuck in the kernel: a FUSE read that is never answered) is counted dead all the
same, its pipes closed; ``LateReaper`` (``host_reaper.py``) reaps it whenever it exits.

A turn talks to its host through a ``HostLease`` (``host_lease.py``): the lease holds
the host of the turn's first request and sends only to it. After that host died,
nothing else of the turn reaches a successor: its requests are ``HostNotReached``. The
requests of a lease that outlive their call run in the lease's own nursery, held by its
turn (``HostLease.held``).

This module is the succession (start, adoption, replacement, stop); one host's record is
``host_generation.py``, its liveness ping ``host_liveness.py``, the cleanup after its death
``host_cleanup.py``, the late reaping of one that could not exit ``host_reaper.py``.

The first host may be given, already started (``first_host``: ``quiesce serve`` starts
it before its own imports): the first link adopts it if it runs the command this
supervisor would run; otherwise it is killed and reaped, and one is spawned as usual.
Later hosts are always spawned.

A host that cannot be started (its spawn fails, its handshake fails or times out, it
dies while sessions are re-announced) is ``HostStartFailed``, a ``HostNotReached``: the
request that needed it was never sent. Requests waiting on that start fail with it too,
and for ``START_RETRY_AFTER`` no new start is tried.

The host's direct children die with it (a parent-death signal, ``host/spawn.py``);
their descendants are killed here: by the cgroups the host made (``runtime.proc.cgroups``:
``quiesce-host-<pid>`` is killed and removed once any host is gone, since a cgroup
outlives its maker), and by the marker the host set on them, the runtime being a
child subreaper (orphans of a dead host are re-parented to it and reaped). A process
call whose grace ran out without the host's answer has its processes ended from here
(``HostLease.end_call_processes``). The cgroup handling lives in ``runtime.proc.cgroups``
(standard library and trio only), which the runtime and the host both load.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import msgspec
import trio

from protocol.errors import RpcError
from protocol.messages.host import SessionOpenParams
from runtime.link import Handler, NotificationHandler
from runtime.supervision import cgroup_sweeps
from runtime.supervision.cleanup import kill_orphans_of_dead_hosts, kill_survivors
from runtime.supervision.failures import HostError, HostNotReached, HostRefused
from runtime.supervision.generation import HostGeneration, HostStartFailed, StartAttempt, describe
from runtime.supervision.lease import GONE_TIMEOUT, HostLease
from runtime.supervision.link import KILL_EXIT_TIMEOUT, STOP_TIMEOUT, HostLink, default_host_command
from runtime.supervision.liveness import (
    DEFAULT_LIVENESS_TIMEOUT,
    DEFAULT_PING_INTERVAL,
    ping_until_dead,
)
from runtime.supervision.popen_process import PopenProcess
from runtime.supervision.reaper import LateReaper

log = logging.getLogger(__name__)

__all__ = ["DEFAULT_LIVENESS_TIMEOUT", "DEFAULT_PING_INTERVAL", "START_RETRY_AFTER",
           "HostGeneration", "HostLease", "HostStartFailed", "HostSupervisor"]

START_RETRY_AFTER = 1.0
"""After a failed start, requests fail at once for this long instead of starting again."""


class HostSupervisor:
    def __init__(self, *, command: Sequence[str] | None = None,
                 handlers: Mapping[str, Handler] | None = None,
                 notification_handlers: Mapping[str, NotificationHandler] | None = None,
                 ping_interval: float = DEFAULT_PING_INTERVAL,
                 liveness_timeout: float = DEFAULT_LIVENESS_TIMEOUT,
                 first_host: PopenProcess | None = None,
                 registrations: Callable[[], Iterable[SessionOpenParams]] = tuple) -> None:
        """``registrations``: the sessions registered with the host now (each
        session owns its own), re-announced to every fresh host."""
        self._command = command
        self._first_host = first_host
        self._handlers = dict(handlers or {})
        self._notification_handlers = dict(notification_handlers or {})
        self._ping_interval = ping_interval
        self._liveness_timeout = liveness_timeout
        self._registrations = registrations
        self._host: HostGeneration | None = None
        self._nursery: trio.Nursery | None = None
        self._starting: StartAttempt | None = None
        self._failed: StartAttempt | None = None
        self._stopping = False
        self._restarting = False
        self.late = LateReaper()
        self.generation = 0
        self.crashes = 0
        self.restarts = 0

    @property
    def current(self) -> HostGeneration | None:
        return self._host

    @property
    def link(self) -> HostLink | None:
        return self._host.link if self._host is not None else None

    @property
    def pid(self) -> int | None:
        return self._host.link.pid if self._host is not None else None

    def alive(self) -> bool:
        """A host is there: usable, or dead but not yet cleaned up (no successor is
        started beside it until it is)."""
        return self._host is not None and not self._host.gone.is_set()

    def lease(self) -> HostLease:
        """A hold on the current host for one turn (see :class:`HostLease`)."""
        return HostLease(self)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                  ) -> None:
        """Own the hosts' tasks until cancelled; start (or adopt) the first host."""
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                first = self._first_host
                if first is not None and list(first.args) != list(
                        self._command or default_host_command()):
                    log.info("host %d was started as %s, not as this supervisor's host: "
                             "killing it", first.pid, list(first.args))
                    await self._discard_first_host()
                await kill_orphans_of_dead_hosts()
                await self.ensure()
                task_status.started()
                await trio.sleep_forever()
        finally:
            await self._discard_first_host()  # one never adopted is not left running

    async def _discard_first_host(self) -> None:
        first, self._first_host = self._first_host, None
        if first is not None:
            await first.aclose()

    async def ensure(self) -> HostLink:
        """The usable host's link, starting a fresh host if there is none."""
        return (await self.ensure_host()).link

    async def ensure_host(self) -> HostGeneration:
        """The usable host, starting a fresh one if there is none. A dead host's cleanup
        is awaited first: two hosts never run side by side."""
        while True:
            host = self._host
            if host is not None and host.usable:
                return host
            if self._stopping:
                raise HostNotReached("the host is shut down")
            if host is not None and not host.gone.is_set():
                await host.gone.wait()
                continue
            if self._starting is not None:
                attempt = self._starting
                await attempt.done.wait()
                if attempt.failure is not None:
                    raise HostStartFailed(attempt.failure)
                continue
            failed = self._failed
            if failed is not None and trio.current_time() < failed.ended_at + START_RETRY_AFTER:
                assert failed.failure is not None
                raise HostStartFailed(failed.failure)
            await self._attempt_start()

    async def _attempt_start(self) -> None:
        attempt = self._starting = StartAttempt()
        try:
            await self._start()
        except* (OSError, trio.TooSlowError, RpcError, HostError) as group:
            attempt.failure = f"the host could not be started: {describe(group)}"
            self._failed = attempt
            log.error("%s", attempt.failure)
            raise HostStartFailed(attempt.failure) from group
        finally:
            attempt.ended_at = trio.current_time()
            attempt.done.set()
            self._starting = None

    async def _start(self) -> None:
        assert self._nursery is not None
        # The first host given is adopted (it was checked in run()); later ones are spawned.
        first, self._first_host = self._first_host, None
        link = HostLink(command=self._command, handlers=self._handlers,
                        notification_handlers=self._notification_handlers, process=first)
        host = HostGeneration(self.generation + 1, link)
        # The host's tasks live in their own nursery: its death ends them, not us.
        info = await self._nursery.start(self._serve_host, host)
        self.generation = host.number
        if self.generation > 1:
            self.restarts += 1
        for params in list(self._registrations()):  # sessions may open meanwhile
            try:
                await link.request("session.open", params)
            except HostRefused as exc:  # e.g. its workspace is gone: its calls will say so
                log.warning("host refused session %s: %s", params.session_id, exc)
        log.info("host %s started (generation %d)", info, self.generation)

    async def _serve_host(self, host: HostGeneration, *,
                          task_status: trio.TaskStatus[int | None]) -> None:
        link = host.link
        try:
            async with trio.open_nursery() as nursery:
                try:
                    await link.start(nursery)
                except BaseException:
                    if link.lingering:  # killed after a failed handshake, yet not exited
                        assert self._nursery is not None
                        self.late.watch(self._nursery, link)
                    raise
                self._host = host
                task_status.started(link.pid)
                nursery.start_soon(ping_until_dead, link, self._ping_interval,
                                   self._liveness_timeout)
                await link.down.wait()
                if not link.exited.is_set() and not self._stopping and not link.killed:
                    # Its pipe closed but the process lives on: it can do no more for us,
                    # and must not go on beside its successor.
                    log.warning("host %s closed its link but did not exit: killing it",
                                link.pid)
                    link.kill()
                with trio.move_on_after(KILL_EXIT_TIMEOUT if link.killed
                                        else KILL_EXIT_TIMEOUT + STOP_TIMEOUT):
                    await link.exited.wait()
                if not link.exited.is_set():
                    # Killed, it cannot exit (a thread stuck in the kernel): its calls get
                    # their results now, and it is reaped whenever it exits.
                    link.kill()
                if link.lingering:
                    assert self._nursery is not None
                    self.late.watch(self._nursery, link)
                nursery.cancel_scope.cancel()
            await link.release()
            if link.pid is not None:
                # Whatever its end, a host leaves no cgroup: a crashed one leaves its trees'
                # cgroups populated (a cgroup outlives its maker), an orderly one none.
                held = await cgroup_sweeps.kill_host_cgroups(link.pid)
                if held:
                    log.warning("killed %d processes in the cgroups of host %s", held,
                                link.pid)
            if self._restarting:
                self._restarting = False
                await self._kill_survivors(link.pid)
            elif not self._stopping:
                self.crashes += 1
                log.warning("host %s died; killing the tool processes it left", link.pid)
                await self._kill_survivors(link.pid)
        finally:
            host.gone.set()

    async def _kill_survivors(self, host_pid: int | None) -> None:
        # Killed hosts that could not exit are children too, not orphans to kill.
        spare = set(self.late.pids)
        if self._first_host is not None:
            spare.add(self._first_host.pid)
        await kill_survivors(host_pid, spare=spare)

    async def request(self, method: str, params: msgspec.Struct) -> Any:
        link = await self.ensure()
        return await link.request(method, params)

    async def request_if_alive(self, method: str, params: msgspec.Struct) -> Any:
        """Send to the current host only: a message that needs no host never starts one."""
        host = self._host
        if host is None or not host.usable:
            raise HostNotReached("no live host")
        return await host.link.request(method, params)

    async def restart(self) -> tuple[int | None, int | None]:
        """Replace the current host: it is killed, so the calls waiting on it end
        HOST_CRASHED (as for a crash, without counting one), and a fresh one starts."""
        old = self._host
        old_pid = old.link.pid if old is not None else None
        if old is not None and old.usable:
            self._restarting = True
            old.restarted = True
            old.link.kill()
            with trio.move_on_after(GONE_TIMEOUT):
                await old.gone.wait()
        link = await self.ensure()
        return old_pid, link.pid

    async def stop(self) -> None:
        self._stopping = True
        if self._host is not None:
            await self._host.link.stop()
