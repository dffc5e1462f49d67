"""A session's private network namespace (as root): only a loopback interface, so with
the network ``off`` nothing leaves the machine (TCP, UDP, anything), while a test suite's
local server still works on 127.0.0.1, and abstract UNIX sockets are the namespace's own.

It is made once per session on the spawner thread: the thread ``unshare``s a new network
namespace, keeps a descriptor of it, brings its loopback up and ``setns``es back. A
confined child joins it with ``setns`` between fork and exec (before its capabilities
are dropped): about as cheap as no namespace, where a namespace per spawn costs a
millisecond or more. Without root (or where the kernel refuses) there is none, and
Landlock's TCP rules (ABI 4) are the network boundary instead.
"""

from __future__ import annotations

import ctypes
import fcntl
import functools
import logging
import os
import socket
import struct

log = logging.getLogger(__name__)

CLONE_NEWNET = 0x40000000
SIOCGIFFLAGS = 0x8913
SIOCSIFFLAGS = 0x8914
IFF_UP = 0x1
NETNS_ENV = "QUIESCE_SANDBOX_NETNS"
"""``off``: never make a network namespace (Landlock's TCP rules only)."""


@functools.cache
def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _loopback_up() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("16sH", b"lo", 0) + bytes(22)
        flags = struct.unpack("16sH", fcntl.ioctl(sock, SIOCGIFFLAGS, request)[:18])[1]
        fcntl.ioctl(sock, SIOCSIFFLAGS, struct.pack("16sH", b"lo", flags | IFF_UP) + bytes(22))


def make() -> int | None:
    """A new network namespace's descriptor (loopback up), made on the calling thread,
    which stays in its own namespace; ``None`` where none can be made."""
    if os.geteuid() != 0 or os.environ.get(NETNS_ENV) == "off":
        return None
    libc = _libc()
    own = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    made: int | None = None
    try:
        if libc.unshare(CLONE_NEWNET) != 0:
            log.warning("no private network namespace: unshare: %s",
                        os.strerror(ctypes.get_errno()))
            return None
        try:
            made = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
            _loopback_up()
        finally:
            if libc.setns(own, CLONE_NEWNET) != 0:  # never expected as root
                raise OSError(ctypes.get_errno(), "setns back to the host's network")
    except OSError:
        if made is not None:
            os.close(made)
        raise
    finally:
        os.close(own)
    return made


@functools.cache
def available() -> bool:
    """Whether this host can make one (tried once, and thrown away)."""
    try:
        fd = make()
    except OSError as exc:
        log.warning("no private network namespace: %s", exc)
        return False
    if fd is None:
        return False
    os.close(fd)
    return True


def join(fd: int) -> int:
    """``setns`` into the namespace ``fd`` (in a forked child): 0, or the errno."""
    if _libc().setns(fd, CLONE_NEWNET) != 0:
        return ctypes.get_errno() or 1
    return 0


def listen_inside(fd: int, backlog: int = 64) -> socket.socket:
    """A TCP listener on 127.0.0.1 (a free port) inside the namespace ``fd``: the calling
    thread enters it, makes and binds the socket, and goes back. A socket keeps the
    namespace it was made in, so the host accepts on it from its own (the session's
    processes reach it on their loopback; nothing outside the namespace can)."""
    libc = _libc()
    own = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    try:
        if libc.setns(fd, CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), "setns into the session's network")
        try:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                sock.bind(("127.0.0.1", 0))
                sock.listen(backlog)
            except BaseException:
                sock.close()
                raise
        finally:
            if libc.setns(own, CLONE_NEWNET) != 0:  # never expected as root
                raise OSError(ctypes.get_errno(), "setns back to the host's network")
    finally:
        os.close(own)
    return sock


def unavailable_reason() -> str | None:
    """Why this host cannot make a network namespace per session, or ``None`` if it can."""
    if os.geteuid() != 0:
        return "the daemon does not run as root"
    if os.environ.get(NETNS_ENV) == "off":
        return f"{NETNS_ENV}=off"
    if not available():
        return "the kernel refused to make one (see the log)"
    return None
