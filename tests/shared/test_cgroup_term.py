"""A stop TERMs each member of a cgroup once: early, as the abort arrives (``Cgroup.term``),
and not again when the stop itself runs (``Cgroup.stop``). A member that handles TERM and
lives on sees one TERM, then the KILL past the grace."""

from __future__ import annotations

import pathlib
import subprocess
import sys
import time

import trio

from runtime.proc import cgroups

COUNTER = """
import signal, sys, time
out = open(sys.argv[1], "a")
def on_term(signum, frame):
    out.write("term\\n")
    out.flush()
signal.signal(signal.SIGTERM, on_term)
print("ready", flush=True)
while True:
    time.sleep(0.005)
"""


def test_a_member_gets_one_term_from_the_early_term_and_the_stop(
        scratch_cgroup: cgroups.HostCgroups, tmp_path: pathlib.Path) -> None:
    terms = tmp_path / "terms"
    cgroup = scratch_cgroup.new("call-term-once")
    child = subprocess.Popen([sys.executable, "-c", COUNTER, str(terms)],
                             stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)
    try:
        cgroup.add(child.pid)
        assert child.stdout is not None and child.stdout.readline() == b"ready\n"
        cgroup.term()  # as the abort arrives
        deadline = time.monotonic() + 5
        while not (terms.exists() and terms.read_text()) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert terms.read_text() == "term\n"  # handled, and the member lives on
        report = trio.run(cgroup.stop, 0.3, 2.0)  # the stop itself: no second TERM
        assert child.wait(timeout=5) == -9
        assert terms.read_text() == "term\n"
        assert report.killed == 1 and report.survivors == ()
    finally:
        child.kill()
        child.wait()
        if child.stdout is not None:
            child.stdout.close()
        cgroup.remove()
