"""The type checker proves the signal contract (one strict mypy run over a case file).

Each ``# E: text`` line of ``tests/typing_cases/registry_views.py`` must get an
error containing ``text``; each ``# OK`` line and every other line must get none.
"""

from __future__ import annotations

import re
from pathlib import Path

import mypy.api

ROOT = Path(__file__).resolve().parents[2]
CASES = ROOT / "tests" / "typing_cases" / "registry_views.py"
MARK = re.compile(r"#\s*(E:\s*(?P<expect>.+?)|OK)\s*$")
ERROR = re.compile(r"^(?P<path>[^:]+):(?P<line>\d+): error: (?P<message>.*)$")


def expectations() -> tuple[dict[int, str], set[int]]:
    errors: dict[int, str] = {}
    ok: set[int] = set()
    for number, line in enumerate(CASES.read_text().splitlines(), start=1):
        found = MARK.search(line)
        if found is None or line.lstrip().startswith("#"):
            continue
        if found.group("expect") is not None:
            errors[number] = found.group("expect").strip()
        else:
            ok.add(number)
    return errors, ok


def test_mypy_enforces_the_signal_contract() -> None:
    expected, ok = expectations()
    assert len(expected) >= 20 and len(ok) >= 7  # the case file was not emptied
    stdout, stderr, _status = mypy.api.run(
        [str(CASES), "--config-file", str(ROOT / "pyproject.toml"), "--no-error-summary",
         "--hide-error-context", "--no-pretty"]
    )
    assert not stderr, stderr
    got: dict[int, list[str]] = {}
    for line in stdout.splitlines():
        found = ERROR.match(line)
        if found is not None and Path(found.group("path")).name == CASES.name:
            got.setdefault(int(found.group("line")), []).append(found.group("message"))
        elif found is not None:
            raise AssertionError(f"mypy error outside the case file: {line}")
    for number, text in expected.items():
        messages = got.get(number, [])
        assert any(text in m for m in messages), (
            f"line {number}: expected an error containing {text!r}, got {messages}")
    unexpected = {n: m for n, m in got.items() if n not in expected}
    assert not unexpected, f"unexpected mypy errors: {unexpected}"
    assert not ok & set(got), "a line marked OK was rejected"
