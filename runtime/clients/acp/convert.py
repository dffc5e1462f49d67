"""ACP input as native input: a prompt's content blocks as text, MCP servers as configs."""

from __future__ import annotations

from typing import Any

import msgspec

from protocol.errors import ErrorCode, RpcError
from protocol.messages.common import McpServerConfig
from runtime.clients.acp.messages import (
    ContentBlock,
    McpServerStdio,
    ResourceBlock,
    ResourceLinkBlock,
    TextBlock,
)


def prompt_text(blocks: tuple[ContentBlock, ...]) -> str:
    parts: list[str] = []
    for block in blocks:
        if isinstance(block, TextBlock):
            parts.append(block.text)
        elif isinstance(block, ResourceLinkBlock):
            parts.append(f"[{block.name or block.uri}]({block.uri})")
        elif isinstance(block, ResourceBlock) and block.resource.text is not None:
            parts.append(f'<context uri="{block.resource.uri}">\n{block.resource.text}\n'
                         "</context>")
        elif isinstance(block, ResourceBlock):
            parts.append(f"[{block.resource.uri}]({block.resource.uri})")
        else:  # image, audio: not declared in promptCapabilities
            raise RpcError(ErrorCode.INVALID_PARAMS,
                           f"{type(block).__name__} prompts are not supported")
    return "\n\n".join(parts)


def mcp_servers(servers: tuple[dict[str, Any], ...]) -> tuple[McpServerConfig, ...]:
    configs = []
    for server in servers:
        kind = server.get("type", "stdio")
        if kind != "stdio":
            raise RpcError(ErrorCode.INVALID_PARAMS,
                           f"MCP server {server.get('name')!r}: only stdio servers are "
                           f"supported, not {kind!r}")
        try:
            stdio = msgspec.convert(server, McpServerStdio)
        except msgspec.ValidationError as exc:
            raise RpcError(ErrorCode.INVALID_PARAMS, f"mcpServers: {exc}") from exc
        configs.append(McpServerConfig(stdio.name, stdio.command, stdio.args,
                                       {v.name: v.value for v in stdio.env}))
    return tuple(configs)
