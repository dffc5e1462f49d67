"""The runtime's link to its host process: spawn, handshake, requests, stop.

The host is the runtime's child over stdio; its stderr is the runtime's stderr. A link
spawns its host, or adopts one already started for it (``quiesce serve`` starts its first
host before its own imports: ``runtime/supervision/popen_process.py``).
Stopping it is a request (``shutdown``), then EOF on its stdin, then, past a
deadline, SIGKILL. A killed host is given ``KILL_EXIT_TIMEOUT`` to exit: one that cannot
(a thread of it in uninterruptible sleep, e.g. a read from a FUSE file system that never
answers, holds the whole process until that read returns) is not waited for beyond that:
its pipes are closed, so nothing waits on it, and it is reaped when it finally exits
(``HostSupervisor``: ``runtime/supervision/reaper.py``).
"""

from __future__ import annotations

import logging
import subprocess
import sys
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import msgspec
import trio

from protocol.errors import RemoteError
from protocol.messages.common import Empty, InitializeParams, InitializeResult, PeerInfo
from protocol.methods import HOST_TO_RUNTIME, RUNTIME_TO_HOST
from protocol.version import PROTOCOL_VERSION, check_compatible
from runtime.link import (
    ConnectionClosed,
    Endpoint,
    Handler,
    NotificationHandler,
    NotSent,
    OversizedMessage,
)
from runtime.proc.secretenv import host_environment
from runtime.supervision.failures import (
    HostAnswerMalformed,
    HostLost,
    HostNotReached,
    HostRefused,
    HostRequestTooLarge,
)

log = logging.getLogger(__name__)

HANDSHAKE_TIMEOUT = 20.0
STOP_TIMEOUT = 5.0
KILL_EXIT_TIMEOUT = 3.0
"""How long a SIGKILLed host may take to exit before it is called unkillable."""


def default_host_command() -> list[str]:
    return [sys.executable, "-m", "host"]


class HostProcess(Protocol):
    """What a link needs of its host process: a ``trio.Process``, or an adopted one."""

    @property
    def pid(self) -> int: ...

    @property
    def returncode(self) -> int | None: ...

    @property
    def stdin(self) -> trio.abc.SendStream | None: ...

    @property
    def stdout(self) -> trio.abc.ReceiveStream | None: ...

    def kill(self) -> None: ...

    async def wait(self) -> int: ...


class HostLink:
    def __init__(
        self,
        *,
        command: Sequence[str] | None = None,
        handlers: Mapping[str, Handler] | None = None,
        notification_handlers: Mapping[str, NotificationHandler] | None = None,
        env: Mapping[str, str] | None = None,
        process: HostProcess | None = None,
    ) -> None:
        """``process``: a host already started (as ``command`` with ``env`` would start
        it) that :meth:`start` adopts instead of spawning one; the link then owns it."""
        self._command = list(command or default_host_command())
        self._adopted = process
        # The host holds no secret: a tool process can read its parent's environment.
        self._env = dict(env) if env is not None else host_environment(self._command)
        self._handlers = dict(handlers or {})
        self._notification_handlers = dict(notification_handlers or {})
        self._process: HostProcess | None = None
        self._endpoint: Endpoint | None = None
        self.info: InitializeResult | None = None
        self.exited = trio.Event()
        # Set when the host exits, its link closes or it is killed, whichever comes first:
        # a host can close its stdout and live on, and is then as dead to us as one that
        # exited; a killed one may not exit at once, or ever (see the module's text).
        self.down = trio.Event()
        self.killed = False

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    async def start(self, nursery: trio.Nursery) -> InitializeResult:
        """Spawn the host (or adopt the one given), serve its link in ``nursery`` and
        shake hands."""
        process: HostProcess
        if self._adopted is not None:
            process, self._adopted = self._adopted, None
            log.info("host %d adopted (started before the runtime's imports)", process.pid)
        else:
            process = await trio.lowlevel.open_process(
                self._command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=self._env
            )
        self._process = process
        assert process.stdin is not None and process.stdout is not None
        endpoint = Endpoint(
            f"host[{process.pid}]",
            process.stdout,
            process.stdin,
            incoming=HOST_TO_RUNTIME,
            outgoing=RUNTIME_TO_HOST,
            handlers=self._handlers,
            notification_handlers=self._notification_handlers,
        )
        self._endpoint = endpoint
        await nursery.start(endpoint.run)
        nursery.start_soon(self._watch_exit, process)
        nursery.start_soon(self._watch_link, endpoint)
        try:
            with trio.fail_after(HANDSHAKE_TIMEOUT):
                info: InitializeResult = await _mapped(endpoint, "initialize", InitializeParams(
                    PROTOCOL_VERSION, PeerInfo("quiesce-runtime", "0.1.0")))
            check_compatible(info.protocol_version)
        except BaseException:
            self.kill()  # a host that failed its handshake is not left running
            with trio.CancelScope(shield=True), trio.move_on_after(KILL_EXIT_TIMEOUT):
                await process.wait()  # one that cannot exit: ``lingering``
            await self.release()
            raise
        self.info = info
        log.info("host %d ready", process.pid)
        return info

    async def _watch_exit(self, process: HostProcess) -> None:
        code = await process.wait()
        log.info("host %d exited with %s", process.pid, code)
        self.exited.set()
        self.down.set()

    async def _watch_link(self, endpoint: Endpoint) -> None:
        await endpoint.closed.wait()
        self.down.set()

    @property
    def lingering(self) -> bool:
        """Killed, and not exited (yet): it is reaped later (``runtime/supervision/reaper.py``)."""
        return self.killed and self._process is not None and self._process.returncode is None

    @property
    def closed(self) -> bool:
        return self._endpoint is None or self._endpoint.closed.is_set()

    async def request(self, method: str, params: msgspec.Struct) -> Any:
        """The host's typed result; anything else is one of ``failures.py``'s kinds, mapped
        here once from what the link raised."""
        if self._endpoint is None:
            raise HostNotReached("host not started")
        return await _mapped(self._endpoint, method, params)

    def kill(self) -> None:
        """SIGKILL the host (a hung one): it is down at once; its exit closes the link,
        or, if it cannot exit, :meth:`release` does."""
        if self._process is not None and self._process.returncode is None:
            self._process.kill()
            self.killed = True
            self.down.set()

    async def reap(self) -> int:
        """Wait, however long, for the host to exit; reap it; its exit status."""
        assert self._process is not None
        code = await self._process.wait()
        self.exited.set()
        return code

    async def stop(self) -> None:
        """Ask the host to shut down, close its stdin, and make sure it is gone."""
        process, endpoint = self._process, self._endpoint
        if process is None or endpoint is None:
            return
        with trio.CancelScope(shield=True):
            with trio.move_on_after(STOP_TIMEOUT):
                try:
                    await endpoint.request("shutdown", Empty())
                except (ConnectionClosed, RemoteError) as exc:
                    log.info("host shutdown request: %s", exc)
            assert process.stdin is not None
            await process.stdin.aclose()
            with trio.move_on_after(STOP_TIMEOUT):
                await process.wait()
            if process.returncode is None:
                log.warning("host %d did not exit; killing it", process.pid)
                self.kill()
                with trio.move_on_after(KILL_EXIT_TIMEOUT):
                    await process.wait()
            if process.returncode is None:
                log.error("host %d cannot exit (killed %.0f s ago; a thread of it is "
                          "likely stuck in the kernel, e.g. on a file system that does not "
                          "answer): not waiting for it", process.pid, KILL_EXIT_TIMEOUT)
        await self.release()

    async def release(self) -> None:
        """Close both pipes to the host (idempotent): a dead or failed host's file
        descriptors are not left to the garbage collector. A reader still blocked on
        the host's stdout sees ``ClosedResourceError`` and ends like on EOF."""
        process = self._process
        if process is None:
            return
        with trio.CancelScope(shield=True):
            for stream in (process.stdin, process.stdout):
                if stream is not None:
                    await stream.aclose()


async def _mapped(endpoint: Endpoint, method: str, params: msgspec.Struct) -> Any:
    """``endpoint.request``, its failures mapped to ``failures.py``'s kinds (the one place)."""
    try:
        return await endpoint.request(method, params)
    except NotSent as exc:
        raise HostNotReached(str(exc)) from exc
    except ConnectionClosed as exc:
        raise HostLost(str(exc)) from exc
    except OversizedMessage as exc:
        raise HostRequestTooLarge.of(exc) from exc
    except RemoteError as exc:
        raise HostRefused.of(exc) from exc
    except msgspec.DecodeError as exc:  # ValidationError is one
        raise HostAnswerMalformed(method, str(exc)) from exc
