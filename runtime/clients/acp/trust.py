"""Workspace trust through ACP: the daemon's ``workspace.trust`` as the editor's
``session/request_permission``, asked while ``session/new`` (or ``session/load``) opens the
session, before any server the workspace declares starts.

The question is a pending ``execute`` tool call titled with what would run, each server's
command, arguments, working directory and declared environment in full in its content,
with three options: ``trust`` (allow_always), ``not-now`` (reject_once) and ``never``
(reject_always). An
editor that answers an error or ``cancelled`` has said not now."""

from __future__ import annotations

import logging

from protocol.errors import RemoteError
from protocol.messages.client import WorkspaceTrustParams, WorkspaceTrustResult
from runtime.clients.acp.messages import (
    PermissionOption,
    RequestPermissionRequest,
    RequestPermissionResponse,
    SelectedOutcome,
    TextBlock,
    ToolCallContent,
    ToolCallUpdate,
)
from runtime.link import ConnectionClosed, Endpoint

log = logging.getLogger(__name__)

REQUEST_PERMISSION = "session/request_permission"
TRUST_OPTIONS = (
    PermissionOption("trust", "Trust this workspace's servers (this content)", "allow_always"),
    PermissionOption("not-now", "Not now", "reject_once"),
    PermissionOption("never", "Never for this content", "reject_always"),
)
NOT_NOW = WorkspaceTrustResult("not-now")


def describe(params: WorkspaceTrustParams) -> str:
    """What would run, in full: one line per server."""
    lines = [f"{params.workspace}/{params.file} ({params.digest}) declares servers that "
             "would run on your machine:"]
    for server in params.servers:
        command = server.shell_line()
        lines.append(f"- {server.name}: {command}  (in {server.cwd})")
    return "\n".join(lines)


async def ask_trust(acp: Endpoint | None, params: WorkspaceTrustParams
                    ) -> WorkspaceTrustResult:
    if acp is None:
        return NOT_NOW
    text = describe(params)
    tool_call = ToolCallUpdate(
        f"workspace-trust-{params.digest.removeprefix('sha256:')[:16]}", status="pending",
        title=f"Run the MCP servers of {params.file}? "
              + "; ".join(s.shell_line() for s in params.servers),
        kind="execute", content=(ToolCallContent(TextBlock(text)),),
        raw_input={"workspace": params.workspace, "file": params.file,
                   "digest": params.digest,
                   "servers": [{"name": s.name, "command": s.command, "args": list(s.args),
                                "cwd": s.cwd, "env": s.env} for s in params.servers]})
    try:
        answer: RequestPermissionResponse = await acp.request(
            REQUEST_PERMISSION, RequestPermissionRequest(params.session_id, tool_call,
                                                         TRUST_OPTIONS))
    except RemoteError as exc:
        log.info("workspace trust: the editor answered an error (%s): not now", exc)
        return NOT_NOW
    except ConnectionClosed:
        return NOT_NOW
    if isinstance(answer.outcome, SelectedOutcome) and answer.outcome.option_id in (
            "trust", "not-now", "never"):
        return WorkspaceTrustResult(answer.outcome.option_id)  # type: ignore[arg-type]
    return NOT_NOW
