"""Per-call resource limits: how many processes, and how much memory, one tool call's
process tree may have.

Configured as ``[host.limits]`` in the daemon's configuration file (``CallLimits``; 0 is
no limit). Enforced the strongest way this host has, decided once at start (``setup``)
and reported by ``host.stats`` and ``quiesce ops stats`` (``Enforcement``):

- ``cgroup``: where the host's cgroup directory has the ``pids`` and ``memory``
  controllers (cgroup v2, delegated to it: root on a pure v2 system, or a systemd user
  slice with ``Delegate=``), each call's cgroup gets ``pids.max`` and ``memory.max``
  (with ``memory.swap.max`` 0) before its first process starts. The whole tree counts;
  a fork past it fails (``EAGAIN``), a tree past its memory is OOM-killed. The kernel
  counts each hit (``pids.events``, ``memory.events``): the call's result names it
  (``hit``).
- ``rlimit``: else, every process of a process-class call (Bash, GenerateImages, a hook)
  is started under ``prlimit``: ``RLIMIT_DATA`` (memory: its private writable mappings,
  heap and anonymous memory, per process, not per tree; not ``RLIMIT_AS``, which counts
  address space merely reserved, as V8, the JVM and sanitizers do) and ``RLIMIT_NPROC``
  (processes: counted per *user* across the machine, not per call; root is exempt, so as
  root it is not enforced). An allocation past it
  fails inside the process; the host cannot tell that from another failure, so a failed
  call's result names the limits it ran under.
- ``none``: a limit of 0, or no way to enforce it.

A stop is the same whatever the limits: the tree is killed as before.
"""

from __future__ import annotations

import functools
import logging
import os
import shutil
from dataclasses import dataclass
from typing import Literal

from protocol.hostconfig import CallLimits as CallLimits  # the settings, parsed with the host's

log = logging.getLogger(__name__)

Mechanism = Literal["cgroup", "rlimit", "none"]
MIB = 1 << 20


@dataclass(frozen=True)
class Enforcement:
    """How each limit is enforced on this host."""

    processes: Mechanism
    memory: Mechanism
    max_processes: int
    max_memory_mb: int

    def describe(self) -> dict[str, str]:
        """For ``host.stats``: each limit and how it is enforced, in words."""
        return {"processes": _words(self.processes, f"{self.max_processes} processes",
                                    "per call (pids.max)", "per user (RLIMIT_NPROC)"),
                "memory": _words(self.memory, f"{self.max_memory_mb} MiB",
                                 "per call (memory.max)",
                                 "per process (RLIMIT_DATA)")}


def _words(how: Mechanism, amount: str, cgroup: str, rlimit: str) -> str:
    if how == "cgroup":
        return f"{amount} {cgroup}"
    if how == "rlimit":
        return f"{amount} {rlimit}"
    return "not enforced"


_WANTED = ("pids", "memory")
_active: list[Enforcement] = [Enforcement("none", "none", 0, 0)]


def setup(limits: CallLimits, host_dir: str | None) -> Enforcement:
    """Decide, once, how ``limits`` are enforced: the controllers of ``host_dir`` (the
    host's cgroup directory, ``None`` without cgroups) enabled for its calls' cgroups
    where it has them, else ``prlimit``. Logs what is not enforced."""
    controllers = _enable_controllers(host_dir) if host_dir is not None else set()
    prlimit = _prlimit() is not None
    processes: Mechanism = "none"
    memory: Mechanism = "none"
    if limits.max_processes:
        if "pids" in controllers:
            processes = "cgroup"
        elif prlimit and os.geteuid() != 0:  # root is exempt from RLIMIT_NPROC
            processes = "rlimit"
    if limits.max_memory_mb:
        memory = "cgroup" if "memory" in controllers else "rlimit" if prlimit else "none"
    enforced = _active[0] = Enforcement(processes, memory, limits.max_processes,
                                        limits.max_memory_mb)
    where = host_dir or "this host (it has no cgroups)"
    if limits.max_processes and processes == "none":
        log.warning("the per-call process limit is not enforced: no pids controller "
                    "delegated to %s, and root is exempt from RLIMIT_NPROC", where)
    if limits.max_memory_mb and memory == "none":
        log.warning("the per-call memory limit is not enforced: no memory controller "
                    "delegated to %s, and no prlimit", where)
    log.info("per-call limits: %s", enforced.describe())
    return enforced


def enforcement() -> Enforcement:
    return _active[0]


def _enable_controllers(host_dir: str) -> set[str]:
    """The controllers of ``_WANTED`` the host's directory has, enabled for the cgroups
    below it (its ``cgroup.subtree_control``: allowed, it holds no process itself)."""
    try:
        with open(os.path.join(host_dir, "cgroup.controllers")) as f:
            available = set(f.read().split()) & set(_WANTED)
    except OSError:
        return set()
    enabled: set[str] = set()
    for name in sorted(available):
        try:
            with open(os.path.join(host_dir, "cgroup.subtree_control"), "w") as f:
                f.write(f"+{name}")
            enabled.add(name)
        except OSError as exc:
            log.warning("cannot enable the %s controller under %s: %s", name, host_dir,
                        exc.strerror)
    return enabled


def apply_to_cgroup(path: str) -> None:
    """Write the cgroup limits into a call's new cgroup ``path`` (before any process)."""
    active = _active[0]
    values = []
    if active.processes == "cgroup":
        values.append(("pids.max", str(active.max_processes)))
    if active.memory == "cgroup":
        values += [("memory.max", str(active.max_memory_mb * MIB)),
                   ("memory.swap.max", "0")]
    for name, value in values:
        try:
            with open(os.path.join(path, name), "w") as f:
                f.write(value)
        except FileNotFoundError:  # memory.swap.max: no swap accounting
            continue


def wrap(argv: list[str], cwd: str | os.PathLike[str]) -> list[str]:
    """``argv`` under ``prlimit`` with the rlimit-enforced limits (as it is otherwise, and
    when its command is not found: starting it then fails as it would without limits,
    not as ``prlimit``'s exit status)."""
    active = _active[0]
    name = argv[0] if argv else ""
    found = (os.access(os.path.join(cwd, name), os.X_OK) if "/" in name
             else shutil.which(name) is not None)
    if not found:
        return argv
    options = []
    if active.memory == "rlimit":
        options.append(f"--data={active.max_memory_mb * MIB}")
    if active.processes == "rlimit":
        options.append(f"--nproc={active.max_processes}")
    prlimit = _prlimit() if options else None
    return [prlimit, *options, "--", *argv] if prlimit else argv


@functools.cache
def _prlimit() -> str | None:
    """util-linux's ``prlimit``, looked for once."""
    return shutil.which("prlimit")


def hit(cgroup_path: str | None) -> str | None:
    """Which cgroup limit a call's tree ran into (the kernel's counts), in words for its
    result; ``None`` if none (or none is enforced by its cgroup)."""
    active = _active[0]
    if cgroup_path is None:
        return None
    if active.memory == "cgroup" and _count(cgroup_path, "memory.events", "oom_kill"):
        return (f"its memory limit ({active.max_memory_mb} MiB per call, memory.max): a "
                "process was killed for it")
    if active.processes == "cgroup" and _count(cgroup_path, "pids.events", "max"):
        return (f"its process limit ({active.max_processes} per call, pids.max): a fork "
                "failed")
    return None


def ran_under() -> str | None:
    """The rlimit-enforced limits in words (for a failed call's result), or ``None``."""
    active = _active[0]
    parts = []
    if active.memory == "rlimit":
        parts.append(f"memory {active.max_memory_mb} MiB per process (RLIMIT_DATA)")
    if active.processes == "rlimit":
        parts.append(f"{active.max_processes} processes per user (RLIMIT_NPROC)")
    return ", ".join(parts) or None


def _count(path: str, events: str, key: str) -> int:
    try:
        with open(os.path.join(path, events)) as f:
            for line in f:
                name, _, value = line.partition(" ")
                if name == key:
                    return int(value)
    except (OSError, ValueError):
        return 0
    return 0
