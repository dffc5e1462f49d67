"""protocol.ids: every id the runtime formats parses back to what it was made of, for any
call id a provider may send (dots, tildes and percent signs included)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from protocol import ids

call_ids = st.text()
# A turn: a top-level turn, then any chain of Task calls down to a child turn.
turn_chains = st.tuples(st.integers(min_value=1, max_value=10**6), st.lists(call_ids, max_size=4))


def build(chain: tuple[int, list[str]]) -> list[str]:
    """Every turn id along the chain, from the top-level turn down."""
    n, task_calls = chain
    turns = [ids.top_turn_id(n)]
    for task_call in task_calls:
        turns.append(ids.child_turn_id(turns[-1], task_call))
    return turns


@given(turn_chains, call_ids)
def test_a_host_call_id_splits_into_its_turn_and_call(chain: tuple[int, list[str]],
                                                       call_id: str) -> None:
    for turn_id in build(chain):
        assert HOST_DOT not in turn_id
        assert ids.split_host_call_id(ids.host_call_id(turn_id, call_id)) == (turn_id, call_id)


HOST_DOT = ids.HOST_CALL_SEPARATOR


@given(turn_chains)
def test_a_child_turn_id_names_its_parent_its_task_call_and_its_root(
        chain: tuple[int, list[str]]) -> None:
    turns = build(chain)
    root = turns[0]
    assert not ids.is_child_turn(root)
    assert ids.parent_turn_id(root) is None and ids.task_call_id(root) is None
    assert ids.top_turn_number(root) == chain[0]
    for depth, turn_id in enumerate(turns[1:], start=1):
        assert ids.is_child_turn(turn_id)
        assert ids.root_turn_id(turn_id) == root
        assert ids.top_turn_number(turn_id) is None
        assert ids.parent_turn_id(turn_id) == turns[depth - 1]
        assert ids.task_call_id(turn_id) == chain[1][depth - 1]
        assert all(ids.is_within(turn_id, above) for above in turns[:depth + 1])


@given(turn_chains, call_ids, call_ids)
def test_sibling_child_turns_are_never_within_each_other(chain: tuple[int, list[str]],
                                                         a: str, b: str) -> None:
    parent = build(chain)[-1]
    if a != b:
        assert not ids.is_within(ids.child_turn_id(parent, a), ids.child_turn_id(parent, b))


def test_an_ordinary_call_id_reads_unchanged_in_a_child_turn_id() -> None:
    assert ids.child_turn_id("t3", "call_Ab-9") == "t3~call_Ab-9"
    assert ids.host_call_id("t3~call_Ab-9", "toolu_01") == "t3~call_Ab-9.toolu_01"


def test_a_call_outside_any_turn_has_no_turn() -> None:
    assert ids.split_host_call_id(ids.debug_call_id(4)) == (None, "dbg-4")


def test_a_dotted_task_call_id_does_not_leak_into_the_host_call_split() -> None:
    child = ids.child_turn_id("t1", "fn.read")
    assert ids.split_host_call_id(ids.host_call_id(child, "x.y")) == (child, "x.y")
