"""The ops control socket of a daemon: ``<run dir>/<pid>.sock`` and its pid file.

``OpsServer.serve`` creates (or checks) the private run directory, listens on a 0600
Unix socket in it, writes ``<pid>.json`` beside it, and serves each connection of the
same user with an :class:`OpsConnection`; connections of other users are refused
(``SO_PEERCRED``). When it ends, however it ends, the socket and the pid file are
removed.

Start it like any trio service::

    path = await nursery.start(OpsServer(backend, data_dir=data_dir).serve)
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import pathlib
import time

import trio

from runtime.daemon.ops.backend import OpsBackend
from runtime.daemon.ops.connection import HANDSHAKE_TIMEOUT, SERVER_VERSION, OpsConnection
from runtime.daemon.ops.pidfile import (
    PidFile,
    pid_files,
    remove_daemon_files,
    socket_path,
    write_pid_file,
)
from runtime.daemon.ops.rundir import ensure_private_dir, run_dir
from runtime.daemon.ops.unixsock import bind_unix_listener, peer_uid
from runtime.proc.peers import refusal

log = logging.getLogger(__name__)

CLOSE_TIMEOUT = 1.0
MAX_OPS_CONNECTIONS = 32
"""Operator connections served at once; one more is closed at once (and counted). Each
holds at most ``MAX_OPS_FRAME`` of an unfinished line and must shake hands within
``HANDSHAKE_TIMEOUT``, so a flood of connections is bounded in memory and clears."""


class OpsServer:
    def __init__(self, backend: OpsBackend, *, data_dir: pathlib.Path | None = None,
                 directory: pathlib.Path | None = None,
                 max_connections: int = MAX_OPS_CONNECTIONS,
                 handshake_timeout: float = HANDSHAKE_TIMEOUT,
                 refuse_own_descendants: bool = False) -> None:
        """``directory`` overrides the run directory (default: :func:`run_dir`).
        ``refuse_own_descendants``: this process is a daemon, whose descendants are its
        sessions' processes (refused, as those of the run directory's other daemons)."""
        self.backend = backend
        self.data_dir = data_dir
        self.directory = directory
        self.socket_path: pathlib.Path | None = None  # set while serving
        self.pid_file: pathlib.Path | None = None
        self.connections = 0  # open now
        self.refused = 0  # connections of other users, or of a session's processes
        self.turned_away = 0  # connections over ``max_connections``
        self._max_connections = max_connections
        self._handshake_timeout = handshake_timeout
        self._uid = os.getuid()
        self._names = itertools.count(1)
        self._own = refuse_own_descendants

    async def serve(self, *,
                    task_status: trio.TaskStatus[pathlib.Path] = trio.TASK_STATUS_IGNORED
                    ) -> None:
        """Serve until cancelled; ``task_status.started`` gets the socket path.

        Raises ``UnsafeRunDir`` (before listening) if the run directory exists but is
        owned by another user or open to group or others.
        """
        directory = ensure_private_dir(self.directory or run_dir(self._uid), self._uid)
        pid = os.getpid()
        path = socket_path(directory, pid)
        listener = bind_unix_listener(path)
        try:
            self.pid_file = write_pid_file(directory, PidFile(
                pid, str(path), time.time(),
                str(self.data_dir) if self.data_dir is not None else None, SERVER_VERSION))
            self.socket_path = path
            log.info("ops socket listening at %s", path)
            async with trio.open_nursery() as nursery:
                await nursery.start(trio.serve_listeners, self._serve_connection, [listener])
                task_status.started(path)
        finally:
            self.socket_path = self.pid_file = None
            remove_daemon_files(directory, pid)  # synchronous: cancellation cannot skip it
            with trio.CancelScope(shield=True):
                await listener.aclose()  # idempotent; serve_listeners may have closed it

    def _daemons(self) -> set[int]:
        """This daemon and the others of its run directory: their sessions' processes
        are refused (``runtime.proc.peers``)."""
        daemons: set[int] = set()
        if self.socket_path is not None:
            with contextlib.suppress(OSError):
                daemons.update(pid for pid, _ in pid_files(self.socket_path.parent))
        daemons.discard(os.getpid())
        if self._own:
            daemons.add(os.getpid())
        return daemons

    async def _serve_connection(self, stream: trio.SocketStream) -> None:
        try:
            try:
                uid = peer_uid(stream)
            except OSError as exc:
                log.warning("ops: no peer credentials (%s); connection refused", exc)
                return
            if uid is not None and uid != self._uid:
                self.refused += 1
                log.warning("ops: refused a connection from uid %d (serving uid %d only)",
                            uid, self._uid)
                return
            why = refusal(stream.socket, self._daemons())
            if why is not None:
                self.refused += 1
                log.warning("ops: refused a connection: %s", why)
                return
            if self.connections >= self._max_connections:
                self.turned_away += 1
                if self.turned_away % 100 == 1:  # a flood is said, not logged line by line
                    log.warning("ops: %d connections open already; one more closed (%d so "
                                "far)", self.connections, self.turned_away)
                return
            self.connections += 1
            try:
                conn = OpsConnection(f"ops#{next(self._names)}", self.backend, stream,
                                     data_dir=self.data_dir,
                                     handshake_timeout=self._handshake_timeout)
                await conn.run()
            finally:
                self.connections -= 1
        finally:
            with trio.CancelScope(shield=True), trio.move_on_after(CLOSE_TIMEOUT):
                await stream.aclose()
