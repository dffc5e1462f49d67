"""Smoke test of ``scripts/bench``: the quick mode, one repetition, every row reported.

It asserts what the output says, not only that it was written: every row has
samples and no anomaly, floors sit below what they are floors of, the goal table
names every goal, the plot is a PNG, the tombstone registry stays at its
capacity, and the load test's block of an existing report survives. Everything it
writes goes to ``tmp_path``; the committed docs are never touched.
"""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

from tests.conftest import Marked

ROOT = pathlib.Path(__file__).resolve().parent.parent
BENCH = ROOT / "scripts" / "bench.py"
STOPS = {"stop-read-only", "stop-tree-term", "stop-tree-ignoring", "stop-undispatched",
         "stop-50-trees", "stop-loop-lag", "stream-loop-lag"}
FLOORS = {"floor-session-list", "floor-host-tool", "floor-noop-turn", "floor-bash-turn",
          "floor-compaction",
          "floor-process-scan", "floor-fsync", "floor-log-append", "floor-log-cut",
          "floor-log-recover"}
GROUPS = {"floor-pipe-raw", "floor-pipe-epoll", "link-host-stats", "rtt-quiesce", "rtt-mcp",
          "throughput-quiesce", "throughput-mcp", "startup-quiesce", "startup-mcp",
          "growth-1", "growth-10", "tombstones", "micro-dispatch", "micro-handler",
          "micro-encode-request", "micro-decode-request", "micro-encode-result",
          "micro-decode-result", "micro-json-request", "micro-thread-hop", "growth-all-1",
          "growth-all-10", "startup-python", "startup-import-runtime", "startup-import-host",
          "startup-import-jsonrpcserver", "startup-import-jsonrpcserver-whole",
          "throughput-host-stats", "throughput-runtool", "throughput-session-list",
          "micro-reader-hop",
          # the client link over stdio, a WebSocket and a Unix socket (issue 27)
          "socket-rtt-stdio", "socket-rtt-ws", "socket-rtt-unix", "socket-rate-stdio",
          "socket-rate-ws", "socket-rate-unix", "socket-stop-stdio", "socket-stop-ws"}
PROFILES = {f"profile-{scenario}-{side}" for side in ("runtime", "host")
            for scenario in ("read-throughput", "client-read")} | {"profile-session-list-runtime"}
LOAD_BLOCK = "<!-- load:begin -->\n## Load test\nkept as it was\n<!-- load:end -->"


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[len(ordered) // 2]


def test_quick_bench_reports_every_row(tmp_path: pathlib.Path, marked: Marked) -> None:
    out, raw = tmp_path / "benchmarks.md", tmp_path / "bench.json"
    out.write_text("# old report\n\n" + LOAD_BLOCK + "\n")
    run = subprocess.run(
        [sys.executable, str(BENCH), "--quick", "--repeat", "1", "--out", str(out),
         "--json", str(raw)],
        cwd=ROOT, env=marked.env(), capture_output=True, text=True, timeout=240, check=False)
    assert run.returncode == 0, run.stdout + run.stderr
    report = out.read_text()
    data = json.loads(raw.read_text())
    series = {s["key"]: s for s in data["series"]}
    assert STOPS | FLOORS | GROUPS | PROFILES <= set(series), \
        STOPS | FLOORS | GROUPS | PROFILES - set(series)
    assert not data["failures"] and not data["leftovers"]
    for key, s in series.items():
        if key == "memory":  # per-item memory is measured only from 100 sessions up
            continue
        assert s["samplesMs"], key
        assert all(v > 0 for v in s["samplesMs"]), key
        assert not s["anomalies"], (key, s["anomalies"])
    for key in STOPS | FLOORS:
        assert f"| {series[key]['title']} | {len(series[key]['samplesMs'])} |" in report, key
    for key in GROUPS - {"tombstones"}:  # every other row is in a table of its own
        s = series[key]
        row = (f"| {s['title']} | {s['unit']} | {len(s['samplesMs'])} |"
               if not key.startswith("growth-") else f"| {key.rsplit('-', 1)[1]} |")
        assert row in report, f"no table row for {key}"
    for key in STOPS - {"stop-loop-lag", "stream-loop-lag"}:  # samples: probes, not reps
        assert len(series[key]["samplesMs"]) == 1 and series[key]["goalMs"] is not None
    assert len(series["stop-loop-lag"]["samplesMs"]) >= 50

    med = {k: _median(s["samplesMs"]) for k, s in series.items() if s["samplesMs"]}
    # A floor is below what it is the floor of; the peer answered the same file.
    assert med["floor-pipe-raw"] < med["link-host-stats"] < med["startup-quiesce"]
    assert med["floor-pipe-raw"] < med["rtt-quiesce"]
    assert series["throughput-quiesce"]["unit"] == "calls/s"
    assert med["throughput-quiesce"] > 100 and med["throughput-mcp"] > 10
    assert med["micro-decode-request"] < med["micro-json-request"] * 10

    # Tombstones: the registry holds at most its capacity, and its memory stops growing.
    tomb = series["tombstones"]
    held, counts = tomb["extraMs"]["held"], tomb["extraMs"]["count"]
    assert max(held) == 10_000 and counts[-1] > 10_000
    at_capacity = tomb["samplesMs"][counts.index(min(c for c in counts if c >= 10_000))]
    assert tomb["samplesMs"][-1] < 1.5 * at_capacity

    # The report says which goals are met, the plot is a PNG, the load block is kept.
    assert "## Where the time goes (profile, same run)" in report
    for key in PROFILES:  # each process's profile names its stages, none of them negative
        stages = {k: v[0] for k, v in series[key]["extraMs"].items() if k != "callsPerSecond"}
        assert len(stages) >= 2 and all(v >= 0 for v in stages.values()), (key, stages)
        assert series[key]["samplesMs"][0] > 0, key
    assert "## Goals: met or not" in report
    for goal in ("1. tool call round trip", "2. throughput, 64 in flight", "3. start-up",
                 "4. stop: read-only", "4. stop: tree-term", "4. stop: tree-ignoring",
                 "4. stop: undispatched", "5. growth"):
        assert f"| {goal} |" in report, goal
    assert "![stop latency against calls in flight](benchmarks.png)" in report
    png = (tmp_path / "benchmarks.png").read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 10_000
    assert report.rstrip().endswith(LOAD_BLOCK) and "# old report" not in report
    assert "Processes left at the end of the run: none." in report
