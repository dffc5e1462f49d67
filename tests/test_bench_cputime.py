"""The bench's CPU-time samples: a process that used a millisecond of CPU reads more than
0 (``test_bench_smoke`` once failed on a profile sample of 0 on a loaded machine: psutil's
``cpu_times()`` counts in 10 ms ticks)."""

from __future__ import annotations

import importlib
import pathlib
import subprocess
import sys
from types import ModuleType

import psutil

ROOT = pathlib.Path(__file__).resolve().parent.parent
# Burns about a millisecond of CPU per line read, then waits for the next line.
BURNER = ("import sys, time\n"
          "for _ in sys.stdin:\n"
          "    end = time.thread_time() + 0.001\n"
          "    while time.thread_time() < end: pass\n"
          "    print('done', flush=True)\n")


def _profiling() -> ModuleType:
    scripts = str(ROOT / "scripts")
    if scripts not in sys.path:
        sys.path.insert(0, scripts)
    return importlib.import_module("benchlib.profiling")


def test_a_millisecond_of_cpu_never_reads_zero() -> None:
    cpu = _profiling()._cpu
    with subprocess.Popen([sys.executable, "-c", BURNER], stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE, text=True) as child:
        _windows(child, cpu)


def _windows(child: subprocess.Popen[str], cpu: object) -> None:
    assert callable(cpu)
    try:
        assert child.stdin is not None and child.stdout is not None
        process = psutil.Process(child.pid)
        deltas = []
        for _ in range(10):
            before = cpu(process)
            child.stdin.write("go\n")
            child.stdin.flush()
            assert child.stdout.readline() == "done\n"
            deltas.append(cpu(process) - before)
        assert all(0.0009 < d < 0.5 for d in deltas), deltas
    finally:
        child.kill()
        child.wait(timeout=10)
