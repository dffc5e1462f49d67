"""CPU time a process has used, to the nanosecond.

psutil's ``cpu_times()`` reads ``/proc/PID/stat``, whose user and system times count in
clock ticks (``USER_HZ``, 100 a second here): a window in which a process used less than
10 ms of CPU often reads 0, and a loaded machine makes short windows common (the bench's
quick mode floods 300 calls; a ``session.list`` costs tens of µs). The kernel keeps each
process's CPU time in nanoseconds as well, behind its process CPU-time clock: the clock
id ``clock_getcpuclockid(3)`` returns, ``(~pid << 3) | CPUCLOCK_SCHED``, which counts every
thread of the process, the exited ones included (as ``cpu_times()`` does).
"""

from __future__ import annotations

import time

import psutil

_CPUCLOCK_SCHED = 2


def cpu_clock(pid: int) -> int:
    """The clock id of process ``pid``'s CPU-time clock (``clock_getcpuclockid(3)``)."""
    return (~pid << 3) | _CPUCLOCK_SCHED


def cpu_seconds(process: psutil.Process) -> float:
    """Seconds of CPU (every thread, user and system) ``process`` has used, to the
    nanosecond; psutil's tick-grained figure where the clock cannot be read."""
    try:
        return time.clock_gettime(cpu_clock(process.pid))
    except OSError:  # not Linux, or the process is gone
        times = process.cpu_times()
        return float(times.user + times.system)
