"""Who connected to a daemon's local (UNIX) control socket, as the kernel says.

A process a quiesce daemon started for a session (a tool, a hook, a plugin server, and
everything they start) runs as the daemon's user, so a 0600 socket and a uid check let
it in; and Landlock confines pathname UNIX sockets only from ABI 9. Such a process is
refused on the daemon's control sockets (the ops socket, the ``unix:`` client link):
through them it could abort, force or restart what it must not signal (DESIGN 19), or
answer its own session's permission prompts.

What decides is the connecting process's ancestry, which it cannot change: the host
and the runtime are child subreapers, so a tool's orphans are re-parented to them and
stay their descendants. The peer is named by ``SO_PEERPIDFD`` (Linux 6.5) where the
kernel has it, so a peer that exited and whose pid was reused is not mistaken for
another process; a peer that is gone, or whose ancestry cannot be read, is refused.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import struct
import sys
from collections.abc import Collection
from typing import Protocol

SO_PEERPIDFD = 77
"""``getsockopt(SOL_SOCKET, SO_PEERPIDFD)``: a pidfd of the peer (Linux 6.5)."""
_UCRED = struct.Struct("3i")  # struct ucred {pid_t pid; uid_t uid; gid_t gid;}
_INT = struct.Struct("i")
MAX_DEPTH = 4096


class _Socket(Protocol):
    def getsockopt(self, level: int, option: int, buflen: int, /) -> bytes: ...


def _ppid(pid: int) -> int:
    """The parent of ``pid`` (from ``/proc/PID/stat``); ``OSError`` if it is gone."""
    with open(f"/proc/{pid}/stat", "rb") as file:
        stat = file.read()
    return int(stat[stat.rindex(b")") + 2:].split()[1])


def descends_from(pid: int, ancestors: Collection[int]) -> bool:
    """Whether one of ``ancestors`` is an ancestor of ``pid`` (not ``pid`` itself)."""
    for _ in range(MAX_DEPTH):
        if pid <= 1:
            return False
        pid = _ppid(pid)
        if pid in ancestors:
            return True
    return True  # a loop or an absurd depth: refused


def refusal(sock: _Socket, daemons: Collection[int]) -> str | None:
    """Why the peer of ``sock`` (a connected ``AF_UNIX`` socket) is refused: it
    descends from one of ``daemons`` (pids), it is gone, or it cannot be told; ``None``
    when it may connect (or the platform cannot say: not Linux)."""
    option = getattr(socket, "SO_PEERCRED", None)
    if option is None or not os.path.isdir("/proc/self"):
        return None
    pidfd: int | None = None
    with contextlib.suppress(OSError):
        pidfd = _INT.unpack(sock.getsockopt(socket.SOL_SOCKET, SO_PEERPIDFD, _INT.size))[0]
    try:
        pid = _UCRED.unpack(sock.getsockopt(socket.SOL_SOCKET, option, _UCRED.size))[0]
        if pid <= 0:
            return "the peer's process is not known"
        try:
            if descends_from(pid, daemons):
                return (f"process {pid} was started by a quiesce daemon (a tool, hook or "
                        "plugin of a session)")
        except (OSError, ValueError, IndexError) as exc:
            return f"the ancestry of process {pid} cannot be read ({exc})"
        if pidfd is not None:  # still the process whose ancestry was read?
            try:
                signal.pidfd_send_signal(pidfd, 0)
            except ProcessLookupError:
                return f"process {pid} is gone"
            except PermissionError:
                pass  # alive (another user's: refused by the uid check anyway)
        return None
    finally:
        if pidfd is not None and pidfd >= 0:
            os.close(pidfd)


def _proc_net_address(host: str, port: int) -> str:
    """``host:port`` as ``/proc/net/tcp{,6}`` writes it (each 32-bit word in host order)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    packed = socket.inet_pton(family, host)
    words = "".join(f"{int.from_bytes(packed[i:i + 4], sys.byteorder):08X}"
                    for i in range(0, len(packed), 4))
    return f"{words}:{port:04X}"


def tcp_peer_pids(peer: tuple[str, int], ours: tuple[str, int]) -> set[int] | None:
    """The processes holding the local end ``peer`` of a loopback TCP connection to
    ``ours`` (this netns's ``/proc/net/tcp``, then every readable ``/proc/PID/fd``);
    ``None`` if the socket is not found."""
    family = "tcp6" if ":" in peer[0] else "tcp"
    local, remote = _proc_net_address(*peer), _proc_net_address(*ours)
    inode = None
    with open(f"/proc/net/{family}") as table:
        for line in table:
            fields = line.split()
            if len(fields) > 9 and fields[1] == local and fields[2] == remote:
                inode = fields[9]
                break
    if inode is None or inode == "0":
        return None
    target = f"socket:[{inode}]"
    holders: set[int] = set()
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        with contextlib.suppress(OSError):
            for fd in os.listdir(f"/proc/{name}/fd"):
                with contextlib.suppress(OSError):
                    if os.readlink(f"/proc/{name}/fd/{fd}") == target:
                        holders.add(int(name))
                        break
    return holders


def tcp_refusal(peer: tuple[str, int], ours: tuple[str, int],
                daemons: Collection[int]) -> str | None:
    """Why a loopback TCP peer is refused: a process holding its socket descends from one
    of ``daemons`` (blocking: a thread)."""
    try:
        holders = tcp_peer_pids(peer, ours)
    except OSError:
        return None  # no /proc/net: nothing to tell (the token still guards)
    for pid in holders or ():
        try:
            if descends_from(pid, daemons):
                return (f"process {pid} was started by a quiesce daemon (a tool, hook or "
                        "plugin of a session)")
        except (OSError, ValueError, IndexError):
            continue  # gone since
    return None
