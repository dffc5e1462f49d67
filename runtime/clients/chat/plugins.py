"""What the chat shows of plugin servers (pure: no I/O, clock or state): the question
whether a workspace's declared servers may run, with each command in full, and each
server's state (running with its tools, failed with the reason, untrusted)."""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text

from protocol.messages.client import WorkspaceTrustParams
from protocol.messages.common import PluginServerStatus


def command_line(server: PluginServerStatus) -> str:
    """The server's command and arguments in full, as a shell would take them, after the
    variables its declaration sets."""
    return server.shell_line()


def trust_lines(params: WorkspaceTrustParams) -> list[Text]:
    lines = [Text(f"? {params.workspace}/{params.file} declares servers that would run on "
                  "this machine, with your permissions:", style="bold yellow")]
    for server in params.servers:
        lines.append(Text.assemble(("    ", ""), (server.name, "bold"), (": ", ""),
                                   (command_line(server), "yellow"),
                                   (f"   (in {server.cwd})", "dim")))
    lines.append(Text(f"  content {params.digest}. Run them? /trust (this content, from now "
                      "on) · /not-now (open without them) · /never (never this content)",
                      style="yellow"))
    return lines


def trust_answered(decision: str) -> list[Text]:
    said = {"trust": "trusted: the workspace's servers start",
            "not-now": "not now: the session opens without the workspace's servers",
            "never": "never: this content of the file will not run nor be asked about"}
    return [Text(f"  → {said.get(decision, decision)}", style="dim")]


def server_lines(servers: Sequence[PluginServerStatus]) -> list[Text]:
    """Each plugin server: its state, its tools or why not, and what it runs."""
    if not servers:
        return [Text("no plugin servers (none declared in .quiesce/mcp.json or by the "
                     "session)", style="dim")]
    lines = [Text("plugin servers:", style="bold")]
    for server in servers:
        where = f" [{server.source}] {command_line(server)}"
        if server.state == "running":
            tools = ", ".join(server.tool_names) or "no tools"
            lines.append(Text.assemble(("  ● ", "green"), (server.name, "bold"),
                                       (f" running: {tools}", ""), (where, "dim")))
        elif server.state == "untrusted":
            lines.append(Text.assemble(("  ? ", "yellow"), (server.name, "bold"),
                                       (" untrusted, not started:", "yellow"),
                                       (where, "dim")))
        else:
            lines.append(Text.assemble(("  ✗ ", "red"), (server.name, "bold"),
                                       (f" failed: {server.error or 'unknown reason'}", "red"),
                                       (where, "dim")))
    return lines
