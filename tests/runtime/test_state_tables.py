"""Every state table of the project answers a move it does not hold the same way: the
named ``InvalidTransition``; and docs/architecture.md draws them as they are."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from protocol.statetable import InvalidTransition, StateTable

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
from state_tables import state_tables  # noqa: E402

TABLES = [table for _, table in state_tables()]
MISSING = [(table, state, event) for table in TABLES for state in table.states()
           for event in table.events() if not table.allows(state, event)]


def test_the_project_has_its_four_tables() -> None:
    assert [t.name for t in TABLES] == ["the agent's phase", "the registry's call token",
                                        "a host call in the runtime", "a call in the host"]


@pytest.mark.parametrize(("table", "state", "event"), MISSING,
                         ids=[f"{t.name}:{s}:{e}" for t, s, e in MISSING])
def test_a_missing_move_raises_invalid_transition(table: StateTable[Any, Any], state: Any,
                                                  event: Any) -> None:
    with pytest.raises(InvalidTransition):
        table.next(state, event)


@pytest.mark.parametrize("table", TABLES, ids=[t.name for t in TABLES])
def test_every_state_is_reachable_from_the_initial_one(table: StateTable[Any, Any]) -> None:
    reached, frontier = {table.initial}, [table.initial]
    while frontier:
        state = frontier.pop()
        for (source, _), target in table.moves.items():
            if source == state and target not in reached:
                reached.add(target)
                frontier.append(target)
    assert reached == set(table.states())


def test_the_generated_doc_is_current() -> None:
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "gen_architecture_docs.py"),
                           "--check"], capture_output=True, text=True, cwd=ROOT, check=False)
    assert done.returncode == 0, done.stderr
