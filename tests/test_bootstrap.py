"""``./scripts/demo`` installs only what the demo needs; ``./scripts/check`` (``bootstrap``
without an argument) the development set. Run against a copy of the scripts whose ``.venv``
Python is a stand-in that records what pip was asked to install."""

from __future__ import annotations

import os
import pathlib
import shutil
import stat
import subprocess

ROOT = pathlib.Path(__file__).resolve().parent.parent
STAND_IN = """#!/bin/sh
# Records each "python -m pip install ..." and does nothing else.
if [ "$1 $2 $3" = "-m pip install" ]; then echo "$@" >> "$(dirname "$0")/../pip.log"; fi
exit 0
"""


def _copy(tmp: pathlib.Path) -> pathlib.Path:
    root = tmp / "repo"
    (root / "scripts").mkdir(parents=True)
    for name in ("bootstrap", "demo"):
        shutil.copy2(ROOT / "scripts" / name, root / "scripts" / name)
    shutil.copy2(ROOT / "pyproject.toml", root / "pyproject.toml")
    bin_dir = root / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    for name, body in (("python", STAND_IN), ("quiesce", '#!/bin/sh\necho "demo ran: $@"\n')):
        (bin_dir / name).write_text(body)
        (bin_dir / name).chmod(stat.S_IRWXU)
    return root


def _installs(root: pathlib.Path) -> list[str]:
    log = root / ".venv" / "pip.log"
    lines = log.read_text().splitlines() if log.exists() else []
    return [line.split()[-1] for line in lines if "--upgrade pip" not in line]


def _run(*command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, capture_output=True, text=True, timeout=60, check=False,
                          env={**os.environ, "PATH": os.environ.get("PATH", "")})


def test_the_demo_installs_quiesce_alone_and_check_adds_the_dev_set(
        tmp_path: pathlib.Path) -> None:
    root = _copy(tmp_path)
    demo = _run(str(root / "scripts" / "demo"), "--keep")
    assert demo.returncode == 0, demo.stderr
    assert demo.stdout.strip() == "demo ran: demo --keep"
    assert _installs(root) == [str(root)]  # no extras: not the development set
    assert "./scripts/check adds the development set" in demo.stderr

    again = _run(str(root / "scripts" / "demo"))  # installed: nothing more
    assert again.returncode == 0 and _installs(root) == [str(root)]

    dev = _run(str(root / "scripts" / "bootstrap"))  # what ./scripts/check runs first
    assert dev.returncode == 0, dev.stderr
    assert _installs(root) == [str(root), f"{root}[dev]"]
    after = _run(str(root / "scripts" / "demo"))  # a dev .venv serves the demo as it is
    assert after.returncode == 0 and _installs(root) == [str(root), f"{root}[dev]"]
    assert _run(str(root / "scripts" / "bootstrap")).returncode == 0
    assert _installs(root) == [str(root), f"{root}[dev]"]


def test_a_stamp_of_before_the_two_sets_counts_as_the_dev_set(tmp_path: pathlib.Path) -> None:
    root = _copy(tmp_path)
    digest = subprocess.run(["sha256sum", str(root / "pyproject.toml")], capture_output=True,
                            text=True, check=True).stdout.split()[0]
    (root / ".venv" / ".quiesce-installed").write_text(digest + "\n")
    for command in ("bootstrap", "demo"):
        assert _run(str(root / "scripts" / command)).returncode == 0
    assert _installs(root) == []
