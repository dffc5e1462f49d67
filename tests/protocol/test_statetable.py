"""The state-table helper: moves, the one answer to a missing move, and the renderings."""

from __future__ import annotations

import enum

import pytest

from protocol.statetable import InvalidTransition, StateTable, label


class Light(enum.Enum):
    OFF = "off"
    ON = "on"


TABLE: StateTable[Light, str] = StateTable(
    "a light", Light.OFF, {(Light.OFF, "press"): Light.ON, (Light.ON, "press"): Light.OFF,
                           (Light.ON, "tap"): Light.ON},
    doc="one switch", notes={(Light.ON, "tap"): "a tap changes nothing"})


def test_a_move_in_the_table_gives_its_target() -> None:
    assert TABLE.next(Light.OFF, "press") is Light.ON
    assert TABLE.next(Light.ON, "tap") is Light.ON
    assert TABLE.allows(Light.ON, "tap") and not TABLE.allows(Light.OFF, "tap")


def test_a_missing_move_raises_the_named_error() -> None:
    with pytest.raises(InvalidTransition) as raised:
        TABLE.next(Light.OFF, "tap")
    error = raised.value
    assert (error.table, error.state, error.event) == ("a light", Light.OFF, "tap")
    assert str(error) == "a light: tap is not allowed in off"
    assert isinstance(error, RuntimeError)


def test_states_and_events_in_order_of_first_appearance() -> None:
    assert TABLE.states() == [Light.OFF, Light.ON]
    assert TABLE.events() == ["press", "tap"]
    assert label(Light.ON) == "on" and label("x") == "x"


def test_markdown_lists_every_move_with_its_note() -> None:
    text = TABLE.to_markdown()
    assert text.startswith("**a light**: one switch\n")
    assert "| `off` | `press` | `on` |  |" in text
    assert "| `on` | `tap` | `on` | a tap changes nothing |" in text
    assert text.count("\n| `") == len(TABLE.moves)


def test_mermaid_draws_the_initial_state_and_every_move() -> None:
    text = TABLE.to_mermaid()
    assert text.splitlines() == [
        "stateDiagram-v2", "    s0 : off", "    s1 : on", "    [*] --> s0",
        "    s0 --> s1 : press", "    s1 --> s0 : press", "    s1 --> s1 : tap"]
