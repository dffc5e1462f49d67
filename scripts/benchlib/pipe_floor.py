"""The physical floor of a round trip: a raw ``os.write``/``os.read`` echo between two
Python processes over a pair of pipes, no framing, no JSON, no event loop.

``python pipe_floor.py N WARMUP SIZE MODE`` spawns the echo child, sends N (+ WARMUP)
messages of SIZE bytes one at a time, each after the previous came back, and prints
the round trips (ms) as a JSON list. The child is this file with ``echo MODE``.
MODE ``raw`` blocks in ``os.read``; ``epoll`` first waits in ``select.epoll`` on both
sides, the one step any event loop adds to a read (diagnostic).
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time


def _waiter(fd: int, mode: str) -> select.epoll | None:
    if mode != "epoll":
        return None
    poller = select.epoll()
    poller.register(fd, select.EPOLLIN)
    return poller


def echo(mode: str) -> None:
    poller = _waiter(0, mode)
    while True:
        if poller is not None:
            poller.poll()
        data = os.read(0, 65536)
        if not data:
            return
        os.write(1, data)


def main() -> int:
    if sys.argv[1] == "echo":
        echo(sys.argv[2])
        return 0
    n, warmup, size = (int(a) for a in sys.argv[1:4])
    mode = sys.argv[4]
    child = subprocess.Popen([sys.executable, __file__, "echo", mode], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, bufsize=0)
    assert child.stdin is not None and child.stdout is not None
    out_fd, in_fd = child.stdin.fileno(), child.stdout.fileno()
    message = b"x" * (size - 1) + b"\n"
    samples: list[float] = []
    poller = _waiter(in_fd, mode)
    try:
        for i in range(warmup + n):
            start = time.perf_counter()
            os.write(out_fd, message)
            got = 0
            while got < size:
                if poller is not None:
                    poller.poll()
                got += len(os.read(in_fd, 65536))
            if i >= warmup:
                samples.append((time.perf_counter() - start) * 1000)
    finally:
        child.stdin.close()
        child.wait(timeout=10)
    print(json.dumps(samples))
    return 0


if __name__ == "__main__":
    sys.exit(main())
