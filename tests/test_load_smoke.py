"""Smoke test of ``scripts/load``: the smoke mode passes its checks and reports every figure,
into a file of its own (never docs/); and the bench keeps the load block when it rewrites
the report."""

from __future__ import annotations

import importlib
import json
import pathlib
import subprocess
import sys
from types import ModuleType

from tests.conftest import Marked

ROOT = pathlib.Path(__file__).resolve().parent.parent
LOAD = ROOT / "scripts" / "load.py"
BEGIN, END = "<!-- load:begin -->", "<!-- load:end -->"
FIGURES = ("phaseA.abortRoundTripMs", "phaseA.settledMs", "phaseA.answeredAfterReleaseMs",
           "phaseB.abortingRoundTripMs", "phaseB.settledMs", "phaseB.idleRoundTripMs")


def _report_module() -> ModuleType:
    scripts = str(ROOT / "scripts")
    if scripts not in sys.path:
        sys.path.insert(0, scripts)
    return importlib.import_module("benchlib.report")


def test_smoke_load_passes_and_reports_every_figure(tmp_path: pathlib.Path,
                                                    marked: Marked) -> None:
    out, raw = tmp_path / "benchmarks.md", tmp_path / "load.json"
    out.write_text("# Benchmarks\n\nthe bench's figures\n")
    run = subprocess.run(
        [sys.executable, str(LOAD), "--smoke", "--out", str(out), "--json", str(raw)],
        cwd=ROOT, env=marked.env(), capture_output=True, text=True, timeout=60, check=False)
    assert run.returncode == 0, run.stdout + run.stderr
    data = json.loads(raw.read_text())
    result = data["result"]
    assert result["passed"], result["checks"]
    assert not result["failures"] and not result["leftovers"]
    checks = {c["name"]: c["passed"] for c in result["checks"]}
    assert len(checks) >= 15 and all(v is not False for v in checks.values()), checks
    # Only the tombstone check may be unmeasured, and only without an ops socket.
    assert [n for n, v in checks.items() if v is None] in ([], ["B: host tombstones bounded"])

    a, b = result["phase_a"], result["phase_b"]
    cfg = result["config"]
    assert a["sessions"] == cfg["sessions"] and a["ready"]
    assert a["outcomes"] == {"aborted": cfg["sessions"]}
    assert a["permission_requests"] == a["withdrawn"] > 0
    assert {"Bash", "Grep", "Read", "Write", "mcp__tools__wait_politely"} <= set(a["codes"])
    assert a["codes"]["mcp__tools__wait_politely"] == {"ABORTED": a["roles"]["plugin"]}
    assert a["plugin_cancelled"] == a["plugin_calls"] == a["roles"]["plugin"] > 0
    assert a["plugin_servers_left"] == []
    assert b["stops"] == cfg["stops"]
    assert sum(b["outcomes"].values()) == cfg["stops"] and b["outcomes"].get("aborted", 0) > 0
    assert {"Bash", "Read", "Glob", "Write"} <= set(b["log_calls"])
    assert b["write_targets"] > 0 and b["torn_writes"] == []
    assert len(b["samples"]) >= 2
    for sample in b["samples"]:
        assert sample["daemon_rss_mb"] and sample["host_rss_mb"]
        assert (sample["tombstones"] is not None) == (result["ops_socket"] is not None)

    figures = data["figures"]
    assert set(figures) == set(FIGURES)
    for key in FIGURES:
        if key == "phaseB.idleRoundTripMs" and figures[key]["n"] == 0:
            continue  # every abort of this run happened to land in a turn
        assert figures[key]["n"] > 0 and figures[key]["median"] > 0, key
    assert figures["phaseA.abortRoundTripMs"]["n"] == cfg["sessions"]

    report = out.read_text()
    assert report.startswith("# Benchmarks\n\nthe bench's figures\n")
    assert report.count(BEGIN) == report.count(END) == 1
    block = report[report.index(BEGIN):]
    for text in ("## Load test", "### Phase A", "### Phase B", "### Checks",
                 "`agent.abort` round trip (client)", "daemon RSS", "tombstones",
                 "**every check passed**"):
        assert text in block, text
    assert "| **NO** |" not in block


def test_bench_report_keeps_the_load_block(tmp_path: pathlib.Path) -> None:
    report = _report_module()
    path = tmp_path / "benchmarks.md"
    report.write_load_block(path, "## Load test\n\nfirst")
    report.write_preserving_load(path, "# Benchmarks\n\nbench run 1\n")
    expected = f"# Benchmarks\n\nbench run 1\n\n{BEGIN}\n## Load test\n\nfirst\n{END}\n"
    assert path.read_text() == expected
    report.write_load_block(path, "## Load test\n\nsecond")
    report.write_preserving_load(path, "# Benchmarks\n\nbench run 2\n")
    text = path.read_text()
    assert text.startswith("# Benchmarks\n\nbench run 2\n")
    assert text.count(BEGIN) == 1 and "second" in text and "first" not in text


def _leftover_check(phase: str, right_after: list[str], exiting: list[str],
                    later: list[str]) -> bool | None:
    """The verdict of the judge's leftover check of ``phase`` on a run with these."""
    _report_module()  # puts scripts/ on the path
    records = importlib.import_module("benchlib.load_records")
    leftovers = importlib.import_module("benchlib.load_leftovers")
    judge = importlib.import_module("benchlib.load_judge")
    result = records.LoadResult(records.SMOKE)
    recorded = result.phase_a if phase == "A" else result.phase_b
    recorded.leftovers = leftovers.Leftovers(right_after, exiting, later)
    judge.judge(result)
    (check,) = [c for c in result.checks
                if c.name.startswith(f"{phase}: no marked process")]
    verdict: bool | None = check.passed
    return verdict


def test_the_leftover_checks_let_a_raced_search_exit_and_nothing_else() -> None:
    """A stop does not wait for a read-only call's search: one still exiting (or not yet
    reaped) right after the answer passes if it is gone within the wait; any other
    process right after the answer, or anything still there after the wait, fails."""
    rg, bash = "16244 rg (zombie)", "16250 sleep (sleeping)"
    for phase in ("A", "B"):
        assert _leftover_check(phase, [], [], []) is True
        assert _leftover_check(phase, [], [rg], []) is True
        assert _leftover_check(phase, [], [rg], [rg]) is False
        assert _leftover_check(phase, [bash], [], []) is False
        assert _leftover_check(phase, [bash], [rg], [bash]) is False
    # A zombie search the host has not reaped yet (the failure CI met) is a raced search.
    harness = importlib.import_module("benchlib.harness")
    leftovers = importlib.import_module("benchlib.load_leftovers")
    seen = leftovers.Leftovers.seen([harness.Member(16244, "rg", "zombie", False),
                                     harness.Member(16250, "sleep", "sleeping", False)])
    assert (seen.right_after, seen.exiting) == (["16250 sleep (sleeping)"],
                                                ["16244 rg (zombie)"])
