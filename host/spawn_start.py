"""How a child is started, on the spawner thread (``host.spawn``): through the gate, or
forked.

- The gate (``start_gated``), for a child whose stdin is /dev/null (every tool process): no
  fork of the host. ``subprocess`` vforks (no ``preexec_fn``) and execs ``setpriv
  --pdeathsig KILL`` and then a shell that waits for one line on a pipe; meanwhile the
  host moves the child into its cgroup and sets its niceness, then writes the line. The
  command starts already a member, before it can fork; at EOF (the host died) it never
  runs.
- The fork (``start_forked``), for a child with a stdin of its own (a hook, a plugin server),
  or where ``setpriv`` or bash is missing: a ``preexec_fn`` arms the parent-death
  signal and writes the child into its cgroup before exec (``_die_with_parent``).

Both register the child as ours under the spawn lock (``runtime.proc.orphans``), so it
is never taken for an orphan.
"""

from __future__ import annotations

import errno
import functools
import logging
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable
from typing import Any

from host.sandbox.confine import Confinement, child_step
from host.sandbox.confine import in_child as confine_child
from runtime.proc import cgroups, libc
from runtime.proc.orphans import PR_SET_PDEATHSIG, spawn_lock, started_pids

log = logging.getLogger(__name__)


def _die_with_parent(procs_fd: int | None = None, niceness: int = 0,
                     confinement: Confinement | None = None) -> Callable[[], None] | None:
    """The ``preexec_fn`` that arms the parent-death signal (KILL) and, with ``procs_fd``
    (a cgroup's ``cgroup.procs``), moves the child into that cgroup; ``None`` off Linux.

    It runs in the forked child before exec: only a resolved libc call, ``getppid`` and a
    ``write``. A parent that died before the signal was armed is caught by the ``getppid``
    check; a child that cannot join its cgroup fails to start (``SubprocessError``).
    With a ``confinement`` (``host.sandbox``) the child is then confined, last: a child
    that cannot be fails to start too.
    """
    if not sys.platform.startswith("linux"):
        return None
    prctl, parent, sig = libc.prctl(), os.getpid(), int(signal.SIGKILL)
    confine = child_step(confinement) if confinement is not None else None

    def in_child() -> None:
        prctl(PR_SET_PDEATHSIG, sig, 0, 0, 0)
        if os.getppid() != parent:
            os._exit(1)
        if procs_fd is not None:
            os.write(procs_fd, b"0")  # "0": the writing process itself
        if niceness:
            os.nice(niceness)
        if confine is not None:
            confine_child(*confine)

    return in_child


def start_forked(argv: list[str], cgroup: cgroups.Cgroup | None, niceness: int,
                 options: dict[str, Any], confinement: Confinement | None = None
                 ) -> subprocess.Popen[bytes]:
    """Fork (the host's whole address space, holding the interpreter lock) and run
    ``_die_with_parent`` in the child: for a child with a stdin of its own (a plugin), or
    one confined by the sandbox (``confinement``)."""
    procs_fd = cgroup.open_procs() if cgroup is not None else None
    try:
        preexec = _die_with_parent(procs_fd, niceness, confinement)
        with spawn_lock:
            popen = subprocess.Popen(argv, start_new_session=True, close_fds=True,
                                     preexec_fn=preexec, **options)
            started_pids.add(popen.pid)
        if niceness:
            _lower_autogroup(popen.pid, niceness)
        return popen
    finally:
        if procs_fd is not None:
            os.close(procs_fd)


def _lower_autogroup(pid: int, niceness: int) -> None:
    """Give the child's autogroup ``niceness`` too. The child is a session leader
    (``start_new_session``), and where the kernel groups tasks by session
    (``sched_autogroup_enabled``) a new session is a new scheduling group with nice 0:
    a task's own niceness then weighs only against its own session's tasks, so 25
    searches would still take 25 shares of the CPU against the host's one."""
    try:
        with open(f"/proc/{pid}/autogroup", "w") as group:
            group.write(str(niceness))
    except OSError as exc:  # no autogroups (a kernel without them): niceness is enough
        if exc.errno == errno.EAGAIN and not _autogroup_refused:
            # Without CAP_SYS_ADMIN the kernel takes one such write a 100 ms, machine-wide:
            # in a burst most searches keep a group at nice 0 (the per-session search
            # bound still holds their number).
            _autogroup_refused.append(pid)
            log.warning("a search's scheduling group could not be lowered (%s): without "
                        "CAP_SYS_ADMIN the kernel allows one change every 100 ms",
                        exc.strerror)


_autogroup_refused: list[int] = []
"""Set once the kernel refused an autogroup's niceness (said once in the log)."""


def restore_priority(pid: int) -> None:
    """Give a lowered child, about to be stopped, the priority it would have had unlowered:
    every thread of its process group (``pid``, a session leader) the spawning thread's
    niceness, its autogroup nice 0. A process dies of TERM or KILL only once the scheduler
    runs it, and under CPU load a nice-19 one in a nice-19 autogroup waits up to a second
    for that: past a stop's grace. Best effort: raising a priority needs CAP_SYS_NICE (or
    RLIMIT_NICE), and an autogroup's change without CAP_SYS_ADMIN comes at most once every
    100 ms machine-wide; refused, the stop is only slower."""
    try:
        os.setpriority(os.PRIO_PGRP, pid, os.getpriority(os.PRIO_PROCESS, 0))
    except (PermissionError, ProcessLookupError):
        pass
    try:
        with open(f"/proc/{pid}/autogroup", "w") as group:
            group.write("0")
    except OSError:  # no autogroups, the child gone, or the rate limit (see above)
        pass


GATE_SCRIPT = 'read -r _ && exec "$@" </dev/null'
"""The gate: wait for one line on stdin (the host's go), then exec the command with stdin
from /dev/null; at EOF (the host died, or gave up on the child) exit without exec."""


@functools.cache
def gate_tools() -> tuple[str, str] | None:
    """``setpriv`` (util-linux, for ``--pdeathsig``) and ``bash``, or ``None`` (then every
    child is forked with a ``preexec_fn``). Bash, not ``/bin/sh``: dash rebuilds the
    environment at exec, dropping variables whose names are not shell identifiers (an
    exported bash function's ``BASH_FUNC_f%%`` among them); bash passes them on."""
    if not sys.platform.startswith("linux"):
        return None
    setpriv = shutil.which("setpriv")
    shell = next((p for p in ("/bin/bash", "/usr/bin/bash") if os.access(p, os.X_OK)), None)
    if setpriv is None or shell is None:
        log.info("setpriv or bash not found: tool processes are forked with a preexec_fn")
        return None
    return setpriv, shell


def _executable(name: str, options: dict[str, Any]) -> str:
    """Where ``subprocess`` would find ``name``; raises as ``Popen`` would (the gate's
    shell would only exit 127)."""
    env = options.get("env")
    cwd = os.fspath(options.get("cwd") or os.getcwd())
    if "/" in name:
        found: str | None = os.path.join(cwd, name)
    else:
        path = (env if env is not None else os.environ).get("PATH", os.defpath)
        found = shutil.which(name, path=path)
        if found is not None and not os.path.isabs(found):
            found = os.path.join(cwd, found)
    if found is None or not os.path.exists(found):
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), name)
    if os.path.isdir(found) or not os.access(found, os.X_OK):
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), name)
    return found


def start_gated(argv: list[str], cgroup: cgroups.Cgroup | None, niceness: int,
                options: dict[str, Any]) -> subprocess.Popen[bytes]:
    """Start ``argv`` without forking the host: ``subprocess`` vforks (no ``preexec_fn``)
    and execs ``setpriv --pdeathsig KILL`` (the parent-death signal, kept across exec) and
    then the gate (``GATE_SCRIPT``), which waits on a pipe. Meanwhile the host moves the
    child into ``cgroup`` and sets its niceness, then opens the gate: the command starts
    already a member, before it can fork."""
    tools = gate_tools()
    assert tools is not None
    setpriv, shell = tools
    exe = _executable(argv[0], options)
    wrapped = [setpriv, "--pdeathsig", "KILL", "--", shell, "-c", GATE_SCRIPT,
               "quiesce-gate", exe, *argv[1:]]
    gate_r, gate_w = os.pipe()
    try:
        with spawn_lock:
            try:
                popen = subprocess.Popen(wrapped, start_new_session=True, close_fds=True,
                                         **{**options, "stdin": gate_r})
            finally:
                os.close(gate_r)
            started_pids.add(popen.pid)
            try:
                if cgroup is not None:
                    cgroup.add(popen.pid)
                if niceness:
                    os.setpriority(os.PRIO_PROCESS, popen.pid, niceness)
                    _lower_autogroup(popen.pid, niceness)
                os.write(gate_w, b"go\n")
            except OSError as exc:
                popen.kill()
                popen.wait()
                started_pids.discard(popen.pid)
                raise subprocess.SubprocessError(f"cannot start {argv[0]!r}: {exc}") from exc
    finally:
        os.close(gate_w)
    return popen
