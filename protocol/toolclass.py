"""Tool classes: what a stop does to a call depends on the class of its tool."""

from __future__ import annotations

import enum


class ToolClass(enum.StrEnum):
    READ_ONLY = "read-only"
    PROCESS = "process"
    MUTATING = "mutating"
    PLUGIN = "plugin"
    LOCAL = "local"  # runtime-local tools (e.g. Task); never cross to the host


TOOL_CLASSES: dict[str, ToolClass] = {
    "Read": ToolClass.READ_ONLY,
    "Glob": ToolClass.READ_ONLY,
    "Grep": ToolClass.READ_ONLY,
    "Write": ToolClass.MUTATING,
    "Edit": ToolClass.MUTATING,
    "Bash": ToolClass.PROCESS,
    "GenerateImages": ToolClass.PROCESS,
}


def tool_class(name: str) -> ToolClass:
    """The class of a host tool; ``mcp__*`` plugin tools are class plugin."""
    if name.startswith("mcp__"):
        return ToolClass.PLUGIN
    return TOOL_CLASSES.get(name, ToolClass.PLUGIN)
