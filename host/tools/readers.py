"""The reader threads: where read-only tool bodies do their blocking work, abandonably.

A read can block without bound (a hung network file system, a FUSE server that never
answers), and a stop must still end its call at once, so a read that might never runs on
the event loop: it runs on one of these threads, and a cancelled caller stops waiting for
it (its result is dropped; the thread finishes the read or stays stuck in it, alone). The
one read done on the loop is a small file the kernel reaches without leaving the root's
local file systems (``host.localopen``).

Why not ``trio.to_thread.run_sync`` per read, as before: per call it takes a capacity
limiter token (a checkpoint), copies the context, hands the job to a thread of its
cache (one lock hand-over per thread, and as many threads as reads in flight, each
contending for the GIL) and sets up ``trio.from_thread``; the profile (``scripts/bench
--profile read-throughput``) put that near a quarter of the host's CPU per ``Read``.
Here a job is one ``SimpleQueue.put``, the caller waits with
``wait_task_rescheduled`` (its abort abandons the job), and the answer is one
``run_sync_soon``. Long-lived threads share one queue and take one job at a time, so
a stuck job holds its own thread and nothing else.

How many threads: one while reads are quick. A thread is added when a job is queued
and every thread is busy with a job older than ``GROW_AFTER`` (slow or stuck reads
must not hold quick ones behind them); a watchdog thread, awake only while jobs wait,
makes the same check when no new job comes to trigger it. At most ``MAX_THREADS``
(admission bounds the read-only calls running; abandoned stuck reads keep their
threads, and past the cap new jobs wait, abandonably, for a free one). A thread idle
for ``IDLE_EXIT`` seconds exits.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from typing import Any, Generic, TypeVar

import outcome
import trio

T = TypeVar("T")

GROW_AFTER = 0.005
"""Seconds a thread's job may run before a queued job gets a thread of its own."""
MAX_THREADS = 64
IDLE_EXIT = 10.0


class _Job(Generic[T]):
    __slots__ = ("abandoned", "cancelled", "task", "token", "work")

    def __init__(self, work: Callable[[threading.Event], T], task: trio.lowlevel.Task,
                 token: trio.lowlevel.TrioToken) -> None:
        self.work = work
        self.task = task
        self.token = token
        self.cancelled = threading.Event()  # set when nobody waits any more
        self.abandoned = False  # touched in the trio thread only


class Readers:
    """A pool of reader threads (one per host process: ``READERS``)."""

    def __init__(self, *, grow_after: float = GROW_AFTER, max_threads: int = MAX_THREADS,
                 idle_exit: float = IDLE_EXIT) -> None:
        self._grow_after = grow_after
        self._max = max_threads
        self._idle_exit = idle_exit
        self._jobs: queue.SimpleQueue[_Job[Any]] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._busy_since: dict[int, float] = {}  # thread number -> start of its job
        self._threads = 0
        self._idle = 0
        self._queued = 0
        self._names = 0
        self._watch = threading.Event()  # set while jobs wait: the watchdog checks
        self._watchdog: threading.Thread | None = None

    @property
    def threads(self) -> int:
        return self._threads

    async def run(self, work: Callable[[threading.Event], T]) -> T:
        """Run ``work`` on a reader thread and return its result (or raise its error).
        A cancel abandons it at once: ``work``'s event is set so it can stop early, and
        its result, if it ever comes, is dropped."""
        await trio.lowlevel.checkpoint_if_cancelled()
        job = _Job(work, trio.lowlevel.current_task(), trio.lowlevel.current_trio_token())
        with self._lock:
            self._queued += 1
            self._jobs.put(job)
            self._grow_if_needed()

        def abort(_: Any) -> trio.lowlevel.Abort:
            job.abandoned = True
            job.cancelled.set()
            return trio.lowlevel.Abort.SUCCEEDED

        try:
            result: T = await trio.lowlevel.wait_task_rescheduled(abort)
        finally:
            job.cancelled.set()  # also when done: a worker never runs a job nobody awaits
        return result

    # -- threads (each under self._lock where it touches the counts) ------------------

    def _grow_if_needed(self) -> None:
        """Called with the lock held, a job queued: a thread is started only if none is
        idle and every busy one has been on its job longer than ``grow_after``; else
        the watchdog looks again then, if jobs still wait."""
        if self._queued <= self._idle:
            return
        now = time.monotonic()
        if (self._idle or self._threads >= self._max
                or any(now - since < self._grow_after for since in self._busy_since.values())):
            self._wake_watchdog()
            return
        self._start_thread()

    def _start_thread(self) -> None:
        self._threads += 1
        self._idle += 1
        self._names += 1
        threading.Thread(target=self._work, args=(self._names,), daemon=True,
                         name=f"quiesce-reader-{self._names}").start()

    def _wake_watchdog(self) -> None:
        self._watch.set()
        if self._watchdog is None:
            self._watchdog = threading.Thread(target=self._watch_loop, daemon=True,
                                              name="quiesce-reader-watchdog")
            self._watchdog.start()

    def _watch_loop(self) -> None:
        while True:
            self._watch.wait()
            time.sleep(self._grow_after)
            with self._lock:
                if self._queued > self._idle:
                    self._grow_if_needed()
                else:
                    self._watch.clear()

    def _work(self, number: int) -> None:
        # Counted idle from its start (``_start_thread``) until it takes a job, and again
        # from the end of each job: a thread about to take a job is no reason to grow.
        while True:
            try:
                job = self._jobs.get(timeout=self._idle_exit)
            except queue.Empty:
                with self._lock:
                    if self._jobs.empty():
                        self._idle -= 1
                        self._threads -= 1
                        return
                continue
            with self._lock:
                self._idle -= 1
                self._queued -= 1
                self._busy_since[number] = time.monotonic()
            try:
                if not job.cancelled.is_set():
                    result = outcome.capture(job.work, job.cancelled)
                    try:
                        job.token.run_sync_soon(_deliver, job, result)
                    except trio.RunFinishedError:
                        pass  # the loop is gone: nobody waits
            finally:
                with self._lock:
                    del self._busy_since[number]
                    self._idle += 1
            del job


def _deliver(job: _Job[Any], result: outcome.Outcome[Any]) -> None:
    """In the trio thread: wake the caller, unless it abandoned the job."""
    if not job.abandoned:
        job.abandoned = True
        trio.lowlevel.reschedule(job.task, result)


READERS = Readers()
