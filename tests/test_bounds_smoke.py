"""Smoke test of ``scripts/bounds``: its short mode passes every check, within every bound,
against real daemons (issue 31: memory bounds measured by a load script)."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

from tests.conftest import Marked

ROOT = pathlib.Path(__file__).resolve().parent.parent
BOUNDS = ROOT / "scripts" / "bounds.py"


def test_short_bounds_run_passes(tmp_path: pathlib.Path, marked: Marked) -> None:
    raw = tmp_path / "bounds.json"
    run = subprocess.run([sys.executable, str(BOUNDS), "--short", "--json", str(raw)],
                         cwd=ROOT, env=marked.env(), capture_output=True, text=True,
                         timeout=180, check=False)
    assert run.returncode == 0, run.stdout + run.stderr
    data = json.loads(raw.read_text())
    outcomes = {o["name"]: o for o in data["outcomes"]}
    assert set(outcomes) == {"client-unread", "ops-flood", "endless-arguments",
                             "endless-text"}, outcomes
    for name, outcome in outcomes.items():
        assert outcome["passed"] and all(outcome["checks"].values()), (name, outcome)
        assert 0 <= outcome["growthMiB"] <= outcome["boundMiB"], (name, outcome)
        assert outcome["checks"], name  # each scenario checks what its peer must get
