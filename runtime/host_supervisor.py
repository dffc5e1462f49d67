"""The runtime's host, kept alive: started on demand, watched, replaced after a crash.

A host that exits (pipe closed, process gone) or stops answering the liveness
ping within ``liveness_timeout`` is dead: a hung one is killed (SIGKILL works on
a stopped process too). Requests in flight fail with ``ConnectionClosed``
(``HOST_CRASHED`` for a call whose execute was sent; ``NotSent`` for one never
sent), the tool processes the dead host started are killed by the marker it
set on them, and the next request starts a fresh host with a new handshake,
to which every open session is re-announced.

The first host may be given, already started (``first_host``: ``quiesce serve`` starts
it before its own imports): the first link adopts it if it runs the command this
supervisor would run; otherwise it is killed and reaped, and one is spawned as usual.
Later hosts are always spawned.

Tool processes do not get a parent-death signal: Linux delivers it when the
*thread* that forked exits, and the host spawns from worker threads. The
marker-based kill here, and the runtime being a child subreaper (orphans of a
dead host are re-parented to it and reaped), cover the same ground.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any

import msgspec
import psutil
import trio

from host.proctree import ENV_MARKER, find_marked, kill_marked
from protocol.errors import RemoteError
from protocol.messages.common import Empty
from protocol.messages.host import SessionOpenParams
from runtime.host_link import HostLink, default_host_command
from runtime.popen_process import PopenProcess
from runtime.rpc import ConnectionClosed, Handler, NotificationHandler, NotSent

log = logging.getLogger(__name__)

DEFAULT_PING_INTERVAL = 2.0
DEFAULT_LIVENESS_TIMEOUT = 10.0
SURVIVOR_KILL_GRACE = 0.5


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
        self._link: HostLink | None = None
        self._nursery: trio.Nursery | None = None
        self._starting: trio.Event | None = None
        self._stopping = False
        self._restarting = False
        self.generation = 0
        self.crashes = 0
        self.restarts = 0

    @property
    def link(self) -> HostLink | None:
        return self._link

    @property
    def pid(self) -> int | None:
        return self._link.pid if self._link is not None else None

    def alive(self) -> bool:
        return self._link is not None and not self._link.exited.is_set() \
            and not self._link.closed

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
        """The live host, starting a fresh one if there is none."""
        while not self.alive():
            if self._stopping:
                raise NotSent("the host is shut down")
            if self._starting is not None:
                await self._starting.wait()
                continue
            self._starting = trio.Event()
            try:
                await self._start()
            finally:
                self._starting.set()
                self._starting = None
        assert self._link is not None
        return self._link

    async def _start(self) -> None:
        assert self._nursery is not None
        # The first host given is adopted (it was checked in run()); later ones are spawned.
        first, self._first_host = self._first_host, None
        link = HostLink(command=self._command, handlers=self._handlers,
                        notification_handlers=self._notification_handlers, process=first)
        # The host's tasks live in their own nursery: its death ends them, not us.
        info = await self._nursery.start(self._serve_host, link)
        self.generation += 1
        if self.generation > 1:
            self.restarts += 1
        for params in self._sessions.values():
            try:
                await link.request("session.open", params)
            except RemoteError as exc:  # e.g. its workspace is gone: its calls will say so
                log.warning("host refused session %s: %s", params.session_id, exc)
        log.info("host %s started (generation %d)", info, self.generation)

    async def _serve_host(self, link: HostLink, *,
                          task_status: trio.TaskStatus[int | None]) -> None:
        async with trio.open_nursery() as nursery:
            await link.start(nursery)
            self._link = link
            task_status.started(link.pid)
            nursery.start_soon(self._ping, link)
            await link.exited.wait()
            nursery.cancel_scope.cancel()
        await link.release()
        if self._restarting:
            self._restarting = False
            await self._kill_survivors(link.pid)
        elif not self._stopping:
            self.crashes += 1
            log.warning("host %s died; killing the tool processes it left", link.pid)
            await self._kill_survivors(link.pid)

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

    @staticmethod
    async def _kill_survivors(host_pid: int | None) -> None:
        if host_pid is None:
            return
        report = await kill_marked(ENV_MARKER, f"{host_pid}:", prefix=True,
                                   grace=SURVIVOR_KILL_GRACE)
        if report.found:
            log.warning("killed %d processes left by host %s", report.found, host_pid)

    async def request(self, method: str, params: msgspec.Struct) -> Any:
        link = await self.ensure()
        return await link.request(method, params)

    async def request_if_alive(self, method: str, params: msgspec.Struct) -> Any:
        """Send to the current host only: a stop never starts a host to deliver itself."""
        link = self._link
        if link is None or not self.alive():
            raise NotSent("no live host")
        return await link.request(method, params)

    async def open_session(self, params: SessionOpenParams) -> None:
        self._sessions[params.session_id] = params
        await self.request("session.open", params)

    def forget_session(self, session_id: str) -> None:
        """A session that never opened: a later host is not told of it."""
        self._sessions.pop(session_id, None)

    async def restart(self) -> tuple[int | None, int | None]:
        """Replace the current host: it is killed, so the calls waiting on it end
        HOST_CRASHED (as for a crash, without counting one), and a fresh one starts."""
        old = self._link
        old_pid = old.pid if old is not None else None
        if old is not None and self.alive():
            self._restarting = True
            old.kill()
            with trio.move_on_after(10):
                await old.exited.wait()
        link = await self.ensure()
        return old_pid, link.pid

    @staticmethod
    async def kill_orphans_of_dead_hosts() -> int:
        """At start-up: tool processes whose host is gone (a runtime and host killed
        together, e.g. by a signal to their process group) are killed by their marker."""
        pids: set[str] = set()
        for proc in find_marked(ENV_MARKER, "", prefix=True):
            try:
                value = proc.environ().get(ENV_MARKER, "")
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
            host_pid = value.split(":", 1)[0]
            if host_pid.isdigit() and not psutil.pid_exists(int(host_pid)):
                pids.add(host_pid)
        killed = 0
        for host_pid in pids:
            report = await kill_marked(ENV_MARKER, f"{host_pid}:", prefix=True,
                                       grace=SURVIVOR_KILL_GRACE)
            killed += report.found
        if killed:
            log.warning("killed %d tool processes left by dead hosts", killed)
        return killed

    async def stop(self) -> None:
        self._stopping = True
        if self._link is not None:
            await self._link.stop()
