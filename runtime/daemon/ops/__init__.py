"""The daemon's operator control socket: ``<run dir>/<pid>.sock``, beside its pid file.
``quiesce ops`` (``runtime.clients.ops``) is its client.

| module | concept |
|---|---|
| ``backend`` | what the ops server needs from the daemon (``OpsBackend``) |
| ``rundir`` | the private run directory: where it is, whether it is safe |
| ``pidfile`` | ``<pid>.json`` beside each socket: write, read, list, remove |
| ``unixsock`` | a 0600 listening Unix socket; the uid of a peer (``SO_PEERCRED``) |
| ``server`` | ``OpsServer``: directory, socket, pid file, one connection per operator |
| ``connection`` | one operator's connection: handshake, methods, bounded tails |
"""

from __future__ import annotations

from runtime.daemon.ops.backend import EventListener, OpsBackend
from runtime.daemon.ops.rundir import UnsafeRunDir, run_dir
from runtime.daemon.ops.server import OpsServer

__all__ = ["EventListener", "OpsBackend", "OpsServer", "UnsafeRunDir", "run_dir"]
