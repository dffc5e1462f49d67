"""The pid file a daemon writes next to its ops socket: ``<run dir>/<pid>.json``.

It says how to reach the daemon (its socket) and what it is (pid, start time, data
directory). It is written atomically (a temporary file renamed into place) with mode
0600, after the socket listens, so a pid file never names a socket that is not ready.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
from collections.abc import Iterator

import msgspec

FILE_MODE = 0o600


class PidFile(msgspec.Struct, frozen=True, rename="camel", omit_defaults=True):
    pid: int
    socket: str
    started_at: float  # seconds since the epoch
    data_dir: str | None = None
    version: str = ""


_decoder = msgspec.json.Decoder(PidFile)


def pid_file_path(directory: pathlib.Path, pid: int) -> pathlib.Path:
    return directory / f"{pid}.json"


def socket_path(directory: pathlib.Path, pid: int) -> pathlib.Path:
    return directory / f"{pid}.sock"


def write_pid_file(directory: pathlib.Path, info: PidFile) -> pathlib.Path:
    path = pid_file_path(directory, info.pid)
    tmp = directory / f".{info.pid}.json.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, FILE_MODE)
    try:
        os.write(fd, msgspec.json.encode(info) + b"\n")
    finally:
        os.close(fd)
    os.replace(tmp, path)
    return path


def read_pid_file(path: pathlib.Path) -> PidFile:
    """Raise OSError if unreadable, ``msgspec.DecodeError``/``ValidationError`` if garbled."""
    return _decoder.decode(path.read_bytes())


def pid_files(directory: pathlib.Path) -> Iterator[tuple[int, pathlib.Path]]:
    """``(pid, path)`` of every ``<pid>.json`` in the directory, by pid."""
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return
    found = []
    for name in names:
        stem, dot, ext = name.partition(".")
        if dot and ext == "json" and stem.isdigit():
            found.append((int(stem), directory / name))
    yield from sorted(found)


def remove_daemon_files(directory: pathlib.Path, pid: int) -> None:
    """Remove a daemon's pid file and socket (those named after its pid, nothing else)."""
    for path in (pid_file_path(directory, pid), socket_path(directory, pid)):
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
