"""The runtime's host, kept alive: started on demand, watched, replaced after a crash.

A host that exits, closes its pipe (it is then killed: a host that stopped talking
is dead to us even if its process lives on) or stops answering the liveness ping
within ``liveness_timeout`` (killed: SIGKILL works on a stopped process too) is
dead. Requests in flight fail with ``ConnectionClosed`` (``HOST_CRASHED`` for a
call whose execute was sent; ``NotSent`` for one never sent), the tool processes
the dead host started are killed by the marker it set on them, and only then is
the host ``gone`` (``HostGeneration.gone``): a successor is never started beside
it, and the next request starts a fresh host with a new handshake, to which every
open session is re-announced.

A turn talks to its host through a ``HostLease``: the lease holds the host of the
turn's first request and sends only to it. After that host died, nothing else of
the turn reaches a successor: its requests are ``NotSent``.

The first host may be given, already started (``first_host``: ``quiesce serve`` starts
it before its own imports): the first link adopts it if it runs the command this
supervisor would run; otherwise it is killed and reaped, and one is spawned as usual.
Later hosts are always spawned.

A host that cannot be started (its spawn fails, its handshake fails or times out, it
dies while sessions are re-announced) is ``HostStartFailed``, a ``NotSent``: the
request that needed it was never sent. Requests waiting on that start fail with it too,
and for ``START_RETRY_AFTER`` no new start is tried.

The host's direct children die with it (a parent-death signal, ``host/spawn.py``);
their descendants are killed here: by the cgroups the host made (``runtime.shared.cgroups``:
``quiesce-host-<pid>`` is killed and removed once any host is gone, since a cgroup
outlives its maker), and by the marker the host set on them, the runtime being a
child subreaper (orphans of a dead host are re-parented to it and reaped). A process
call whose grace ran out without the host's answer has its processes ended from here
(``HostLease.end_call_processes``). The cgroup handling lives in ``runtime.shared.cgroups``
(standard library and trio only) so that it can move to a package the runtime and the
host share when the runtime stops importing ``host`` (issue 17).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec
import psutil
import trio

from protocol.errors import RemoteError, RpcError
from protocol.messages.common import Empty
from protocol.messages.host import SessionOpenParams
from runtime.host_link import HostLink, default_host_command
from runtime.popen_process import PopenProcess
from runtime.shared import cgroups
from runtime.shared.proctree import (
    ENV_MARKER,
    find_marked,
    kill_adopted_children,
    kill_marked,
    sweeps_orphans,
)
from runtime.shared.rpc import ConnectionClosed, Handler, NotificationHandler, NotSent

log = logging.getLogger(__name__)

DEFAULT_PING_INTERVAL = 2.0
DEFAULT_LIVENESS_TIMEOUT = 10.0
SURVIVOR_KILL_GRACE = 0.5
# How long a call the host died under waits for that host's cleanup (its leftover tool
# processes killed) before it reports HOST_CRASHED anyway: a bound, never a hang.
GONE_TIMEOUT = 10.0
START_RETRY_AFTER = 1.0
"""After a failed start, requests fail at once for this long instead of starting again."""


class HostStartFailed(NotSent):
    """No host could be started: the request that needed one was never sent."""


@dataclass(eq=False)
class _StartAttempt:
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
        return not self.link.down.is_set()


class HostSupervisor:
    def __init__(self, *, command: Sequence[str] | None = None,
                 handlers: Mapping[str, Handler] | None = None,
                 notification_handlers: Mapping[str, NotificationHandler] | None = None,
                 ping_interval: float = DEFAULT_PING_INTERVAL,
                 liveness_timeout: float = DEFAULT_LIVENESS_TIMEOUT,
                 first_host: PopenProcess | None = None) -> None:
        self._command = command
        self._first_host = first_host
        self._handlers = dict(handlers or {})
        self._notification_handlers = dict(notification_handlers or {})
        self._ping_interval = ping_interval
        self._liveness_timeout = liveness_timeout
        self._sessions: dict[str, SessionOpenParams] = {}
        self._host: HostGeneration | None = None
        self._nursery: trio.Nursery | None = None
        self._starting: _StartAttempt | None = None
        self._failed: _StartAttempt | None = None
        self._stopping = False
        self._restarting = False
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
                await self.kill_orphans_of_dead_hosts()
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
                raise NotSent("the host is shut down")
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
        attempt = self._starting = _StartAttempt()
        try:
            await self._start()
        except* (OSError, trio.TooSlowError, RpcError, RemoteError, ConnectionClosed) as group:
            attempt.failure = f"the host could not be started: {_describe(group)}"
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
        for params in list(self._sessions.values()):  # sessions may open meanwhile
            try:
                await link.request("session.open", params)
            except RemoteError as exc:  # e.g. its workspace is gone: its calls will say so
                log.warning("host refused session %s: %s", params.session_id, exc)
        log.info("host %s started (generation %d)", info, self.generation)

    async def _serve_host(self, host: HostGeneration, *,
                          task_status: trio.TaskStatus[int | None]) -> None:
        link = host.link
        try:
            async with trio.open_nursery() as nursery:
                await link.start(nursery)
                self._host = host
                task_status.started(link.pid)
                nursery.start_soon(self._ping, link)
                await link.down.wait()
                if not link.exited.is_set() and not self._stopping:
                    # Its pipe closed but the process lives on: it can do no more for us,
                    # and must not go on beside its successor.
                    log.warning("host %s closed its link but did not exit: killing it",
                                link.pid)
                    link.kill()
                await link.exited.wait()
                nursery.cancel_scope.cancel()
            await link.release()
            if link.pid is not None:
                # Whatever its end, a host leaves no cgroup: a crashed one leaves its trees'
                # cgroups populated (a cgroup outlives its maker), an orderly one none.
                held = await cgroups.kill_host_cgroups(link.pid)
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

    async def _ping(self, link: HostLink) -> None:
        while True:
            await trio.sleep(self._ping_interval)
            started = time.monotonic()
            with trio.move_on_after(self._liveness_timeout):
                try:
                    await link.request("host.stats", Empty())
                except ConnectionClosed:
                    return
                except RemoteError as exc:  # it answered: alive
                    log.warning("host %s answered a ping with %s", link.pid, exc)
                continue
            log.error("host %s did not answer a ping within %.1f s (sent %.1f s ago): "
                      "killing it", link.pid, self._liveness_timeout,
                      time.monotonic() - started)
            link.kill()
            return

    async def _kill_survivors(self, host_pid: int | None) -> None:
        if host_pid is None:
            return
        report = await kill_marked(ENV_MARKER, f"{host_pid}:", prefix=True,
                                   grace=SURVIVOR_KILL_GRACE)
        if report.found:
            log.warning("killed %d processes left by host %s", report.found, host_pid)
        if sweeps_orphans():
            # An escapee without the marker (it cleared its environment and left its
            # session) was the dead host's orphan, and is now ours: no successor runs yet,
            # so every child but a host not yet adopted is one.
            spare = {self._first_host.pid} if self._first_host is not None else set()
            found = await kill_adopted_children(spare=spare, grace=SURVIVOR_KILL_GRACE)
            if found:
                log.warning("killed %d unmarked processes orphaned by host %s", found,
                            host_pid)

    async def request(self, method: str, params: msgspec.Struct) -> Any:
        link = await self.ensure()
        return await link.request(method, params)

    async def request_if_alive(self, method: str, params: msgspec.Struct) -> Any:
        """Send to the current host only: a message that needs no host never starts one."""
        host = self._host
        if host is None or not host.usable:
            raise NotSent("no live host")
        return await host.link.request(method, params)

    async def open_session(self, params: SessionOpenParams) -> None:
        self._sessions[params.session_id] = params
        await self.request("session.open", params)

    def forget_session(self, session_id: str) -> None:
        """A session that never opened: a later host is not told of it."""
        self._sessions.pop(session_id, None)

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

    @staticmethod
    async def kill_orphans_of_dead_hosts() -> int:
        """At start-up: tool processes whose host is gone (a runtime and host killed
        together, e.g. by a signal to their process group) are killed: by their host's
        cgroups (``quiesce-host-<pid>`` of a dead pid, beneath ours), and by marker."""
        pids: set[str] = set()
        for proc in find_marked(ENV_MARKER, "", prefix=True):
            try:
                value = proc.environ().get(ENV_MARKER, "")
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
            host_pid = value.split(":", 1)[0]
            if host_pid.isdigit() and not psutil.pid_exists(int(host_pid)):
                pids.add(host_pid)
        killed = await cgroups.sweep_dead_hosts()
        for host_pid in pids:
            report = await kill_marked(ENV_MARKER, f"{host_pid}:", prefix=True,
                                       grace=SURVIVOR_KILL_GRACE)
            killed += report.found
        if killed:
            log.warning("killed %d tool processes left by dead hosts", killed)
        return killed

    async def stop(self) -> None:
        self._stopping = True
        if self._host is not None:
            await self._host.link.stop()


class HostLease:
    """One turn's hold on one host (shared with the turn's subagents).

    The turn's first request takes the usable host (starting one if there is none) and
    every later request goes to that same host. Once it is dead, nothing more of the turn
    reaches a successor: a request raises ``NotSent`` (the call was never sent, its body
    never ran), and the turn, which lost its host, ends. A host that died before the turn
    sent anything is no loss to the turn: its first request finds the successor.
    """

    def __init__(self, supervisor: HostSupervisor) -> None:
        self._supervisor = supervisor
        self._host: HostGeneration | None = None

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
            raise NotSent(f"host {host.link.pid} (generation {host.number}) of this turn "
                          "is gone")
        return await host.link.request(method, params)

    async def request_if_alive(self, method: str, params: msgspec.Struct) -> Any:
        """Send to the held host only: a stop never starts a host to deliver itself."""
        host = self._host
        if host is None or not host.usable:
            raise NotSent("this turn has no live host")
        return await host.link.request(method, params)

    async def end_call_processes(self, session_id: str, host_call_id: str) -> str | None:
        """A process call's grace ran out without the held host's result: its cgroup is
        killed (the path is known: ``runtime.shared.cgroups``), or, for a host without cgroups, the
        host is ended (killed, its trees swept) and waited for. How, or ``None`` if the
        turn holds no live host."""
        host = self._host
        if host is None or host.gone.is_set() or host.link.pid is None:
            return None
        pid = host.link.pid
        if cgroups.host_dir(pid) is not None and await trio.to_thread.run_sync(
                _is_dir, cgroups.host_dir(pid)):
            emptied = await cgroups.kill_call_cgroup(pid, session_id, host_call_id)
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


def _describe(error: BaseException) -> str:
    """The first error of a (nested) group, named: a timeout's message is empty."""
    while isinstance(error, BaseExceptionGroup):
        error = error.exceptions[0]
    return f"{type(error).__name__}: {error}" if str(error) else type(error).__name__


def _is_dir(path: str | None) -> bool:
    return path is not None and os.path.isdir(path)
