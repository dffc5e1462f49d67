"""Every built-in tool's specification is complete, and what it states is true."""

from __future__ import annotations

from typing import Any

import pytest

import host.tools.glob
import host.tools.grep
import host.tools.read
from host.tools import TOOLS
from host.tools.context import HostToolConfig
from protocol import tools
from protocol.toolclass import TOOL_CLASSES
from protocol.toolspecs import TOOL_SPECS

BUILT_IN = {"Read", "Write", "Edit", "Bash", "Glob", "Grep", "Task", "GenerateImages"}


def test_every_built_in_tool_has_a_spec() -> None:
    assert set(TOOL_SPECS) == BUILT_IN
    assert set(tools.TOOL_ARGS) | {"Task"} == BUILT_IN == set(TOOLS) | {"Task"}
    for name, spec in TOOL_SPECS.items():
        assert spec.args_type is (tools.TaskArgs if name == "Task" else tools.TOOL_ARGS[name])
        if name != "Task":
            assert spec.tool_class is TOOL_CLASSES[name]


@pytest.mark.parametrize("name", sorted(BUILT_IN))
def test_a_spec_is_complete(name: str) -> None:
    spec = TOOL_SPECS[name]
    words = spec.description.split()
    assert len(words) >= 60, f"{name}: a description of {len(words)} words says too little"
    assert "stop" in spec.description, f"{name}: the description must say what a stop does"
    schema = spec.input_schema()
    assert schema["type"] == "object" and schema["additionalProperties"] is False
    assert "$defs" not in schema and "title" not in schema
    properties: dict[str, Any] = schema["properties"]
    assert properties
    for param, prop in properties.items():
        assert len(prop.get("description", "")) >= 20, f"{name}.{param} is not described"
        assert "type" in prop, f"{name}.{param} has no plain type: {prop}"
        assert param in schema.get("required", []) or "anyOf" not in prop


def test_the_stated_limits_are_the_hosts() -> None:
    config = HostToolConfig()
    assert config.bash_default_timeout_ms == tools.BASH_DEFAULT_TIMEOUT_MS
    assert config.max_output_bytes == tools.OUTPUT_MAX_BYTES
    assert config.read_max_bytes == tools.READ_MAX_BYTES
    assert host.tools.read.DEFAULT_LIMIT == tools.READ_DEFAULT_LINES
    assert host.tools.read.MAX_LINE_CHARS == tools.READ_MAX_LINE_CHARS
    assert host.tools.glob.MAX_RESULTS == tools.LIST_MAX_RESULTS
    assert host.tools.grep.MAX_MATCHES == tools.LIST_MAX_RESULTS
    bash = TOOL_SPECS["Bash"].input_schema()["properties"]["timeoutMs"]
    assert (bash["minimum"], bash["maximum"]) == (1, tools.BASH_MAX_TIMEOUT_MS)
    assert f"{tools.BASH_DEFAULT_TIMEOUT_MS // 1000} s" in TOOL_SPECS["Bash"].description
    assert f"{tools.BASH_MAX_TIMEOUT_MS // 60000} min" in TOOL_SPECS["Bash"].description


def test_the_providers_get_the_specs() -> None:
    from runtime.agent.hosttools import HostTools
    from runtime.agent.task import TaskTool
    from runtime.agent.turn import tool_schemas

    async def never(*_: object) -> Any:
        raise AssertionError

    host_tools = HostTools(None, "s", "t", on_progress=lambda *_: None,  # type: ignore[arg-type]
                           on_abort=lambda *_: None)
    definitions = [*host_tools.definitions(), TaskTool("t", never).definition()]
    given = {s.name: s for s in tool_schemas(definitions)}
    assert set(given) == BUILT_IN
    for name, spec in TOOL_SPECS.items():
        assert given[name].description == spec.description
        assert given[name].parameters == spec.input_schema()
