"""The reader threads of read-only bodies: results and errors come back, a cancel
abandons a job at once, a stuck job holds only its own thread, idle threads exit."""

from __future__ import annotations

import os
import pathlib
import threading
import time

import pytest
import trio

from host.tools.readers import Readers


async def test_results_and_errors_come_back_from_the_reader_thread() -> None:
    readers = Readers()
    seen: list[str] = []

    def work(cancelled: threading.Event) -> str:
        seen.append(threading.current_thread().name)
        return "done"

    def fail(cancelled: threading.Event) -> str:
        raise FileNotFoundError("gone")

    assert await readers.run(work) == "done"
    with pytest.raises(FileNotFoundError, match="gone"):
        await readers.run(fail)
    assert seen[0].startswith("quiesce-reader-")
    assert seen[0] != threading.current_thread().name


async def test_quick_jobs_share_one_thread() -> None:
    readers = Readers()
    async with trio.open_nursery() as nursery:
        for _ in range(64):
            nursery.start_soon(readers.run, lambda cancelled: None)
    assert readers.threads == 1


async def test_a_cancel_abandons_a_stuck_job_and_others_go_on(tmp_path: pathlib.Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    readers = Readers(grow_after=0.01)
    entered = threading.Event()
    flags: list[threading.Event] = []

    def stuck(cancelled: threading.Event) -> bytes:
        flags.append(cancelled)
        entered.set()
        with open(fifo, "rb") as f:  # no writer: blocks in the kernel
            return f.read()

    with trio.move_on_after(5) as timeout:
        async with trio.open_nursery() as nursery:
            abandoned = trio.CancelScope()

            async def run_stuck() -> None:
                with abandoned:
                    await readers.run(stuck)

            nursery.start_soon(run_stuck)
            await trio.to_thread.run_sync(entered.wait)
            # Queued behind the stuck job: a second thread takes them.
            for _ in range(5):
                assert await readers.run(lambda cancelled: 7) == 7
            sent = time.monotonic()
            abandoned.cancel()
        elapsed = time.monotonic() - sent
    assert not timeout.cancelled_caught
    assert elapsed < 0.5, elapsed
    assert flags[0].is_set()  # the stuck job was told nobody waits
    assert readers.threads == 2
    # Unblock the kernel's open so the thread ends (no test leaves a thread stuck).
    fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
    os.close(fd)


async def test_idle_threads_exit() -> None:
    readers = Readers(idle_exit=0.05)
    await readers.run(lambda cancelled: None)
    assert readers.threads == 1
    with trio.fail_after(5):
        while readers.threads:
            await trio.sleep(0.01)
    assert await readers.run(lambda cancelled: 3) == 3  # a new one starts on demand
