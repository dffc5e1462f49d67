"""``quiesce serve`` as the chat's subprocess: started, linked, stopped, and watched.

This is :func:`runtime.client.spawn_daemon` with two differences a terminal
needs: the daemon starts in its own session, so a Ctrl-C that reaches the
terminal's foreground process group (while the UI briefly hands the terminal
back to cooked mode to print) never signals it, and its stderr (JSON log lines)
goes to a file, never to the screen. Shutdown is the same: close its stdin,
wait, kill past a deadline.
"""

from __future__ import annotations

import subprocess
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import IO

import psutil
import trio

from host.manager import ENV_MARKER  # in the environment of every tool process
from protocol.methods import CLIENT_TO_RUNTIME, RUNTIME_TO_CLIENT
from runtime.client import SHUTDOWN_TIMEOUT, DaemonClient, serve_command
from runtime.rpc import Endpoint, Handler, NotificationHandler


@asynccontextmanager
async def open_daemon(
    *,
    log_file: IO[bytes],
    handlers: Mapping[str, Handler],
    notification_handlers: Mapping[str, NotificationHandler],
    env: Mapping[str, str] | None = None,
) -> AsyncIterator[DaemonClient]:
    process = await trio.lowlevel.open_process(
        serve_command(), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log_file,
        env=dict(env) if env is not None else None, start_new_session=True)
    assert process.stdin is not None and process.stdout is not None
    endpoint = Endpoint("daemon", process.stdout, process.stdin, incoming=RUNTIME_TO_CLIENT,
                        outgoing=CLIENT_TO_RUNTIME, handlers=handlers,
                        notification_handlers=notification_handlers)
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(endpoint.run)
            try:
                yield DaemonClient(process, endpoint)
            finally:
                with trio.CancelScope(shield=True):
                    await process.stdin.aclose()
                    with trio.move_on_after(SHUTDOWN_TIMEOUT):
                        await process.wait()
                nursery.cancel_scope.cancel()
    finally:
        if process.returncode is None:
            process.kill()
            with trio.CancelScope(shield=True):
                await process.wait()


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

