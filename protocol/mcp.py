"""The MCP (Model Context Protocol) messages the host's plugin client uses, sans-IO.

MCP over stdio is newline-delimited JSON-RPC 2.0, like quiesce's own links, so
the host speaks it with the same endpoint; these are its method tables and the
params/result Structs of the few methods it needs. Unlike quiesce's own types
they accept unknown fields: MCP is extensible, and a server's richer answer
(``title``, ``annotations``, ``outputSchema``, ``_meta``) must not be refused.

Also here: the rules of plugin server configuration (names, the
``{"mcpServers": {...}}`` file shape), shared by the runtime (a session's own
servers) and the host (the workspace file merged with them).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from typing import Any

import msgspec

from protocol.messages.common import McpServerConfig
from protocol.methods import Direction, MethodSpec

MCP_PROTOCOL_VERSION = "2025-06-18"
PLUGIN_PREFIX = "mcp__"
SERVER_NAME = re.compile(r"^[A-Za-z0-9_-]+$")
TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,128}$")


class _Lenient(msgspec.Struct, frozen=True, rename="camel", omit_defaults=True):
    """MCP types: camelCase, unknown fields ignored."""


class McpEmpty(_Lenient, frozen=True):
    pass


class Implementation(_Lenient, frozen=True):
    name: str
    version: str = ""


class McpInitializeParams(_Lenient, frozen=True):
    protocol_version: str
    capabilities: dict[str, Any]  # required on the wire, even empty
    client_info: Implementation


class McpInitializeResult(_Lenient, frozen=True):
    protocol_version: str
    capabilities: dict[str, Any] = msgspec.field(default_factory=dict)
    server_info: Implementation | None = None


class ListToolsParams(_Lenient, frozen=True):
    cursor: str | None = None


class McpTool(_Lenient, frozen=True):
    name: str
    description: str = ""
    input_schema: dict[str, Any] = msgspec.field(default_factory=dict)


class ListToolsResult(_Lenient, frozen=True):
    tools: tuple[McpTool, ...] = ()
    next_cursor: str | None = None


class RequestMeta(_Lenient, frozen=True):
    progress_token: str | int


class CallToolParams(_Lenient, frozen=True):
    name: str
    arguments: dict[str, Any]
    meta: RequestMeta | None = msgspec.field(default=None, name="_meta")


class CallToolResult(_Lenient, frozen=True):
    """``content`` blocks stay plain objects: the host summarises every kind it meets."""

    content: tuple[dict[str, Any], ...] = ()
    is_error: bool = False
    structured_content: dict[str, Any] | None = None


class CancelledParams(_Lenient, frozen=True):
    request_id: str | int
    reason: str | None = None


class ProgressParams(_Lenient, frozen=True):
    progress_token: str | int
    progress: float
    total: float | None = None
    message: str | None = None


class LoggingMessageParams(_Lenient, frozen=True):
    level: str = "info"
    data: Any = None
    logger: str | None = None


CLIENT_TO_SERVER = Direction("MCP client → server", [
    MethodSpec("initialize", McpInitializeParams, McpInitializeResult, "MCP handshake."),
    MethodSpec("notifications/initialized", McpEmpty, None, "The handshake is complete."),
    MethodSpec("ping", McpEmpty, McpEmpty, "Liveness; sent after a cancel to confirm it was read."),
    MethodSpec("tools/list", ListToolsParams, ListToolsResult, "One page of the server's tools."),
    MethodSpec("tools/call", CallToolParams, CallToolResult, "Call one tool."),
    MethodSpec("notifications/cancelled", CancelledParams, None, "Stop one request."),
])

SERVER_TO_CLIENT = Direction("MCP server → client", [
    MethodSpec("ping", McpEmpty, McpEmpty, "Liveness."),
    MethodSpec("notifications/progress", ProgressParams, None, "Progress of a request."),
    MethodSpec("notifications/message", LoggingMessageParams, None, "A log message."),
    MethodSpec("notifications/cancelled", CancelledParams, None, "The server gave up a request."),
    MethodSpec("notifications/tools/list_changed", McpEmpty, None, "The tool list changed."),
    MethodSpec("notifications/resources/list_changed", McpEmpty, None, "Ignored."),
    MethodSpec("notifications/prompts/list_changed", McpEmpty, None, "Ignored."),
])


def plugin_tool_name(server: str, tool: str) -> str:
    return f"{PLUGIN_PREFIX}{server}__{tool}"


class PluginConfigError(ValueError):
    """Plugin server configuration that cannot be used; the message says what and where."""


_file_decoder = msgspec.json.Decoder(dict[str, Any])


def check_servers(servers: Iterable[McpServerConfig], where: str) -> None:
    """Names are ``[A-Za-z0-9_-]+`` and unique; every server has a command; nothing that
    ``exec`` would refuse (a NUL byte, an environment name that is empty or holds ``=``)."""
    seen: set[str] = set()
    for server in servers:
        if not SERVER_NAME.fullmatch(server.name):
            raise PluginConfigError(f"{where}: server name {server.name!r} must match "
                                    "[A-Za-z0-9_-]+")
        if server.name in seen:
            raise PluginConfigError(f"{where}: server {server.name!r} is declared twice")
        if not server.command.strip():
            raise PluginConfigError(f"{where}: server {server.name!r} has no command")
        _check_exec_fields(server, f"{where}: server {server.name!r}")
        seen.add(server.name)


def _check_exec_fields(server: McpServerConfig, where: str) -> None:
    if "\x00" in server.command:
        raise PluginConfigError(f"{where}: command contains a NUL byte")
    for n, arg in enumerate(server.args):
        if "\x00" in arg:
            raise PluginConfigError(f"{where}: args[{n}] contains a NUL byte")
    for name, value in server.env.items():
        if not name or "=" in name or "\x00" in name:
            raise PluginConfigError(f"{where}: env name {name!r} must be non-empty, "
                                    "without '=' or NUL")
        if "\x00" in value:
            raise PluginConfigError(f"{where}: env[{name!r}] contains a NUL byte")


def parse_servers_file(data: bytes, where: str) -> tuple[McpServerConfig, ...]:
    """The common ``{"mcpServers": {"name": {"command", "args", "env"}}}`` shape."""
    try:
        document = _file_decoder.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise PluginConfigError(f"{where}: not a JSON object: {exc}") from None
    except RecursionError:  # nesting under the size limit, deep enough for the decoder
        raise PluginConfigError(f"{where}: not a JSON object: nesting too deep") from None
    section = document.get("mcpServers", {})
    if not isinstance(section, dict):
        raise PluginConfigError(f"{where}: mcpServers must be an object of servers by name")
    servers = []
    for name, entry in section.items():
        if not isinstance(entry, dict):
            raise PluginConfigError(f"{where}: mcpServers.{name} must be an object")
        try:
            servers.append(msgspec.convert({**entry, "name": name}, McpServerConfig))
        except msgspec.ValidationError as exc:
            raise PluginConfigError(f"{where}: mcpServers.{name}: {exc}") from None
    result = tuple(servers)
    check_servers(result, where)
    return result


def content_digest(data: bytes) -> str:
    """How trust names one content of a declaring file (``sha256:<hex>``)."""
    return "sha256:" + hashlib.sha256(data).hexdigest()


def merge_servers(workspace: Iterable[McpServerConfig],
                  session: Iterable[McpServerConfig]) -> tuple[McpServerConfig, ...]:
    """The workspace's servers, with the session's added or replacing them by name."""
    merged = {s.name: s for s in workspace}
    merged.update({s.name: s for s in session})
    return tuple(merged.values())
