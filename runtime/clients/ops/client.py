"""The client side of the ops socket: finding this user's daemons and talking to one.

``discover`` reads the pid files of the run directory and keeps the daemons that are
alive and accept a connection; the files of the others (process gone, socket refusing,
file garbled) are removed. ``connect`` opens an :class:`OpsClient` on one socket: the
same :class:`~runtime.link.Endpoint` as every other link, after the ``initialize``
handshake.
"""

from __future__ import annotations

import pathlib
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import msgspec
import psutil
import trio

from protocol.messages.client import AgentAbortResult
from protocol.messages.common import Empty, InitializeParams, InitializeResult, PeerInfo
from protocol.messages.ops import (
    OpsEventParams,
    OpsForceParams,
    OpsForceResult,
    OpsRestartHostResult,
    OpsSessionParams,
    OpsSessionsResult,
    OpsStatsResult,
    OpsTailParams,
    OpsTailResult,
)
from protocol.methods import OPS_TO_RUNTIME, RUNTIME_TO_OPS
from protocol.version import PROTOCOL_VERSION
from runtime.daemon.ops.pidfile import PidFile, pid_files, read_pid_file, remove_daemon_files
from runtime.daemon.ops.rundir import check_private_dir, run_dir
from runtime.link import Endpoint

CLIENT_INFO = PeerInfo("quiesce-ops", "0.1.0")
PARENT_SHOWN = 60  # characters of a daemon's parent's command line shown


@dataclass(frozen=True)
class RunningDaemon:
    info: PidFile
    pid_file: pathlib.Path

    @property
    def pid(self) -> int:
        return self.info.pid

    @property
    def socket(self) -> pathlib.Path:
        return pathlib.Path(self.info.socket)


@dataclass
class Discovery:
    directory: pathlib.Path
    daemons: list[RunningDaemon] = field(default_factory=list)
    removed: list[tuple[int, str]] = field(default_factory=list)  # (pid, why) cleaned up


async def discover(directory: pathlib.Path | None = None) -> Discovery:
    """The daemons of this user in ``directory`` (default :func:`run_dir`), by pid.

    Raises ``UnsafeRunDir`` if the directory is not private to this user.
    """
    found = Discovery(directory or run_dir())
    if not check_private_dir(found.directory):
        return found
    for pid, path in pid_files(found.directory):
        why = await _stale_reason(pid, path, found)
        if why is not None:
            remove_daemon_files(found.directory, pid)
            found.removed.append((pid, why))
    return found


async def _stale_reason(pid: int, path: pathlib.Path, found: Discovery) -> str | None:
    if not psutil.pid_exists(pid):
        return "process gone"
    try:
        info = read_pid_file(path)
    except FileNotFoundError:
        return None  # removed meanwhile (the daemon is exiting): nothing to clean
    except (OSError, msgspec.DecodeError) as exc:
        return f"unreadable pid file: {exc}"
    if info.pid != pid:
        return f"pid file names pid {info.pid}"
    try:
        stream = await trio.open_unix_socket(info.socket)
    except (ConnectionRefusedError, FileNotFoundError):
        return "socket refuses connections"
    await stream.aclose()
    found.daemons.append(RunningDaemon(info, path))
    return None


class OpsClient:
    """One connection to one daemon's ops socket."""

    def __init__(self, endpoint: Endpoint) -> None:
        self.endpoint = endpoint
        self.info: InitializeResult | None = None

    async def initialize(self) -> InitializeResult:
        self.info = await self.endpoint.request(
            "initialize", InitializeParams(PROTOCOL_VERSION, CLIENT_INFO))
        return self.info

    async def sessions(self) -> OpsSessionsResult:
        result: OpsSessionsResult = await self.endpoint.request("ops.sessions", Empty())
        return result

    async def abort(self, session_id: str) -> AgentAbortResult:
        result: AgentAbortResult = await self.endpoint.request(
            "ops.abort", OpsSessionParams(session_id))
        return result

    async def force(self, session_id: str, call_id: str) -> OpsForceResult:
        result: OpsForceResult = await self.endpoint.request(
            "ops.force", OpsForceParams(session_id, call_id))
        return result

    async def restart_host(self) -> OpsRestartHostResult:
        result: OpsRestartHostResult = await self.endpoint.request("ops.restartHost", Empty())
        return result

    async def stats(self) -> OpsStatsResult:
        result: OpsStatsResult = await self.endpoint.request("ops.stats", Empty())
        return result

    async def tail(self, on_event: Callable[[OpsEventParams], None],
                   session_id: str | None = None) -> OpsTailResult:
        """Call ``on_event`` with every event (inline, in wire order) until the tail ends.

        The tail lasts as long as the connection: leave ``connect`` to stop it (the
        daemon then removes its listener). Raises ``ConnectionClosed`` when the daemon
        goes away.
        """
        self.endpoint.add_notification_handler("ops.event", on_event)
        result: OpsTailResult = await self.endpoint.request(
            "ops.tail", OpsTailParams(session_id))
        return result


@asynccontextmanager
async def connect(socket: pathlib.Path | str) -> AsyncIterator[OpsClient]:
    """Connect and shake hands; on exit the connection is closed.

    What the body raises comes out unwrapped: the endpoint's own task raises nothing
    (it turns I/O errors into a closed link), so trio's group around it is dropped.
    """
    stream = await trio.open_unix_socket(socket)
    try:
        endpoint = Endpoint(f"ops:{socket}", stream, stream, incoming=RUNTIME_TO_OPS,
                            outgoing=OPS_TO_RUNTIME)
        async with trio.open_nursery() as nursery:
            await nursery.start(endpoint.run)
            client = OpsClient(endpoint)
            await client.initialize()
            yield client
            nursery.cancel_scope.cancel()
    except BaseExceptionGroup as group:
        if len(group.exceptions) == 1:
            raise group.exceptions[0] from None
        raise
    finally:
        with trio.CancelScope(shield=True):
            await stream.aclose()


def daemon_client(pid: int) -> dict[str, Any]:
    """Which daemon ``pid`` is, as its process says: what it runs (``serve``, ``acp``) and
    the client that started it (its parent: an editor, ``quiesce chat``, a shell). Empty
    where the process cannot be read (gone, or another user's)."""
    try:
        process = psutil.Process(pid)
        command = process.cmdline()
        parent = process.parent()
        parent_command = parent.cmdline() if parent is not None else []
    except psutil.Error:
        return {}
    kind = next((word for word in command if word in ("serve", "acp")), "")
    return {"command": kind, "parentPid": parent.pid if parent is not None else None,
            "parent": " ".join(parent_command)[:PARENT_SHOWN]}
