"""A test-only seam in the session log's writer: make chosen writes, cuts or fsyncs fail.

Off unless the daemon's environment sets ``QUIESCE_LOG_FAULTS`` (nothing else reads it).
The variable is taken out of the process's environment when this module is imported, so
the host and every process it starts never inherit it; the daemon's log says the seam is
active when it starts (:func:`warn_if_active`).
Real EIO and EROFS are hard to produce on demand; ENOSPC is tested on a small tmpfs
instead. The value is a comma-separated list of ``<op>:<ERRNO>:<first>[:<count>]``:

- ``op`` is ``write`` (one append's write), ``truncate`` (the cut back of a failed
  append) or ``fsync``; operations of each kind are counted from 1, per process, over
  every session log;
- ``ERRNO`` is a name from :mod:`errno` (``EIO``, ``EROFS``, ``ENOSPC``, …);
- operations ``first`` to ``first + count - 1`` fail (``count`` 1 by default; 0: every
  one from ``first`` on).

A failing write first writes the first half of its line for real, then raises: the worst
a disk can do (a torn record), which is what the cut back must undo.
"""

from __future__ import annotations

import errno
import logging
import os
from collections import Counter
from dataclasses import dataclass

ENV = "QUIESCE_LOG_FAULTS"
OPS = ("write", "truncate", "fsync")


@dataclass(frozen=True)
class Fault:
    op: str
    errno: int
    first: int
    count: int = 1

    def hits(self, n: int) -> bool:
        return n >= self.first and (self.count == 0 or n < self.first + self.count)


def parse(spec: str) -> tuple[Fault, ...]:
    faults = []
    for item in filter(None, (part.strip() for part in spec.split(","))):
        parts = item.split(":")
        if len(parts) not in (3, 4) or parts[0] not in OPS:
            raise ValueError(f"{ENV}: {item!r} is not <op>:<ERRNO>:<first>[:<count>]")
        code = getattr(errno, parts[1], None)
        if not isinstance(code, int):
            raise ValueError(f"{ENV}: unknown errno {parts[1]!r}")
        faults.append(Fault(parts[0], code, int(parts[2]),
                            int(parts[3]) if len(parts) == 4 else 1))
    return tuple(faults)


class Injector:
    def __init__(self, faults: tuple[Fault, ...] = ()) -> None:
        self.faults = faults
        self._counts: Counter[str] = Counter()

    def check(self, op: str) -> OSError | None:
        """Count one ``op``; the error it must fail with, if any."""
        if not self.faults:
            return None
        self._counts[op] += 1
        for fault in self.faults:
            if fault.op == op and fault.hits(self._counts[op]):
                return OSError(fault.errno, f"{os.strerror(fault.errno)} (injected by {ENV})")
        return None


injector = Injector(parse(os.environ.pop(ENV, "")))


def warn_if_active(log: logging.Logger) -> None:
    """Say in the daemon's log that chosen log operations will fail (tests only)."""
    if injector.faults:
        log.warning("%s is set: the session log's test-only fault seam is active (%s)", ENV,
                    ", ".join(f"{f.op}:{errno.errorcode.get(f.errno, f.errno)}:{f.first}:"
                              f"{f.count}" for f in injector.faults))


def configure(spec: str) -> None:
    """Replace the faults (tests in process; the daemon reads its environment)."""
    global injector
    injector = Injector(parse(spec))
