"""Messages both links share: the handshake and shutdown."""

from __future__ import annotations

from typing import Any

import msgspec


class Struct(msgspec.Struct, frozen=True, forbid_unknown_fields=True, rename="camel",
             omit_defaults=True):
    """Base of every params/result type: frozen, strict, camelCase on the wire."""


class Empty(Struct, frozen=True):
    """No parameters, or an empty result."""


class PeerInfo(Struct, frozen=True):
    name: str
    version: str = ""


class InitializeParams(Struct, frozen=True):
    protocol_version: str
    client_info: PeerInfo | None = None


class InitializeResult(Struct, frozen=True):
    protocol_version: str
    server_info: PeerInfo
    capabilities: dict[str, Any] = msgspec.field(default_factory=dict)


class McpServerConfig(Struct, frozen=True):
    """An MCP server the host starts over stdio; its tools become the session's plugin
    tools, named ``mcp__<name>__<tool>``."""

    name: str
    command: str
    args: tuple[str, ...] = ()
    env: dict[str, str] = msgspec.field(default_factory=dict)


class PluginServerStatus(Struct, frozen=True):
    """One plugin server of a session: how many tools it lists, or why it could not start."""

    name: str
    tools: int = 0
    error: str | None = None
