"""Smoke test of ``scripts/bench``: the quick mode, one repetition, every scenario reported."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

from tests.conftest import Marked

ROOT = pathlib.Path(__file__).resolve().parent.parent
BENCH = ROOT / "scripts" / "bench.py"
SCENARIOS = {
    "floor-session-list", "floor-host-tool", "floor-noop-turn", "floor-bash-turn",
    "floor-process-scan", "floor-fsync", "floor-regex-22", "floor-regex-16", "stop-read-only",
    "stop-read-only-short", "stop-tree-term", "stop-tree-ignoring", "stop-undispatched",
}


def test_quick_bench_reports_every_scenario(tmp_path: pathlib.Path, marked: Marked) -> None:
    out, raw = tmp_path / "benchmarks.md", tmp_path / "bench.json"
    run = subprocess.run(
        [sys.executable, str(BENCH), "--quick", "--repeat", "1", "--out", str(out),
         "--json", str(raw)],
        cwd=ROOT, env=marked.env(), capture_output=True, text=True, timeout=60, check=False)
    assert run.returncode == 0, run.stdout + run.stderr
    report = out.read_text()
    data = json.loads(raw.read_text())
    series = {s["key"]: s for s in data["series"]}
    assert set(series) == SCENARIOS
    assert not data["failures"] and not data["leftovers"]
    for key, s in series.items():
        assert s["samplesMs"], key
        assert all(v > 0 for v in s["samplesMs"]), key
        assert not s["anomalies"], (key, s["anomalies"])
        row = f"| {s['title']} | {len(s['samplesMs'])} |"
        assert row in report, f"no table row for {key}"
    for key in ("stop-read-only", "stop-read-only-short", "stop-tree-term", "stop-tree-ignoring",
                "stop-undispatched"):
        assert len(series[key]["samplesMs"]) == 1
        assert series[key]["goalMs"] is not None
    assert "Processes left at the end of the run: none." in report
    assert "## Ratios" in report and "## Floors" in report
