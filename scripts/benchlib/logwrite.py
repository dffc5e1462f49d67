"""The session log's writer, in the bench process: the happy path and the cut back.

``floor-log-append`` is what a ``turn/end`` costs the daemon (``SessionLog.append`` and
its ``sync``, the fsync in a worker thread); ``floor-log-cut`` is a failed append undone
(half the record written, the error, ``fstat`` and ``ftruncate`` back to the last whole
record), made to fail through the writer's test seam (``runtime.agent.logfaults``);
``floor-log-recover`` is that failed append undone and then the record appended and
fsynced: a ``turn/end`` that met a failing disk once.
"""

from __future__ import annotations

import itertools
import logging

import trio
import trio.lowlevel

from benchlib.harness import Bench, now_ms
from benchlib.stats import Series
from protocol.causes import UserCause
from protocol.messages.events import SessionMeta, TurnEnd, TurnOutcome
from runtime.agent import logfaults
from runtime.agent.sessionlog import SessionLog

_logs = itertools.count()


def _log(bench: Bench) -> SessionLog:
    log = SessionLog.create(bench.workdir / "data" / f"bench-log-{next(_logs)}.jsonl")
    log.append(SessionMeta(log.next_seq(), "", "s-bench", "/w", "auto", 0.0))
    return log


def _end(log: SessionLog) -> TurnEnd:
    return TurnEnd(log.next_seq(), "t1", TurnOutcome("aborted", UserCause()), "cancelled")


async def _timed(bench: Bench, series: Series, n: int, warmup: int, *, fail: bool,
                 sync: bool) -> Series:
    log = _log(bench)
    # The writer logs each failure, as in the daemon (the record is made and handled);
    # here it goes nowhere instead of to the bench's stderr.
    logger = logging.getLogger("runtime.agent.sessionlog")
    quiet = logging.NullHandler()
    logger.addHandler(quiet)
    logger.propagate = False
    try:
        for i in range(warmup + n):
            if fail:
                logfaults.configure("write:EIO:1")
            start = now_ms()
            if fail:
                try:
                    log.append(_end(log))
                except OSError:
                    pass
                else:
                    series.anomalies.append(f"rep {i}: the injected failure did not happen")
            if sync:
                log.append(_end(log))
                await log.sync()
            elapsed = now_ms() - start
            if log.torn:
                series.anomalies.append(f"rep {i}: the cut back failed")
            if i >= warmup:
                series.samples.append(elapsed)
            await trio.lowlevel.checkpoint()
    finally:
        logfaults.configure("")
        log.close()
        logger.removeHandler(quiet)
        logger.propagate = True
    return series


async def floor_log_append(bench: Bench, n: int, warmup: int) -> Series:
    return await _timed(bench, Series(
        "floor-log-append", "floor: `SessionLog.append` + `sync` of a `turn/end` (the "
        "daemon's writer, fsync in a worker thread; in the bench process)"),
        n, warmup, fail=False, sync=True)


async def floor_log_cut(bench: Bench, n: int, warmup: int) -> Series:
    return await _timed(bench, Series(
        "floor-log-cut", "floor: a failed append cut back (half a `turn/end` written, "
        "EIO injected, `fstat` + `ftruncate`; in the bench process)"),
        n, warmup, fail=True, sync=False)


async def floor_log_recover(bench: Bench, n: int, warmup: int) -> Series:
    return await _timed(bench, Series(
        "floor-log-recover", "floor: a failed append cut back, then the `turn/end` appended "
        "and synced (in the bench process)"), n, warmup, fail=True, sync=True)
