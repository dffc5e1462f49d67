"""A hook's matcher: a regular expression over tool names, matched in linear time.

Python's ``re`` backtracks: ``(.*.*.*)*Z`` against a 14-character tool name held the
runtime's loop for minutes, and the loop is every session's. So a matcher is
parsed by ``re``'s own parser (Python's syntax and error messages), and what can be
matched without backtracking is compiled into a small automaton simulated over a set of
states: time ``O(len(name) x states)``, states at most :data:`MAX_STATES`, whatever the
pattern. What needs backtracking (backreferences, lookaround, conditionals, atomic
groups and possessive repeats) or would be too large is refused at start-up, naming
the key, as a bad expression is. Whether a name matches is Python's ``re.fullmatch``
answer for every pattern accepted.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

_parser: Any = importlib.import_module("re._parser")  # re's own (sre_parse before 3.11)
_constants: Any = importlib.import_module("re._constants")

MAX_STATES = 1000
"""States of one matcher's automaton (a bounded repeat counts once per copy)."""
MAX_CACHED = 256
"""Tool names whose answer one matcher remembers."""


class MatcherError(ValueError):
    """A pattern that is not a regular expression, or not one matched in linear time."""


@dataclass(eq=False)
class _State:
    test: Callable[[str], bool] | None = None  # a character state
    at: Callable[[str, int], bool] | None = None  # a zero-width assertion
    out: list[_State] = field(default_factory=list)  # empty with no test and no at: match


_Char = Callable[[str], bool]


def _category(name: str) -> _Char:
    tests: dict[str, _Char] = {
        "CATEGORY_DIGIT": str.isdecimal,
        "CATEGORY_SPACE": str.isspace,
        "CATEGORY_WORD": lambda c: c.isalnum() or c == "_",
        "CATEGORY_LINEBREAK": lambda c: c == "\n",
    }
    if name in tests:
        return tests[name]
    positive = tests.get(name.replace("NOT_", "", 1))
    if positive is None:
        raise MatcherError(f"unsupported character category {name}")
    return lambda c: not positive(c)


def _equals(want: str) -> _Char:
    return lambda c: c == want


def _within(low: int, high: int) -> _Char:
    return lambda c: low <= ord(c) <= high


def _word_at(text: str, pos: int) -> bool:
    return 0 <= pos < len(text) and (text[pos].isalnum() or text[pos] == "_")


_AT: dict[str, Callable[[str, int], bool]] = {
    "AT_BEGINNING": lambda s, i: i == 0,
    "AT_BEGINNING_STRING": lambda s, i: i == 0,
    "AT_END": lambda s, i: i == len(s) or (i == len(s) - 1 and s[-1] == "\n"),
    "AT_END_STRING": lambda s, i: i == len(s),
    "AT_BOUNDARY": lambda s, i: _word_at(s, i - 1) != _word_at(s, i),
    "AT_NON_BOUNDARY": lambda s, i: _word_at(s, i - 1) == _word_at(s, i),
}


class _Builder:
    def __init__(self, flags: int) -> None:
        self.count = 0
        self.fold = bool(flags & _constants.SRE_FLAG_IGNORECASE)
        self.dotall = bool(flags & _constants.SRE_FLAG_DOTALL)

    def state(self, **kwargs: Any) -> _State:
        self.count += 1
        if self.count > MAX_STATES:
            raise MatcherError(f"too large to match in linear time (over {MAX_STATES} "
                               "states; a bounded repeat counts once per copy)")
        return _State(**kwargs)

    def char(self, test: _Char, then: _State) -> _State:
        return self.state(test=test, out=[then])

    def folded(self, test: _Char) -> _Char:
        """``test``, or under IGNORECASE, ``test`` of the character in any case."""
        if not self.fold:
            return test
        return lambda c: test(c) or test(c.lower()) or test(c.upper())

    def sequence(self, items: Any, then: _State) -> _State:
        for op, av in reversed(list(items)):
            then = self.item(op.name, av, then)
        return then

    def item(self, op: str, av: Any, then: _State) -> _State:
        if op == "LITERAL":
            return self.char(self.folded(_equals(chr(av))), then)
        if op == "NOT_LITERAL":
            same = self.folded(_equals(chr(av)))
            return self.char(lambda c: not same(c), then)
        if op == "ANY":
            return self.char((lambda c: True) if self.dotall else (lambda c: c != "\n"), then)
        if op == "IN":
            return self.char(self.charset(av), then)
        if op == "AT":
            return self.state(at=_AT[av.name], out=[then])
        if op == "BRANCH":
            return self.state(out=[self.sequence(alt, then) for alt in av[1]])
        if op == "SUBPATTERN":
            _group, add_flags, del_flags, pattern = av
            if add_flags or del_flags:
                raise MatcherError("flags scoped to a group are not supported")
            return self.sequence(pattern, then)
        if op in ("MAX_REPEAT", "MIN_REPEAT"):  # greedy or lazy: the same full match
            low, high, pattern = av
            return self.repeat(low, high, pattern, then)
        raise MatcherError(f"{op.lower().replace('_', ' ')} needs backtracking")

    def repeat(self, low: int, high: int, pattern: Any, then: _State) -> _State:
        if high == _constants.MAXREPEAT:
            loop = self.state()
            loop.out = [self.sequence(pattern, loop), then]
            start = loop
        else:
            start = then
            for _ in range(high - low):  # (x(x(x)?)?)?: any copy may be the last
                start = self.state(out=[self.sequence(pattern, start), then])
        for _ in range(low):
            start = self.sequence(pattern, start)
        return start

    def charset(self, items: Any) -> _Char:
        tests: list[_Char] = []
        negate = False
        for op, av in items:
            name = op.name
            if name == "NEGATE":
                negate = True
            elif name == "LITERAL":
                tests.append(_equals(chr(av)))
            elif name == "RANGE":
                tests.append(_within(av[0], av[1]))
            elif name == "CATEGORY":
                tests.append(_category(av.name))
            else:
                raise MatcherError(f"unsupported character set item {name}")
        member = self.folded(lambda c: any(t(c) for t in tests))
        return lambda c: member(c) != negate


class Matcher:
    """One hook's compiled matcher: :meth:`fullmatch` says whether a tool name matches."""

    def __init__(self, pattern: str) -> None:
        try:
            parsed = _parser.parse(pattern)
        except _constants.error as exc:
            raise MatcherError(f"not a regular expression: {exc}") from None
        if parsed.state.flags & _constants.SRE_FLAG_MULTILINE:
            raise MatcherError("the MULTILINE flag is not supported")
        builder = _Builder(parsed.state.flags)
        self.pattern = pattern
        self._start = builder.sequence(parsed, _State())
        self.states = builder.count
        self._cache: dict[str, bool] = {}

    def fullmatch(self, name: str) -> bool:
        known = self._cache.get(name)
        if known is None:
            known = self._run(name)
            if len(self._cache) >= MAX_CACHED:
                self._cache.clear()
            self._cache[name] = known
        return known

    def _run(self, name: str) -> bool:
        current = _closure([self._start], name, 0)
        for pos, char in enumerate(name):
            if not current:
                return False
            moved = [s.out[0] for s in current if s.test is not None and s.test(char)]
            current = _closure(moved, name, pos + 1)
        return any(s.test is None and s.at is None and not s.out for s in current)


def _closure(states: list[_State], text: str, pos: int) -> list[_State]:
    """The states reachable from ``states`` without reading a character: each once."""
    seen: set[int] = set()
    out: list[_State] = []
    stack = list(reversed(states))
    while stack:
        state = stack.pop()
        if id(state) in seen:
            continue
        seen.add(id(state))
        if state.test is not None:
            out.append(state)
        elif state.at is not None:
            if state.at(text, pos):
                stack.extend(reversed(state.out))
        elif not state.out:
            out.append(state)  # the match state
        else:
            stack.extend(reversed(state.out))
    return out
