"""The project's state tables (``protocol/statetable.py``), each with the module that
declares it, drawn for docs/architecture.md's generated ``state tables`` section
(``scripts/gen_architecture_docs.py``)."""

from __future__ import annotations

from typing import Any

from host import calls
from protocol.statetable import StateTable
from runtime.agent import hostcall, phase
from runtime.agent.registry import pipeline


def state_tables() -> list[tuple[str, StateTable[Any, Any]]]:
    """The project's tables, each with the module that declares it."""
    return [("runtime/agent/phase.py", phase.TABLE),
            ("runtime/agent/registry/pipeline.py", pipeline.TABLE),
            ("runtime/agent/hostcall.py", hostcall.TABLE),
            ("host/calls.py", calls.TABLE)]


def render() -> str:
    """Every table: a heading, its diagram (Mermaid) and its moves (a Markdown table)."""
    return "\n\n".join(
        f"### {table.name} (`{module}`)\n\n```mermaid\n{table.to_mermaid()}```\n\n"
        f"{table.to_markdown().rstrip()}"
        for module, table in state_tables())
