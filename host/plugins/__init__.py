"""Plugin tools: MCP servers over stdio, started, listed, called and stopped by the host."""

from host.plugins.connection import McpConnection, PluginStartError
from host.plugins.request import CallOutcome
from host.plugins.servers import (
    LoadedServers,
    PluginServer,
    PluginSettings,
    SessionPlugins,
    load_servers,
)

__all__ = ["CallOutcome", "LoadedServers", "McpConnection", "PluginServer", "PluginSettings",
           "PluginStartError", "SessionPlugins", "load_servers"]
