"""Which daemon (and session) an ``quiesce ops`` command acts on.

A target is a daemon's pid (all digits) or a session id. With no target, the one
running daemon is meant; with several, the operator must name one.
"""

from __future__ import annotations

import pathlib
from collections.abc import Sequence

from protocol.messages.ops import OpsSession
from runtime.clients.ops.client import RunningDaemon, connect


class TargetError(Exception):
    """The target names no running daemon or session, or is ambiguous."""


def parse_target(text: str | None) -> int | str | None:
    """A pid (int), a session id (str), or None."""
    if text is None:
        return None
    return int(text) if text.isdigit() else text


def pick_daemon(daemons: Sequence[RunningDaemon], pid: int | None,
                directory: pathlib.Path) -> RunningDaemon:
    if pid is not None:
        for daemon in daemons:
            if daemon.pid == pid:
                return daemon
        raise TargetError(f"no running quiesce daemon with pid {pid} (looked in {directory})")
    if not daemons:
        raise TargetError(f"no quiesce daemon is running (looked in {directory})")
    if len(daemons) > 1:
        pids = ", ".join(str(d.pid) for d in daemons)
        raise TargetError(f"{len(daemons)} daemons are running (pids {pids}); name one")
    return daemons[0]


async def locate_session(daemons: Sequence[RunningDaemon], session_id: str,
                         directory: pathlib.Path) -> tuple[RunningDaemon, OpsSession]:
    """The daemon that has the session, and the session as it is now."""
    for daemon in daemons:
        async with connect(daemon.socket) as client:
            listing = await client.sessions()
        for session in listing.sessions:
            if session.session_id == session_id:
                return daemon, session
    if not daemons:
        raise TargetError(f"no quiesce daemon is running (looked in {directory})")
    raise TargetError(f"no running daemon has session {session_id!r}")
