"""Hook matchers: Python's answer (``re.fullmatch``) for every accepted pattern, in linear
time; what needs backtracking refused (issue 31 item 8)."""

from __future__ import annotations

import re
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runtime.agent.hooks.matcher import MAX_STATES, Matcher, MatcherError

PATTERNS = [
    "Bash", "Write|Edit", "mcp__.*", "(Read|Glob|Grep)", "B.sh", "[A-Z][a-z]+",
    "[^B].*", "mcp__[a-z0-9_-]+__(read|write)_.*", r"\w+", r"\d{2,3}x?", "a{3}", "a{0,2}b",
    "(ab)*", "(a|b)*c", "(a*)*", "(.*.*.*)*Z", "(?i)bash", "(?i)[^a]x", "^Bash$", r"\bBash",
    "Ba(?:sh|d)", "x*?y+?", r"[\s\S]", "(a|)+b", r"\Aab\Z", "a.c", "[a-c-]+",
]
NAMES = st.text(alphabet="abcABCxyzZ_-019 BashRdGlopWrite", max_size=24)


@given(NAMES)
@settings(max_examples=300, deadline=None)
def test_every_pattern_answers_as_python_re(name: str) -> None:
    for pattern in PATTERNS:
        expected = re.fullmatch(pattern, name) is not None if pattern != "(.*.*.*)*Z" else (
            name.endswith("Z"))  # Python's own answer would take minutes
        assert Matcher(pattern).fullmatch(name) is expected, (pattern, name)


def test_a_catastrophic_pattern_is_matched_in_linear_time() -> None:
    matcher = Matcher("(.*.*.*)*Z")
    started = time.perf_counter()
    assert not matcher.fullmatch("a" * 256)
    assert not matcher.fullmatch("GenerateImages")
    assert time.perf_counter() - started < 0.5


@pytest.mark.parametrize("pattern", [r"(a)\1", "(?=a)a", "(?!b)a", "(?<=a)b", "(a)?(?(1)b|c)",
                                     "(?>a+)b", "a++", "(?i:a)b", "(a", "a{2000}", "(a{40}){40}"])
def test_patterns_that_need_backtracking_or_are_too_large_are_refused(pattern: str) -> None:
    with pytest.raises(MatcherError):
        Matcher(pattern)


def test_state_bound_is_documented_size() -> None:
    assert Matcher(f"a{{{MAX_STATES - 1}}}").states < MAX_STATES
