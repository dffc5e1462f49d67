"""The profile section of ``docs/benchmarks.md``: where the time goes, each process's CPU
per call by stage (from ``benchlib/profiling``), and what the profiles said when it was
written."""

from __future__ import annotations

import math

from benchlib.report_figures import num
from benchlib.stats import Series

PROFILE_READING = """\
What the profiles said when this section was written (2 December 2026, about 05:30 UTC,
the shared 2-core machine at load about 1; `scripts/bench --profile`). At commit e33c36a
the host spent 1,000 to 1,400 µs of CPU per `Read`: a third in trio's scheduler
(six or so task wake-ups a call: the request's task, the reader's effect gate, the reader
thread's answer, `tools.started`, the writer), a quarter in the reader threads (a pool
grown to a dozen threads by the GIL's hand-offs), an eighth in the call's lifecycle (its
record with three cancel scopes, permission, admission). Two changes removed most of it:
a small file on the root's own local file system is read on the event loop
(`host/localopen.py`: `openat2` beneath the root, never crossing a mount, so no network or
FUSE file system is ever entered there), and a call that can be answered at once (that
`Read`, with a free admission slot and nobody waiting) is answered in the link's reader
without a task (`Executor.execute_now`; `tools.abort` and `host.stats` too). After them the host
spends about 100 µs a call (6,500 calls/s unprofiled in that profile): its scheduler 7%;
the rest is the work itself, spread thin: the read and its path checks (nine system
calls, 1 to 5 µs each on this virtual machine, and the rendering) a quarter, the
interpreter's built-ins a quarter, the call's checks and result a seventh, the link's
endpoint and the JSON codec an eighth each (that profile was taken before the file's
path-only open and reopen were added, which cost about 15 µs more a call). The runtime's
side of the link costs about 50 µs a call. No stage is large enough that removing it alone
reaches 10,000 calls/s; each figure also moves by a quarter between runs of the same code
on this machine."""

PROFILE_SCENARIOS = (
    ("read-throughput", "`Read`, 64 in flight, runtime -> host link (the bench plays the "
     "runtime with `HostLink`)"),
    ("client-read", "`debug.runTool` `Read`, 64 in flight, through `quiesce serve`"),
    ("session-list", "`session.list`, 64 in flight, through `quiesce serve`"))


def profile_section(series: dict[str, Series]) -> list[str]:
    """Where the time goes: each process's CPU per call by stage (``benchlib/profiling``)."""
    out: list[str] = []
    for scenario, title in PROFILE_SCENARIOS:
        procs = [s for k in ("runtime", "host")
                 if (s := series.get(f"profile-{scenario}-{k}")) is not None and s.samples]
        if not procs:
            continue
        if not out:
            out += ["## Where the time goes (profile, same run)", "",
                    "`scripts/bench --profile SCENARIO` reruns one of these alone and prints "
                    "its top functions too. Each process's main thread is profiled with "
                    "cProfile on its CPU clock over one flood (start-up and shutdown left "
                    "out); each stage's own time is scaled to the process's unprofiled CPU "
                    "per call over the same flood (all threads, the process CPU-time "
                    "clock, to the ns), so the shares are "
                    "cProfile's and the total is the real one. Worker threads are not in "
                    "cProfile's view: their CPU is the \"other threads\" row. cProfile "
                    "weighs code with many small calls (trio's scheduler) more than it "
                    "costs unprofiled: read the stages as a ranking, not to the µs.", "",
                    PROFILE_READING, ""]
        rate = procs[0].extra.get("callsPerSecond", [math.nan])[0]
        stages = sorted({k for s in procs for k in s.extra if k != "callsPerSecond"},
                        key=lambda k: -sum(s.extra.get(k, [0.0])[0] for s in procs))
        out += [f"**{title}** ({num(rate, 'calls/s')} calls/s unprofiled in this flood):", "",
                "| stage | " + " | ".join(f"{s.title.split(': ', 1)[1]} µs a call"
                                          for s in procs) + " |",
                "|---|" + "---:|" * len(procs)]
        for stage in stages:
            cells = [num(s.extra[stage][0], "µs") if stage in s.extra else "—" for s in procs]
            if all(c in ("—", "0.000") for c in cells):
                continue
            out.append(f"| {stage} | " + " | ".join(cells) + " |")
        out.append("| **total CPU per call** | " + " | ".join(
            f"**{num(s.samples[0], 'µs')}**" for s in procs) + " |")
        out.append("")
    return out
