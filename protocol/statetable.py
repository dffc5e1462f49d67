"""A state table: every allowed ``(state, event) -> state`` move of one lifecycle, sans-IO.

The project's lifecycles (the agent's phase, a host call in the runtime, a call in the
host, the registry's call token) each declare one ``StateTable``; their objects move only
by ``StateTable.next``, and a move the table does not hold is answered one way, by raising
``InvalidTransition`` (a bug in the caller: it fired an event its state does not take).
A caller that may meet an event more than once (a second stop of a call) asks
``allows`` first, or the table says so with a move to the same state.

A table renders itself for the docs: ``to_markdown()`` (a table of its moves) and
``to_mermaid()`` (a ``stateDiagram-v2``); ``scripts/gen_architecture_docs.py`` draws every
table of the project in docs/architecture.md.
"""

from __future__ import annotations

import enum
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from typing import Generic, TypeVar

S = TypeVar("S", bound=Hashable)
E = TypeVar("E", bound=Hashable)


def label(value: object) -> str:
    """How a state or an event is written: an enum by its value, anything else as text."""
    return str(value.value) if isinstance(value, enum.Enum) else str(value)


class InvalidTransition(RuntimeError):
    """An event fired in a state its table has no move for."""

    def __init__(self, table: str, state: object, event: object) -> None:
        super().__init__(f"{table}: {label(event)} is not allowed in {label(state)}")
        self.table = table
        self.state = state
        self.event = event


@dataclass(frozen=True)
class StateTable(Generic[S, E]):
    """One lifecycle's moves; ``initial`` is where its objects start."""

    name: str
    initial: S
    moves: Mapping[tuple[S, E], S]
    doc: str = ""
    """One line for the docs: what an object of this table is."""
    notes: Mapping[tuple[S, E], str] = field(default_factory=dict)
    """Why a move exists, where the table alone does not say (drawn in the docs)."""

    def next(self, state: S, event: E) -> S:
        """The state ``event`` moves ``state`` to; ``InvalidTransition`` if it has no move."""
        target = self.moves.get((state, event))
        if target is None:
            raise InvalidTransition(self.name, state, event)
        return target

    def allows(self, state: S, event: E) -> bool:
        return (state, event) in self.moves

    def states(self) -> list[S]:
        """Every state, in order of first appearance (the initial one first)."""
        seen: dict[S, None] = {self.initial: None}
        for (state, _), target in self.moves.items():
            seen.setdefault(state)
            seen.setdefault(target)
        return list(seen)

    def events(self) -> list[E]:
        seen: dict[E, None] = {}
        for _, event in self.moves:
            seen.setdefault(event)
        return list(seen)

    def to_markdown(self) -> str:
        """The table's moves as a Markdown table (state, event, next state, why)."""
        lines = [f"**{self.name}**" + (f": {self.doc}" if self.doc else ""), "",
                 "| state | event | next state | note |", "|---|---|---|---|"]
        for (state, event), target in self.moves.items():
            note = self.notes.get((state, event), "")
            lines.append(f"| `{label(state)}` | `{label(event)}` | `{label(target)}` | {note} |")
        return "\n".join(lines) + "\n"

    def to_mermaid(self) -> str:
        """The table as a Mermaid ``stateDiagram-v2`` (states named by their labels)."""
        names = {state: f"s{index}" for index, state in enumerate(self.states())}
        lines = ["stateDiagram-v2"]
        lines += [f"    {names[state]} : {label(state)}" for state in names]
        lines.append(f"    [*] --> {names[self.initial]}")
        lines += [f"    {names[state]} --> {names[target]} : {label(event)}"
                  for (state, event), target in self.moves.items()]
        return "\n".join(lines) + "\n"
