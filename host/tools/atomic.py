"""Atomic file replacement for the mutating tools.

The new content goes to a temporary file in the same directory, is fsynced,
gets the mode of the file it replaces, and is renamed over the target; the
directory is fsynced after. A reader sees the old file or the new one, never
a half-written one. Everything happens relative to a directory descriptor
reached without following symlinks (``Workspace.open_parent``).
"""

from __future__ import annotations

import os
import secrets
import stat
from dataclasses import dataclass
from pathlib import Path

from host.workspace import ToolInputError, Workspace
from protocol.errors import ErrorCode

Identity = tuple[int, int, int, int]
"""(device, inode, mtime ns, size): how an edit checks the file did not change under it."""


def identity(st: os.stat_result) -> Identity:
    return (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size)


@dataclass(frozen=True)
class Written:
    bytes_written: int
    created: bool


def atomic_write(ws: Workspace, path: Path, shown: str, data: bytes, *,
                 create_parents: bool, expect: Identity | None = None) -> Written:
    """Replace (or create) ``path`` with ``data``; ``expect`` refuses a file changed meanwhile."""
    dir_fd, name = ws.open_parent(path, shown, create=create_parents)
    try:
        try:
            st: os.stat_result | None = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            st = None
        if st is not None and stat.S_ISDIR(st.st_mode):
            raise ToolInputError(ErrorCode.TOOL_FAILED, f"{shown!r} is a directory")
        if st is not None and not stat.S_ISREG(st.st_mode):
            raise ToolInputError(ErrorCode.TOOL_FAILED, f"{shown!r} is not a regular file")
        if expect is not None and (st is None or identity(st) != expect):
            raise ToolInputError(ErrorCode.TOOL_FAILED,
                                 f"{shown!r} changed while it was being edited; nothing written")
        tmp = f".{name[:200]}.{secrets.token_hex(4)}.tmp"
        mode = 0o600 if st is not None else 0o666  # a new file gets 0o666 less the umask
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     mode, dir_fd=dir_fd)
        try:
            with os.fdopen(fd, "wb", closefd=True) as out:
                out.write(data)
                out.flush()
                if st is not None:
                    os.fchmod(out.fileno(), stat.S_IMODE(st.st_mode))
                os.fsync(out.fileno())
            os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except BaseException:
            try:
                os.unlink(tmp, dir_fd=dir_fd)
            except FileNotFoundError:
                pass
            raise
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
    return Written(bytes_written=len(data), created=st is None)
