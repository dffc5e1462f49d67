"""Plugin configuration rules and plugin tool definitions (no processes)."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from protocol.mcp import (
    PluginConfigError,
    check_servers,
    merge_servers,
    parse_servers_file,
    plugin_tool_name,
)
from protocol.messages.common import McpServerConfig
from protocol.messages.host import PluginTool, ToolsAbortResult
from protocol.toolclass import ToolClass, tool_class
from runtime.agent.hosttools import HostTools
from runtime.agent.registry import JsonObjectArgs
from runtime.agent.turn import tool_schemas


def test_the_common_file_shape() -> None:
    servers = parse_servers_file(b'{"mcpServers": {"git": {"command": "uvx", '
                                 b'"args": ["mcp-server-git"], "env": {"A": "1"}}}}', "f")
    assert servers == (McpServerConfig("git", "uvx", ("mcp-server-git",), {"A": "1"}),)
    assert parse_servers_file(b"{}", "f") == ()


@pytest.mark.parametrize(("data", "message"), [
    (b"[]", "f: not a JSON object"),
    (b'{"mcpServers": {"a": "cmd"}}', "mcpServers.a must be an object"),
    (b'{"mcpServers": {"a": {"command": 3}}}', "mcpServers.a: Expected `str`"),
    (b'{"mcpServers": {"a": {"command": "x", "env": {"K": 1}}}}', "mcpServers.a"),
    (b'{"mcpServers": {"": {"command": "x"}}}', "must match"),
])
def test_bad_files_say_what_and_where(data: bytes, message: str) -> None:
    with pytest.raises(PluginConfigError, match=message.replace("[", r"\[")):
        parse_servers_file(data, "f")


@pytest.mark.parametrize(("server", "message"), [
    (McpServerConfig("a", "x\x00"), "s: server 'a': command contains a NUL byte"),
    (McpServerConfig("a", "x", ("-v", "\x00")), "s: server 'a': args[1] contains a NUL byte"),
    (McpServerConfig("a", "x", (), {"K=V": "1"}), "s: server 'a': env name 'K=V' must be"),
    (McpServerConfig("a", "x", (), {"": "1"}), "s: server 'a': env name '' must be"),
    (McpServerConfig("a", "x", (), {"K\x00": "1"}), "s: server 'a': env name 'K\\x00'"),
    (McpServerConfig("a", "x", (), {"K": "\x00"}), "s: server 'a': env['K'] contains a NUL"),
])
def test_what_exec_would_refuse_is_a_config_error(server: McpServerConfig,
                                                   message: str) -> None:
    with pytest.raises(PluginConfigError) as refused:
        check_servers([server], "s")
    assert str(refused.value).startswith(message), str(refused.value)
    check_servers([McpServerConfig("a", "x", ("-v", ""), {"K": "", "L": "a=b"})], "s")


def test_names_and_merge() -> None:
    with pytest.raises(PluginConfigError, match="declared twice"):
        check_servers([McpServerConfig("a", "x"), McpServerConfig("a", "y")], "s")
    merged = merge_servers([McpServerConfig("a", "x"), McpServerConfig("b", "x")],
                           [McpServerConfig("b", "y"), McpServerConfig("c", "z")])
    assert [(s.name, s.command) for s in merged] == [("a", "x"), ("b", "y"), ("c", "z")]
    assert plugin_tool_name("git", "log") == "mcp__git__log"
    assert tool_class("mcp__git__log") is ToolClass.PLUGIN


def test_free_form_arguments_are_frozen_json_objects() -> None:
    args = JsonObjectArgs.materialize({"a": [1, {"b": None}]})
    assert args.value() == {"a": [1, {"b": None}]}
    assert JsonObjectArgs.materialize('{"x": 1}').value() == {"x": 1}
    for bad in ([1, 2], "3", b"[]"):
        with pytest.raises(msgspec.ValidationError, match="Expected `object`"):
            JsonObjectArgs.materialize(bad)
    with pytest.raises(msgspec.DecodeError):
        JsonObjectArgs.materialize("{not json")


class _NoHost:
    async def request(self, method: str, params: msgspec.Struct) -> Any:
        raise AssertionError

    async def request_if_alive(self, method: str, params: msgspec.Struct) -> Any:
        raise AssertionError

    async def ready(self) -> None:
        raise AssertionError

    def start_soon(self, fn: object) -> None:
        raise AssertionError

    restarted = False

    async def wait_host_gone(self) -> bool:
        raise AssertionError

    async def end_call_processes(self, session_id: str, host_call_id: str) -> str | None:
        raise AssertionError


def test_the_model_is_offered_each_plugin_tool_with_its_server_schema() -> None:
    schema = {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}

    def ignore(call_id: str, tool: str, answer: ToolsAbortResult) -> None:
        pass

    tools = HostTools(_NoHost(), "s", "t1", on_progress=lambda *a: None, on_abort=ignore,
                      plugin_tools=(PluginTool("mcp__web__search", "web", "Search the web",
                                               schema),))
    definitions = tools.definitions()
    plugin = definitions[-1]
    assert plugin.name == "mcp__web__search" and plugin.tool_class is ToolClass.PLUGIN
    assert plugin.exclusive  # not read-only: a barrier in the scheduler
    schemas = {s.name: s for s in tool_schemas(definitions)}
    assert schemas["mcp__web__search"].parameters == schema
    assert schemas["mcp__web__search"].description == "Search the web"
    assert schemas["Read"].parameters["required"] == ["path"]  # built-ins unchanged
