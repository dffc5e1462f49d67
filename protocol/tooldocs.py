"""The built-in tools' section of ``docs/protocol.md``, rendered from their specifications.

What a model is told (:mod:`protocol.toolspecs`) is what the reference shows: each
tool's class, its description, and its parameters from the same JSON schema the
providers send.
"""

from __future__ import annotations

import json
from typing import Any

from protocol.toolspecs import TOOL_SPECS


def _type(prop: dict[str, Any]) -> str:
    kind = prop.get("type", "any")
    bounds = [f"{op} {prop[key]}" for key, op in (("minimum", "≥"), ("maximum", "≤"))
              if key in prop]
    if "pattern" in prop:
        bounds.append(f"pattern `{prop['pattern']}`")
    return f"{kind} ({', '.join(bounds)})" if bounds else str(kind)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def tool_sections() -> list[str]:
    out = ["## Built-in tools", "",
           "What a model is given for each built-in tool: the description and the JSON schema "
           "of its arguments, both generated from `protocol/toolspecs.py` and "
           "`protocol/tools.py`. The class decides what a stop does to a call "
           "(see docs/architecture.md). Task runs in the runtime; the others in the host.", "",
           "| tool | class | arguments |", "|---|---|---|"]
    for spec in TOOL_SPECS.values():
        schema = spec.input_schema()
        required = set(schema.get("required", ()))
        args = ", ".join(f"`{name}`" + ("" if name in required else "?")
                         for name in schema.get("properties", {}))
        out.append(f"| {spec.name} | {spec.tool_class.value} | {args} |")
    out.append("")
    for spec in TOOL_SPECS.values():
        schema = spec.input_schema()
        required = set(schema.get("required", ()))
        out += [f"### {spec.name} ({spec.tool_class.value})", "", spec.description, "",
                "| parameter | type | | description |", "|---|---|---|---|"]
        for name, prop in schema.get("properties", {}).items():
            default = ("required" if name in required else
                       f"default `{json.dumps(prop['default'])}`" if "default" in prop
                       else "optional")
            out.append(f"| `{name}` | {_type(prop)} | {default} | "
                       f"{_cell(prop.get('description', ''))} |")
        out.append("")
    return out
