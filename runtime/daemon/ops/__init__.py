"""Operator tooling: a control socket on the runtime, and the ``quiesce ops`` client.

| module | concept |
|---|---|
| ``backend`` | what the ops server needs from the daemon (``OpsBackend``) |
| ``rundir`` | the private run directory: where it is, whether it is safe |
| ``pidfile`` | ``<pid>.json`` beside each socket: write, read, list, remove |
| ``unixsock`` | a 0600 listening Unix socket; the uid of a peer (``SO_PEERCRED``) |
| ``server`` | ``OpsServer``: directory, socket, pid file, one connection per operator |
| ``connection`` | one operator's connection: handshake, methods, bounded tails |
| ``client`` | finding this user's daemons (stale ones cleaned); ``OpsClient`` |
| ``targets`` | which daemon or session a command means |
| ``render`` | the human-readable tables and lines of ``quiesce ops`` |
| ``cli`` | the ``quiesce ops`` command |
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from runtime.daemon.ops.backend import EventListener, OpsBackend
from runtime.daemon.ops.rundir import UnsafeRunDir, run_dir
from runtime.daemon.ops.server import OpsServer

if TYPE_CHECKING:
    from runtime.clients.ops.client import Discovery, OpsClient, RunningDaemon, connect, discover

# The operator's client is loaded when first named: the daemon imports this package for
# its server at start-up, and needs none of the client (issue 20).
_CLIENT = frozenset({"Discovery", "OpsClient", "RunningDaemon", "connect", "discover"})


def __getattr__(name: str) -> Any:
    if name in _CLIENT:
        from runtime.clients.ops import client

        return getattr(client, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "Discovery",
    "EventListener",
    "OpsBackend",
    "OpsClient",
    "OpsServer",
    "RunningDaemon",
    "UnsafeRunDir",
    "connect",
    "discover",
    "run_dir",
]
