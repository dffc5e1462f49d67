"""Opening a workspace file without leaving the workspace root's own local file system.

A read can block without bound where the kernel waits on something outside the machine
(NFS, FUSE, SMB), on a special file (a FIFO, a device), or on another process (a write
lease on the file); that is why read-only bodies run on abandonable reader threads
(``host.tools.readers``). A thread hop costs a `Read` most
of its CPU, though (``docs/benchmarks.md``), so a small file reached this way is read on
the event loop instead:

- every file system the root's path passes through is a local disk or memory one
  (``LOCAL_TYPES``: each mount on the root or on an ancestor of it, from
  ``/proc/self/mountinfo``, read again when the kernel says the mount table changed); an
  overlay counts only when each of its layers is on local file systems too (its lower
  layer can be FUSE or NFS, and its reads wait on them);
- the root is opened by its path following no symlink (``RESOLVE_NO_SYMLINKS``: one
  swapped in since for the root or an ancestor could lead anywhere), and is still on the
  device it was on when that was checked (nothing mounted on it since);
- the file is reached with ``openat2`` from the root with ``RESOLVE_BENEATH`` (the walk
  cannot leave the root), ``RESOLVE_NO_XDEV`` (nor cross into another mount, so no
  network or FUSE file system mounted inside the workspace is ever entered) and
  ``RESOLVE_NO_SYMLINKS`` (so the path opened is the path named, lexically), as a path
  only (``O_PATH``: nothing of the file is opened yet);
- it is a regular file, and only then is it opened for reading, through that descriptor
  (``/proc/self/fd``: without ``/proc`` this path is never taken), without waiting for a
  lease another process holds on it.

Anything else (a symlink anywhere in the path, ``..`` above the root, a mount point, a
missing file, another file system, a kernel or seccomp policy without ``openat2``) is
``None``: the caller takes the reader thread and the workspace's own resolution, which
reports the case as before. The kernel's walk is race-free (no window between check and
open), so the descriptor needs no confinement check of its own. What stays on the loop is
work on local file systems: the walk of the root's path, the file's walk and open, and
its read (a disk's latency at worst; the file is small). Not covered: an automount point
inside the workspace may be triggered (and waited for) before ``RESOLVE_NO_XDEV`` refuses
it; an on-access scanner (fanotify permission events) can hold an open or a read; and a
"local" type on a block device that is itself remote (ext4 on iSCSI or nbd, a loop device
backed by a file on NFS) is taken for local.
"""

from __future__ import annotations

import errno
import os
import re
import select
import stat
import time
from typing import Any

LOCAL_TYPES = frozenset({
    "ext2", "ext3", "ext4", "xfs", "btrfs", "f2fs", "jfs", "reiserfs", "bcachefs", "zfs",
    "tmpfs", "ramfs", "overlay",
})
"""File systems whose reads end without a network or a user-space server; an ``overlay``
only when each of its layers is on them too (``_local_path``)."""
MOUNTS_RECHECK = 0.05
"""Seconds a look at the mount table is trusted: a mount over an ancestor of a root is
noticed this late at most (one inside the workspace is never crossed anyway)."""

_SYSCALL_OPENAT2 = {"x86_64": 437, "aarch64": 437}.get(os.uname().machine)
_RESOLVE_NO_XDEV = 0x01
_RESOLVE_NO_SYMLINKS = 0x04
_RESOLVE_BENEATH = 0x08
_AT_FDCWD = -100
_PATH_FLAGS = os.O_PATH | os.O_CLOEXEC  # a path only: nothing of the file is opened yet
_READ = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC
"""``O_NONBLOCK``: a file under another process's write lease (``F_SETLEASE``) would hold
the open until the lease breaks (``lease-break-time``, 45 s by default); this way the
open fails at once (``EWOULDBLOCK``) and the Read takes the thread. It changes nothing
else for a regular file."""
_ROOT, _BENEATH = 0, 1  # the two ways of ``openat2`` used (``LocalOpener._load``)


class LocalOpener:
    """``openat2`` through ctypes (CPython has no wrapper), loaded on first use; turned off
    for good by a kernel or policy that refuses the call itself."""

    def __init__(self, mountinfo: str = "/proc/self/mountinfo") -> None:
        self._mountinfo = mountinfo
        self._syscall: Any = None
        self._hows: Any = None
        self.enabled = _SYSCALL_OPENAT2 is not None
        self._root_devices: dict[str, int | None] = {}  # None: not on local file systems
        self._mounts: select.poll | None = None  # signals a change of the mount table
        self._mounts_fd: int | None = None
        self._mounts_seen = 0.0

    def close(self) -> None:
        """Close the mount table's descriptor (the process-wide opener is never closed)."""
        if self._mounts_fd is not None:
            os.close(self._mounts_fd)
            self._mounts_fd = self._mounts = None

    def open_small(self, root: str, os_rel: str, max_size: int) -> int | None:
        """An open descriptor of ``os_rel`` (``os`` spelling, relative to ``root``) if it
        is a regular file of at most ``max_size`` bytes reached as the module says; else
        ``None``. The caller owns the descriptor."""
        if not self.enabled or not os_rel or os_rel.startswith("/") or "\x00" in os_rel:
            return None
        device = self._root_device(root)
        if device is None:
            return None
        # The root by its own path, following no symlink (one swapped in for it or for an
        # ancestor since would lead anywhere), and still the file system checked (nothing
        # mounted on it since the mount table was read).
        root_fd = self._open(_AT_FDCWD, os.fsencode(root), _ROOT)
        if root_fd is None:
            return None
        try:
            if os.fstat(root_fd).st_dev != device:
                return None
            path_fd = self._open(root_fd, os.fsencode(os_rel), _BENEATH)
        finally:
            os.close(root_fd)
        if path_fd is None:
            return None
        try:
            st = os.fstat(path_fd)
            if not stat.S_ISREG(st.st_mode) or st.st_size > max_size:
                return None
            # Only a regular file is opened for reading (no device's driver runs here), and
            # through the descriptor just checked, so it is that file.
            return os.open(f"/proc/self/fd/{path_fd}", _READ)
        except OSError:
            return None
        finally:
            os.close(path_fd)

    def _open(self, dir_fd: int, path: bytes, how: int) -> int | None:
        if self._syscall is None:
            self._load()
            if self._syscall is None:
                return None
        fd: int = self._syscall(dir_fd, path, how)
        if fd >= 0:
            return fd
        if -fd == errno.ENOSYS or (-fd == errno.EPERM and how == _ROOT):
            # No openat2 here (an old kernel), or a seccomp policy refusing it (a plain
            # directory's path open is refused nothing else).
            self.enabled = False
        return None

    def _load(self) -> None:
        import ctypes

        class OpenHow(ctypes.Structure):
            _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64),
                        ("resolve", ctypes.c_uint64)]

        try:
            syscall = ctypes.CDLL(None, use_errno=True).syscall
        except (OSError, AttributeError):  # no C library to call through
            self.enabled = False
            return
        syscall.restype = ctypes.c_long
        syscall.argtypes = [ctypes.c_long, ctypes.c_int, ctypes.c_char_p,
                            ctypes.POINTER(OpenHow), ctypes.c_size_t]
        hows = [OpenHow(_PATH_FLAGS | os.O_DIRECTORY, 0, _RESOLVE_NO_SYMLINKS),
                OpenHow(_PATH_FLAGS, 0,
                        _RESOLVE_BENEATH | _RESOLVE_NO_XDEV | _RESOLVE_NO_SYMLINKS)]
        refs = [ctypes.byref(how) for how in hows]
        size, number, get_errno = ctypes.sizeof(OpenHow), _SYSCALL_OPENAT2, ctypes.get_errno

        def openat2(dir_fd: int, path: bytes, how: int) -> int:
            """The descriptor, or minus the errno."""
            fd = int(syscall(number, dir_fd, path, refs[how], size))
            return fd if fd >= 0 else -get_errno()

        self._syscall = openat2
        self._hows = hows  # kept alive: the references above point into them

    def _root_device(self, root: str) -> int | None:
        """The device of ``root``, if every file system the walk to it passes through is
        local (each mount on ``root`` or on one of its ancestors); else ``None``."""
        if self._mounts_changed():
            self._root_devices.clear()
        if root in self._root_devices:
            return self._root_devices[root]
        if not self._root_is_local(root):
            self._root_devices[root] = None
            return None
        fd = self._open(_AT_FDCWD, os.fsencode(root), _ROOT)
        if fd is None:
            return None  # not remembered: it may be there next time
        try:
            device = self._root_devices[root] = os.fstat(fd).st_dev
        finally:
            os.close(fd)
        return device

    def _root_is_local(self, root: str) -> bool:
        """Whether every mount on ``root`` or on one of its ancestors is of a local type, by
        the mount table (so opening the root by its path never waits on a network or FUSE
        server either); an overlay only if each of its layers is (``_local_path``)."""
        return _local_path(root, self._mount_table(), OVERLAY_DEPTH)

    def _mounts_changed(self) -> bool:
        """Whether the mount table changed since the last look (True the first time): the
        kernel flags a change as ``POLLPRI`` on an open ``mountinfo``. Looked at once per
        ``MOUNTS_RECHECK`` at most (a system call per Read was a tenth of its cost)."""
        if self._mounts is not None:
            now = time.monotonic()
            if now - self._mounts_seen < MOUNTS_RECHECK:
                return False
            self._mounts_seen = now
            return bool(self._mounts.poll(0))
        try:
            self._mounts_fd = os.open(self._mountinfo, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return True
        self._mounts = select.poll()
        self._mounts.register(self._mounts_fd, select.POLLPRI)
        return True

    def _mount_table(self) -> list[Mount]:
        """(mount point, file system type, its layers) of every mount (``[]`` if it cannot
        be read); the layers are an overlay's (``_layers``), else ``()``."""
        table = []
        try:
            with open(self._mountinfo, "rb") as f:
                for line in f:
                    # id parent major:minor root mountpoint options [optional...] - type
                    # source super-options
                    fields = line.split()
                    if len(fields) > 6 and b"-" in fields[6:]:
                        point = os.fsdecode(_OCTAL.sub(_unescape, fields[4]))
                        at = fields.index(b"-", 6)
                        fstype = os.fsdecode(fields[at + 1])
                        layers = (_layers(fields[at + 3]) if fstype == "overlay"
                                  and len(fields) > at + 3 else ())
                        table.append((point, fstype, layers))
        except OSError:
            return []
        return table


Mount = tuple[str, str, tuple[str, ...]]
"""A mount's point, file system type and (an overlay's) layers."""
OVERLAY_DEPTH = 4
"""Overlays above overlays followed this deep at most; deeper counts as not local."""


def _local_path(path: str, table: list[Mount], depth: int) -> bool:
    """Whether every mount on ``path`` or an ancestor is local: of a ``LOCAL_TYPES`` type
    and, for an overlay, with every layer (lower, upper, work) a local path itself. The
    layers are the paths its mount named; one not absolute, or an overlay beyond ``depth``,
    is not local (an overlay mounted in another mount namespace names paths of that one:
    not local either, unless they happen to be local here)."""
    mounts = [(fstype, layers) for point, fstype, layers in table
              if point == "/" or path == point or path.startswith(point + "/")]
    if not mounts:
        return False
    for fstype, layers in mounts:
        if fstype not in LOCAL_TYPES:
            return False
        if fstype == "overlay" and (depth <= 0 or not layers or not all(
                layer.startswith("/") and _local_path(layer.rstrip("/") or "/", table,
                                                      depth - 1) for layer in layers)):
            return False
    return True


_LAYER_KEYS = (b"lowerdir=", b"upperdir=", b"workdir=", b"lowerdir+=", b"datadir+=")


def _layers(options: bytes) -> tuple[str, ...]:
    """The layer directories an overlay's super options name (``lowerdir=a:b::c``: colons
    between layers, a doubled one before data-only layers; a colon, comma or space in a
    path is written ``\\ooo``)."""
    layers: list[str] = []
    for option in options.split(b","):
        for key in _LAYER_KEYS:
            if option.startswith(key):
                value = option[len(key):]
                parts = value.split(b":") if key == b"lowerdir=" else [value]
                layers += [os.fsdecode(_OCTAL.sub(_unescape, part)) for part in parts if part]
    return tuple(layers)


_OCTAL = re.compile(rb"\\([0-7]{3})")


def _unescape(match: re.Match[bytes]) -> bytes:
    """mountinfo writes a space, tab, newline or backslash of a path as ``\\ooo``."""
    return bytes([int(match.group(1), 8)])


LOCAL_OPENER = LocalOpener()
