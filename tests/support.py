"""Test support: marking the processes a test starts, and finding survivors."""

from __future__ import annotations

import os
import pathlib
import time
import uuid

import psutil

MARK_VAR = "QUIESCE_TEST_MARK"


def new_mark() -> str:
    return uuid.uuid4().hex


def marked_env(mark: str, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env[MARK_VAR] = mark
    env.update(extra)
    return env


def marked_processes(mark: str) -> list[psutil.Process]:
    """Live (non-zombie) processes whose environment carries ``mark``."""
    found = []
    for proc in psutil.process_iter(["pid", "status"]):
        if proc.info["status"] == psutil.STATUS_ZOMBIE or proc.pid == os.getpid():
            continue
        try:
            if proc.environ().get(MARK_VAR) == mark:
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie has exited: it only waits to be reaped)."""
    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return False


def command_line(proc: psutil.Process) -> str:
    """The process's command line, or "" once it has exited (a zombie has none)."""
    try:
        return " ".join(proc.cmdline())
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return ""


def wait_no_marked_processes(mark: str, timeout: float = 5.0) -> list[psutil.Process]:
    """Wait for every marked process to be gone; return the survivors (killed)."""
    deadline = time.monotonic() + timeout
    while True:
        left = marked_processes(mark)
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    for proc in left:
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            pass
    return left


STUCK_GREP_FILE = "stuck.bin"
"""A file Grep names explicitly (``path``): ripgrep then reads all of it."""


def stuck_grep_file(root: pathlib.Path) -> dict[str, str]:
    """A Grep that runs for minutes of real ripgrep work (reading a sparse 256 GiB file of
    zeros costs the kernel seconds per 10 GiB) and finds nothing: its arguments."""
    with open(root / STUCK_GREP_FILE, "wb") as f:
        f.truncate(256 * 1024**3)
    return {"pattern": "zzz", "path": STUCK_GREP_FILE}
