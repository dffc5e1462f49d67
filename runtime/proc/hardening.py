"""What a tool process cannot reach of the runtime and the host, whatever the sandbox mode.

Every tool process starts with stdin from ``/dev/null``, stdout and stderr on the host's
pipes, and no other descriptor (``host.spawn``: ``close_fds``), so it holds none of the
runtime's or the host's links. Through ``/proc/<pid>/`` (``fd/``, ``environ``, ``mem``,
``maps``) it could still open them, as any process of the same user can; ``harden``
closes that:

- the runtime and the host make themselves not dumpable (``PR_SET_DUMPABLE 0``): the
  kernel then refuses their descriptors (``fd/``) and memory (``mem``) to every other
  process of the user that lacks ``CAP_SYS_PTRACE`` (and a core dump of them is never
  written). Their children are not affected: ``execve`` makes a process dumpable again.
  (``environ`` and ``maps`` are refused by the same rule in Linux's documentation, yet
  the 6.18 kernel this was measured on let root read them: secrets are kept out of the
  environment, ``host.childenv``, not by this);
- the host drops ``CAP_SYS_PTRACE`` from its capability bounding set: the host keeps it
  (its own process-table reads need it), but no program it starts (a tool, a hook, a
  plugin server) can ever have it, even as root, so a root tool is refused too.

What can still reach the runtime or the host, where no sandbox confines the tool
(``docs/operations.md``): a signal from a process of the same user (``SIGSTOP`` of the
runtime holds every stop; the host's is replaced by liveness), an open of their
executables or of the workspace files they read, and anything root can do with other
capabilities (loading a kernel module, ``/dev/mem``). The Landlock sandbox scopes signals
and ``ptrace`` to the tool's own domain where the kernel has ABI 6.
"""

from __future__ import annotations

import ctypes
import logging
import os
import sys
from dataclasses import dataclass

from runtime.proc.libc import prctl

log = logging.getLogger(__name__)

PR_SET_DUMPABLE = 4
PR_GET_DUMPABLE = 3
PR_CAPBSET_READ = 23
PR_CAPBSET_DROP = 24
CAP_SYS_PTRACE = 19


_prctl = prctl


@dataclass(frozen=True)
class Hardening:
    """What ``harden`` achieved: each is what the kernel now says, not what was asked."""

    not_dumpable: bool
    children_without_ptrace: bool


def harden(*, children_without_ptrace: bool) -> Hardening:
    """Make this process not dumpable, and, with ``children_without_ptrace`` (the host),
    drop ``CAP_SYS_PTRACE`` from the bounding set of every program it will start. Logs
    what could not be done; never raises."""
    if not sys.platform.startswith("linux"):
        return Hardening(False, False)
    prctl = _prctl()
    if prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        log.warning("prctl(PR_SET_DUMPABLE, 0) failed: %s", os.strerror(ctypes.get_errno()))
    dumpable = prctl(PR_GET_DUMPABLE, 0, 0, 0, 0) != 0
    no_ptrace = False
    if children_without_ptrace:
        # Without CAP_SETPCAP the drop fails (EPERM); a process without CAP_SYS_PTRACE in
        # its bounding set has none to give its children anyway.
        if prctl(PR_CAPBSET_READ, CAP_SYS_PTRACE, 0, 0, 0) == 1:
            prctl(PR_CAPBSET_DROP, CAP_SYS_PTRACE, 0, 0, 0)
        no_ptrace = prctl(PR_CAPBSET_READ, CAP_SYS_PTRACE, 0, 0, 0) == 0
        if not no_ptrace:
            log.warning("CAP_SYS_PTRACE stays in the bounding set (%s): a tool process "
                        "with it could read this process's memory",
                        os.strerror(ctypes.get_errno()))
    if dumpable:
        log.warning("this process stays dumpable: a tool process of the same user can "
                    "read its descriptors and memory through /proc")
    return Hardening(not dumpable, no_ptrace)
