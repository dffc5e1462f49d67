"""``quiesce serve`` as the chat's subprocess: started, linked, stopped, and watched.

This is :func:`runtime.clients.daemon_client.spawn_daemon` with the two options a terminal
needs: the daemon starts in its own session, so a Ctrl-C that reaches the
terminal's foreground process group (while the UI briefly hands the terminal
back to cooked mode to print) never signals it, and its stderr (JSON log lines)
goes to a file, never to the screen. Shutdown is the same: close its stdin,
wait, kill past a deadline.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import IO

import psutil

from runtime.clients.daemon_client import DaemonClient, serve_command, spawn_daemon
from runtime.link import Handler, NotificationHandler
from runtime.proc.proctree import ENV_MARKER  # in the environment of every tool process


@asynccontextmanager
async def open_daemon(
    *,
    log_file: IO[bytes],
    handlers: Mapping[str, Handler],
    notification_handlers: Mapping[str, NotificationHandler],
    env: Mapping[str, str] | None = None,
    serve_args: Sequence[str] = (),
) -> AsyncIterator[DaemonClient]:
    async with spawn_daemon(serve_command(*serve_args), handlers=handlers,
                            notification_handlers=notification_handlers, env=env,
                            stderr=log_file, start_new_session=True) as daemon:
        yield daemon


def tool_processes(daemon_pid: int) -> list[psutil.Process]:
    """Live processes a host started for tool calls, under this daemon (found by marker)."""
    try:
        descendants = psutil.Process(daemon_pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []
    found = []
    for proc in descendants:
        try:
            if (proc.status() != psutil.STATUS_ZOMBIE
                    and ENV_MARKER in proc.environ()):
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


def still_alive(processes: list[psutil.Process]) -> int:
    alive = 0
    for proc in processes:
        try:
            if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                alive += 1
        except (psutil.NoSuchProcess, psutil.ZombieProcess):
            continue
    return alive

