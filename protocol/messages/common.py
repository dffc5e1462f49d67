"""Messages both links share: the handshake and shutdown."""

from __future__ import annotations

import shlex
from typing import Any, Literal

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


PluginServerState = Literal["running", "failed", "untrusted"]


class PluginServerStatus(Struct, frozen=True):
    """One plugin server of a session and what it runs: ``running`` (its tools listed:
    ``tools`` of them, named in ``toolNames``), ``failed`` (``error`` says why), or
    ``untrusted``: declared by the workspace's ``.quiesce/mcp.json`` whose content the
    user has not trusted, so never started (docs/plugins.md, "Workspace trust").
    ``command``, ``args`` and ``cwd`` are what it runs (or would run), in full; ``source``
    is where it was declared (``workspace``: the file; ``session``: ``session.new``).
    ``env``: the variables a workspace server's declaration sets, in full (they change
    what runs: a ``PATH`` picks the ``command``, a ``NODE_OPTIONS`` or ``LD_PRELOAD``
    loads code); empty for a session's servers (the client's own)."""

    name: str
    tools: int = 0
    error: str | None = None
    state: PluginServerState = "running"
    command: str = ""
    args: tuple[str, ...] = ()
    cwd: str = ""
    source: Literal["workspace", "session"] = "session"
    tool_names: tuple[str, ...] = ()
    env: dict[str, str] = msgspec.field(default_factory=dict)

    def shell_line(self) -> str:
        """What it runs, as a shell would take it: ``NAME=value ... command args``."""
        assignments = [f"{name}={shlex.quote(value)}" for name, value in self.env.items()]
        return " ".join([*assignments, shlex.join([self.command, *self.args])])
