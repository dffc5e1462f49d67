"""A listening Unix socket with mode 0600, and the uid of a connected peer.

Trio (0.35) has ``open_unix_socket`` for clients but no Unix listener (python-trio/trio
#279; PR #3187 is still open), so the socket is bound with the standard library and
wrapped in ``trio.SocketListener``. It is bound inside the private 0700 directory and
chmod'ed to 0600 before ``listen``: nobody else can reach it in between, and the
process-wide umask is never touched.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import socket
import stat
import struct

import trio

SOCKET_MODE = 0o600
BACKLOG = 64
MAX_PATH_BYTES = 107  # sun_path is 108 bytes on Linux, NUL included (104 on BSDs)

_UCRED = struct.Struct("3i")  # struct ucred {pid_t pid; uid_t uid; gid_t gid;}


def bind_unix_listener(path: pathlib.Path) -> trio.SocketListener:
    """Bind ``path`` (replacing a leftover socket file there, nothing else) and listen.

    Synchronous: binding a Unix socket neither resolves names nor blocks.
    """
    if len(os.fsencode(path)) > MAX_PATH_BYTES:
        raise OSError(f"socket path {path} is longer than {MAX_PATH_BYTES} bytes")
    with contextlib.suppress(FileNotFoundError):
        if stat.S_ISSOCK(os.lstat(path).st_mode):
            os.unlink(path)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(os.fspath(path))
    except BaseException:
        sock.close()
        raise
    try:
        os.chmod(path, SOCKET_MODE)
        sock.listen(BACKLOG)
    except BaseException:
        sock.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        raise
    return trio.SocketListener(trio.socket.from_stdlib_socket(sock))


def peer_uid(stream: trio.SocketStream) -> int | None:
    """The uid of the process that connected, or None where the OS cannot say."""
    option = getattr(socket, "SO_PEERCRED", None)
    if option is None:  # not Linux: the 0700 directory is the only guard
        return None
    raw = stream.socket.getsockopt(socket.SOL_SOCKET, option, _UCRED.size)
    _pid, uid, _gid = _UCRED.unpack(raw)
    return int(uid)
