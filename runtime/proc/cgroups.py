"""A cgroup v2 per process tree: membership the kernel keeps, a kill nothing escapes.

Where the host can create cgroups beneath its own (as root, or in a delegated subtree),
every child it starts (a Bash or image backend tree, an ``rg``, a plugin server) is
started *inside* a fresh cgroup, a member before it can fork (``host.spawn``: the host
moves it in while it waits at a gate, or it writes itself in before exec). No ``setsid``,
double fork, cleared or forged environment or look-alike command line takes a process out
of it. A tree is stopped by TERM (and CONT) to every member, then ``cgroup.kill`` past the
grace; it is settled when ``cgroup.events`` says ``populated 0`` (waited for through an
epoll on the file's change notification, not by polling), and its directory is then
removed. A root process can still write itself into another cgroup's ``cgroup.procs``:
``runtime.proc.escapes`` finds and kills such a process.

Layout: ``<the host's cgroup>/quiesce-host-<host pid>/<name>``, where a process call's
name is ``call-<hash of host pid, session and call id>`` (``call_cgroup_name``), so the
runtime can kill one call's processes itself when its host does not answer, and
``<the host's cgroup>/quiesce-host-<pid>`` whole after the host died
(``runtime.supervision.cgroup_sweeps``). A cgroup outlives the processes that made it: those
are the sweeps that leave none behind.

``QUIESCE_CGROUPS=off`` forces the fallback (``runtime.proc.proctree``: process trees found by
ancestry, session and marker). Which one a host uses is ``mechanism()``: ``cgroup`` or
``process-tree``.

This module uses the standard library and trio only (no other part of the host), so
the runtime's sweeps can import it, and it can move to a package both share.
"""

from __future__ import annotations

import errno
import functools
import hashlib
import itertools
import logging
import os
import select
import signal
import time
from dataclasses import dataclass
from typing import Literal

import trio

log = logging.getLogger(__name__)

DISABLE_ENV = "QUIESCE_CGROUPS"
HOST_PREFIX = "quiesce-host-"
Mechanism = Literal["cgroup", "process-tree"]
CGROUP: Mechanism = "cgroup"
PROCESS_TREE: Mechanism = "process-tree"


@functools.cache
def _v2_mount() -> tuple[str, str] | None:
    """The cgroup2 mount: (the hierarchy's path it shows, where it is mounted)."""
    try:
        with open("/proc/self/mountinfo") as f:
            mounts = f.read().splitlines()
    except OSError:
        return None
    for mount in mounts:
        left, _, right = mount.partition(" - ")
        if right.split(" ", 1)[0] == "cgroup2":
            fields = left.split()
            return fields[3], fields[4]
    return None


def own_cgroup_dir(pid: int | str = "self") -> str | None:
    """The cgroup v2 directory of a process (``None``: no v2 hierarchy mounted, or the
    process is gone)."""
    mount = _v2_mount()
    if mount is None:
        return None
    try:
        with open(f"/proc/{pid}/cgroup") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    relative = next((line[3:] for line in lines if line.startswith("0::")), None)
    root, point = mount
    if relative is None or not relative.startswith(root):
        return None
    inner = relative[len(root):].strip("/")
    return os.path.join(point, inner) if inner else point


def host_dir(host_pid: int, base: str | None = None) -> str | None:
    """Where a host of this process's cgroup (the runtime's child) keeps its cgroups."""
    base = base if base is not None else own_cgroup_dir()
    return None if base is None else os.path.join(base, f"{HOST_PREFIX}{host_pid}")


def call_cgroup_name(host_pid: int | str, session_id: str, call_id: str) -> str:
    digest = hashlib.sha256(f"{host_pid}\0{session_id}\0{call_id}".encode()).hexdigest()
    return f"call-{digest[:20]}"


def _write(path: str, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def pids_below(path: str) -> list[int]:
    """Pids in a cgroup and the cgroups below it."""
    pids: list[int] = []
    try:
        with open(os.path.join(path, "cgroup.procs")) as f:
            pids += [int(line) for line in f.read().split()]
        with os.scandir(path) as entries:
            subdirs = [e.path for e in entries if e.is_dir(follow_symlinks=False)]
    except OSError:
        return pids
    for sub in subdirs:
        pids += pids_below(sub)
    return pids


def _populated(fd: int) -> bool:
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        data = os.read(fd, 4096)
    except OSError as exc:
        if exc.errno == errno.ENODEV:  # removed since opened: only an empty one can be
            return False
        raise
    for line in data.split(b"\n"):
        if line.startswith(b"populated "):
            return line.split()[1] != b"0"
    return False


async def wait_empty(path: str, within: float) -> bool:
    """Until ``path`` has no live process (``populated 0``), at most ``within``; whether it
    emptied. ``cgroup.events`` signals a change with EPOLLPRI, which trio does not wait
    for: an epoll of our own holds it, and trio waits for that epoll to be readable."""
    try:
        fd = os.open(os.path.join(path, "cgroup.events"), os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return True
    poller = select.epoll()
    try:
        poller.register(fd, select.EPOLLPRI)
        with trio.move_on_after(within):
            while _populated(fd):
                await trio.lowlevel.wait_readable(poller.fileno())
                poller.poll(0)
            return True
        return not _populated(fd)
    finally:
        poller.close()
        os.close(fd)


def remove_tree(path: str) -> bool:
    """rmdir ``path`` and the cgroups below it, deepest first; whether it is gone."""
    try:
        with os.scandir(path) as entries:
            subdirs = [e.path for e in entries if e.is_dir(follow_symlinks=False)]
    except FileNotFoundError:
        return True
    except OSError:
        subdirs = []
    for sub in subdirs:
        remove_tree(sub)
    try:
        os.rmdir(path)
    except FileNotFoundError:
        return True
    except OSError as exc:
        log.warning("cgroup %s not removed: %s", path, exc.strerror)
        return False
    return True


def _term(pid: int, path: str) -> bool:
    """TERM and CONT ``pid`` if it is still in ``path``'s subtree (checked on a pidfd, so a
    reused pid is never signalled); whether it was."""
    try:
        pidfd = os.pidfd_open(pid)
    except OSError:
        return False
    try:
        where = own_cgroup_dir(pid)
        if where is None or not (where == path or where.startswith(path + "/")):
            return False
        signal.pidfd_send_signal(pidfd, signal.SIGTERM)
        signal.pidfd_send_signal(pidfd, signal.SIGCONT)
        return True
    except OSError:
        return False
    finally:
        os.close(pidfd)


@dataclass(frozen=True)
class StopReport:
    found: int
    killed: int
    survivors: tuple[int, ...]
    elapsed: float


class Cgroup:
    """One tree's cgroup (see the module docstring)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.seen: set[int] = set()
        self.termed: set[int] = set()
        """Members already sent TERM: a stop TERMs each once (a trap would run twice)."""

    def open_procs(self) -> int:
        """A descriptor of ``cgroup.procs``, for a forked child to write itself into."""
        return os.open(os.path.join(self.path, "cgroup.procs"), os.O_WRONLY | os.O_CLOEXEC)

    def add(self, pid: int) -> None:
        """Move ``pid`` (a child of ours, not yet running its command) into this cgroup."""
        _write(os.path.join(self.path, "cgroup.procs"), str(pid).encode())

    def members(self) -> list[int]:
        pids = pids_below(self.path)
        self.seen.update(pids)
        return pids

    def kill(self) -> None:
        try:
            _write(os.path.join(self.path, "cgroup.kill"), b"1")
        except FileNotFoundError:
            pass
        except OSError as exc:  # ENODEV: removed (so empty) between the open and the write
            if exc.errno != errno.ENODEV:
                raise

    def term(self) -> None:
        """TERM (and CONT) every member not yet sent one. Called as a stop arrives, before
        any task wakes for it, and again by ``stop`` for members forked since."""
        members = self.members()
        self.termed &= set(members)  # a pid gone and reused since is a new member's
        for pid in members:
            if pid not in self.termed and _term(pid, self.path):
                self.termed.add(pid)

    async def stop(self, grace: float, kill_timeout: float) -> StopReport:
        """TERM every member, ``cgroup.kill`` past ``grace``, until empty (bounded)."""
        started = time.monotonic()
        killed = 0
        self.term()
        empty = await wait_empty(self.path, grace)
        if not empty:
            killed = len(self.members())
            self.kill()
            empty = await wait_empty(self.path, kill_timeout)
        survivors = () if empty else tuple(sorted(self.members()))
        if survivors:
            log.error("cgroup %s: %d survivors after cgroup.kill: %s", self.path,
                      len(survivors), survivors)
        return StopReport(len(self.seen), killed, survivors, time.monotonic() - started)

    def remove(self) -> bool:
        return remove_tree(self.path)


class HostCgroups:
    """The host's ``quiesce-host-<pid>`` directory and the cgroups it makes in it."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._numbers = itertools.count(1)

    @classmethod
    def create(cls) -> HostCgroups | str:
        """This host's cgroups, or why there can be none (the fallback is used)."""
        if os.environ.get(DISABLE_ENV, "").lower() in ("off", "0", "no", "false"):
            return f"{DISABLE_ENV}={os.environ[DISABLE_ENV]}"
        path = host_dir(os.getpid())
        if path is None:
            return "no cgroup v2 hierarchy"
        try:
            os.mkdir(path)
        except FileExistsError:
            pass
        except OSError as exc:
            return f"cannot create {path}: {exc.strerror}"
        if not os.path.exists(os.path.join(path, "cgroup.kill")):
            remove_tree(path)
            return "this kernel has no cgroup.kill (Linux 5.14)"
        try:  # the host must be allowed to move its children in
            probe = cls(path).new("probe")
            fd = probe.open_procs()
            os.close(fd)
            probe.remove()
        except OSError as exc:
            remove_tree(path)
            return f"cannot use cgroups under {path}: {exc.strerror}"
        return cls(path)

    def new(self, name: str | None = None) -> Cgroup:
        """A fresh cgroup (a ``name`` already taken gets a numbered suffix)."""
        base = name or f"proc-{next(self._numbers)}"
        candidate = base
        for n in itertools.count(2):
            try:
                os.mkdir(os.path.join(self.path, candidate))
                return Cgroup(os.path.join(self.path, candidate))
            except FileExistsError:
                candidate = f"{base}-{n}"
        raise AssertionError("unreachable")

    def close(self) -> None:
        """Kill whatever is left below and remove the directory (the host is exiting)."""
        Cgroup(self.path).kill()
        if not remove_tree(self.path):
            log.warning("cgroups of this host left at %s", self.path)


_host: list[HostCgroups | None] = [None]
_why_not: list[str] = ["not set up (not a host)"]


def setup_host() -> HostCgroups | None:
    """In a host process, once: make its cgroup directory, or log why it has none."""
    made = HostCgroups.create()
    if isinstance(made, str):
        _host[0], _why_not[0] = None, made
        log.info("process trees attributed by ancestry, session and marker "
                 "(no cgroups: %s)", made)
        return None
    _host[0] = made
    log.info("process trees attributed by cgroup v2 under %s", made.path)
    return made


def teardown_host() -> None:
    made, _host[0] = _host[0], None
    if made is not None:
        made.close()


def host_cgroups() -> HostCgroups | None:
    return _host[0]


def mechanism() -> Mechanism:
    return CGROUP if _host[0] is not None else PROCESS_TREE
