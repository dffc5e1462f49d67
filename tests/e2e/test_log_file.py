"""``quiesce serve --log-file`` and ``quiesce acp --log-file``: the daemon's log, and its
host's, go to the file (appended), not to stderr."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import pytest

from tests.conftest import Marked


@pytest.mark.parametrize("command", ["serve", "acp"])
def test_the_log_goes_to_the_file(tmp_path: pathlib.Path, marked: Marked, command: str) -> None:
    log = tmp_path / "logs" / "daemon.log"
    log.parent.mkdir()
    log.write_text('{"earlier": "kept"}\n')
    done = subprocess.run([sys.executable, "-m", "runtime", command, "--log-file", str(log)],
                          stdin=subprocess.DEVNULL, capture_output=True, env=marked.env(),
                          timeout=60, check=False)
    assert done.returncode == 0, done.stderr.decode()
    assert done.stderr == b"" and done.stdout == b""
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert lines[0] == {"earlier": "kept"}  # appended
    procs = {line.get("proc") for line in lines[1:]}
    assert {"runtime", "host"} <= procs, lines


def test_a_log_file_that_cannot_be_opened_is_named(tmp_path: pathlib.Path,
                                                   marked: Marked) -> None:
    missing = tmp_path / "no-such-dir" / "daemon.log"
    done = subprocess.run([sys.executable, "-m", "runtime", "serve", "--log-file",
                           str(missing)], stdin=subprocess.DEVNULL, capture_output=True,
                          env=marked.env(), timeout=60, check=False)
    assert done.returncode == 2
    assert str(missing) in done.stderr.decode()
