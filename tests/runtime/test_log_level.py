"""QUIESCE_LOG_LEVEL as docs/configuration.md describes it."""

from __future__ import annotations

import json
import os
import subprocess
import sys

PROGRAM = ("import logging; from runtime.link.logs import setup_logging; "
           "setup_logging('runtime'); "
           "logging.getLogger('t').info('an info line'); "
           "logging.getLogger('t').warning('a warning line')")


def _lines(level: str) -> list[dict[str, object]]:
    done = subprocess.run([sys.executable, "-c", PROGRAM], capture_output=True, text=True,
                          env={**os.environ, "QUIESCE_LOG_LEVEL": level}, timeout=30,
                          check=True)
    assert done.stdout == ""  # logs never go to stdout
    return [json.loads(line) for line in done.stderr.splitlines()]


def test_the_level_is_any_case_and_a_bad_one_is_said_and_info_used() -> None:
    assert [line["msg"] for line in _lines("warning")] == ["a warning line"]
    assert [line["msg"] for line in _lines("Info")] == ["an info line", "a warning line"]
    bad = _lines("loud")
    assert "QUIESCE_LOG_LEVEL=LOUD is not one of" in str(bad[0]["msg"])
    assert [line["msg"] for line in bad[1:]] == ["an info line", "a warning line"]
