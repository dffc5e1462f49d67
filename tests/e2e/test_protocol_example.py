"""docs/protocol.md's example exchange is a real one: captured again, it is the same."""

from __future__ import annotations

import pathlib
import subprocess
import sys

from tests.conftest import Marked
from tests.support import marked_processes

ROOT = pathlib.Path(__file__).resolve().parents[2]
CAPTURE = ROOT / "scripts" / "capture_protocol_example.py"


def test_the_documented_exchange_is_what_quiesce_serve_says(marked: Marked) -> None:
    done = subprocess.run([sys.executable, str(CAPTURE), "--check"], env=marked.env(),
                          cwd=ROOT, capture_output=True, text=True, timeout=90, check=False)
    assert done.returncode == 0, done.stderr
    assert marked_processes(marked.mark) == []
