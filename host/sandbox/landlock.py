"""Landlock through its three system calls (``ctypes``; no dependency): the ABI the kernel
offers, and a ruleset built from path and port rules, ready for ``restrict_self``.

The numbers are the same on x86_64 and aarch64 (the generic system-call table): 444
``landlock_create_ruleset``, 445 ``landlock_add_rule``, 446 ``landlock_restrict_self``.

``abi()`` is the kernel's ABI version (0: no Landlock), capped by ``QUIESCE_LANDLOCK_ABI``
when that variable holds a number: the test seam that masks kernel features, so every row
of the table in docs/sandbox.md is exercised on one kernel. A capped ABI is also what
rulesets are built for (a feature of a later ABI is then neither asked for nor claimed).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
import platform
from dataclasses import dataclass

from runtime.proc.libc import libc

SYS_CREATE_RULESET = 444
SYS_ADD_RULE = 445
SYS_RESTRICT_SELF = 446
CREATE_RULESET_VERSION = 1 << 0
RULE_PATH_BENEATH = 1
RULE_NET_PORT = 2

# File-system access rights (bit, first ABI).
EXECUTE = 1 << 0
WRITE_FILE = 1 << 1
READ_FILE = 1 << 2
READ_DIR = 1 << 3
REMOVE_DIR = 1 << 4
REMOVE_FILE = 1 << 5
MAKE_CHAR = 1 << 6
MAKE_DIR = 1 << 7
MAKE_REG = 1 << 8
MAKE_SOCK = 1 << 9
MAKE_FIFO = 1 << 10
MAKE_BLOCK = 1 << 11
MAKE_SYM = 1 << 12
REFER = 1 << 13  # ABI 2
TRUNCATE = 1 << 14  # ABI 3

FS_BY_ABI = {1: (1 << 13) - 1, 2: (1 << 14) - 1, 3: (1 << 15) - 1}
"""The file-system rights each ABI handles (``IOCTL_DEV``, ABI 5, is left unhandled:
ioctls on terminals and devices stay as they are; files are what is confined)."""
FILE_RIGHTS = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE
"""The rights a rule on a file (not a directory) may carry."""
READ = EXECUTE | READ_FILE | READ_DIR
WRITE = (WRITE_FILE | REMOVE_DIR | REMOVE_FILE | MAKE_DIR | MAKE_REG | MAKE_SOCK
         | MAKE_FIFO | MAKE_SYM | REFER | TRUNCATE)
"""Everything a writable root allows beyond reading: never device nodes (``MAKE_CHAR``,
``MAKE_BLOCK``)."""

NET_BIND_TCP = 1 << 0  # ABI 4
NET_CONNECT_TCP = 1 << 1
SCOPE_ABSTRACT_UNIX_SOCKET = 1 << 0  # ABI 6
SCOPE_SIGNAL = 1 << 1

ABI_ENV = "QUIESCE_LANDLOCK_ABI"


class LandlockError(OSError):
    """A Landlock system call failed (its ``errno`` set)."""


def _syscall(number: int, *args: object) -> int:
    result: int = libc().syscall(ctypes.c_long(number), *args)
    return result


def kernel_abi() -> tuple[int, str]:
    """The kernel's Landlock ABI (0 when it has none) and why none, if so."""
    if platform.system() != "Linux":
        return 0, "not Linux"
    if platform.machine() not in ("x86_64", "aarch64"):
        return 0, f"Landlock system call numbers unknown on {platform.machine()}"
    version = _syscall(SYS_CREATE_RULESET, ctypes.c_void_p(None), ctypes.c_size_t(0),
                       ctypes.c_uint32(CREATE_RULESET_VERSION))
    if version < 0:
        err = ctypes.get_errno()
        return 0, f"landlock_create_ruleset: {os.strerror(err)} (kernel without Landlock, " \
                  "or Landlock not enabled at boot)"
    return version, ""


@functools.cache
def abi() -> tuple[int, str]:
    """The ABI quiesce uses (``kernel_abi`` capped by ``QUIESCE_LANDLOCK_ABI``), and the
    reason when it is 0."""
    version, why = kernel_abi()
    cap = os.environ.get(ABI_ENV, "").strip()
    if cap.isdigit() and int(cap) < version:
        version = int(cap)
        why = f"masked by {ABI_ENV}={cap}" if version == 0 else ""
    return version, why


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64),
                ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


class _NetPort(ctypes.Structure):
    _fields_ = [("allowed_access", ctypes.c_uint64), ("port", ctypes.c_uint64)]


@dataclass(frozen=True)
class Handled:
    """What a ruleset handles (denies unless a rule allows it), for one ABI."""

    fs: int
    net: int
    scoped: int


def handled_for(version: int, *, network: bool, scoped: bool = True) -> Handled:
    """Everything ``version`` can handle: every file-system right, TCP bind and connect
    unless ``network`` (ABI 4), signals and abstract sockets when ``scoped`` (ABI 6)."""
    fs = FS_BY_ABI[min(version, 3)]
    net = NET_BIND_TCP | NET_CONNECT_TCP if version >= 4 and not network else 0
    scope = SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL if version >= 6 and scoped else 0
    return Handled(fs, net, scope)


def create_ruleset(handled: Handled) -> int:
    """A new ruleset's descriptor (close-on-exec), or ``LandlockError``."""
    attr = _RulesetAttr(handled.fs, handled.net, handled.scoped)
    size = ctypes.sizeof(_RulesetAttr) if handled.scoped else 16  # ABI < 6: two fields
    fd = _syscall(SYS_CREATE_RULESET, ctypes.c_void_p(ctypes.addressof(attr)),
                  ctypes.c_size_t(size), ctypes.c_uint32(0))
    if fd < 0:
        err = ctypes.get_errno()
        raise LandlockError(err, f"landlock_create_ruleset: {os.strerror(err)}")
    return fd


def add_path(ruleset: int, path: str, access: int) -> bool:
    """Allow ``access`` beneath ``path`` (only the file rights if it is not a directory);
    false if ``path`` does not exist. The path is opened here, ``O_PATH``."""
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        if not os.path.isdir(f"/proc/self/fd/{fd}"):
            access &= FILE_RIGHTS
        rule = _PathBeneath(access, fd)
        if _syscall(SYS_ADD_RULE, ctypes.c_int(ruleset), ctypes.c_int(RULE_PATH_BENEATH),
                    ctypes.c_void_p(ctypes.addressof(rule)), ctypes.c_uint32(0)) < 0:
            err = ctypes.get_errno()
            raise LandlockError(err, f"landlock_add_rule({path!r}): {os.strerror(err)}")
    finally:
        os.close(fd)
    return True


def restrict_self(ruleset: int) -> int:
    """``landlock_restrict_self``: 0, or the errno. Called in a forked child before exec
    (``host.sandbox.confine``): nothing but the system call, no allocation."""
    if _syscall(SYS_RESTRICT_SELF, ctypes.c_int(ruleset), ctypes.c_uint32(0)) < 0:
        return ctypes.get_errno() or 1
    return 0
