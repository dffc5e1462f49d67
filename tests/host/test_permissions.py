"""The permission policy by mode and tool class, what a session remembers, confinement
before the prompt, and a read-only result dropped when its stop races its end."""

from __future__ import annotations

import os
import pathlib
from typing import Any

import msgspec
import pytest
import trio

from host.manager import CallManager, HostConfig
from host.permissions import Verdict, evaluate
from host.tools import TOOLS
from host.tools.context import ToolContext, ToolSpec
from protocol.messages.host import (
    PermissionRequestParams,
    PermissionWithdrawnParams,
    ToolsAbortParams,
    ToolsExecuteParams,
    ToolsOutputParams,
    ToolsStartedParams,
)
from protocol.toolclass import ToolClass, tool_class
from protocol.tools import Decision, ToolResult, ok_result
from tests.conftest import Marked
from tests.kit.answers import deny
from tests.kit.host import running_host

ALLOW, ASK = Verdict.ALLOW, Verdict.ASK
# tool: (ask, accept-edits, auto)
POLICY = {
    "Read": (ALLOW, ALLOW, ALLOW),
    "Glob": (ALLOW, ALLOW, ALLOW),
    "Grep": (ALLOW, ALLOW, ALLOW),
    "Write": (ASK, ALLOW, ALLOW),
    "Edit": (ASK, ALLOW, ALLOW),
    "Bash": (ASK, ASK, ALLOW),
    "GenerateImages": (ASK, ASK, ALLOW),
    "mcp__notes__search": (ASK, ASK, ALLOW),
}
MODES = ("ask", "accept-edits", "auto")


@pytest.mark.parametrize("tool", sorted(POLICY))
def test_policy_by_mode_and_tool_class(tool: str) -> None:
    got = tuple(evaluate(mode, tool, tool_class(tool), set()) for mode in MODES)  # type: ignore[arg-type]
    assert got == POLICY[tool]


@pytest.mark.parametrize("tool", sorted(POLICY))
def test_what_the_session_remembers(tool: str) -> None:
    cls = tool_class(tool)
    remembered_allow = evaluate("ask", tool, cls, {tool})
    remembered_deny = evaluate("auto", tool, cls, set(), {tool})
    other_allowed = evaluate("ask", tool, cls, {"SomethingElse"})
    if cls is ToolClass.READ_ONLY:  # never asked, never denied
        assert (remembered_allow, remembered_deny, other_allowed) == (ALLOW, ALLOW, ALLOW)
    else:
        assert (remembered_allow, remembered_deny) == (ALLOW, Verdict.DENY)
        assert other_allowed is ASK


# -- through the call manager (in process) ----------------------------------------------

class Prompts:
    """A runtime port that records prompts and answers each with ``decision``."""

    def __init__(self, decision: Decision) -> None:
        self.decision = decision
        self.asked: list[tuple[str, str]] = []  # (session, tool)
        self.started: list[str] = []  # call ids of tools.started

    async def request_permission(self, params: PermissionRequestParams) -> Decision | None:
        self.asked.append((params.session_id, params.tool))
        return self.decision

    def permission_withdrawn(self, params: PermissionWithdrawnParams) -> None:
        pass

    def tool_output(self, params: ToolsOutputParams) -> None:
        pass

    def tool_started(self, params: ToolsStartedParams) -> None:
        self.started.append(params.call_id)


class NoArgs(msgspec.Struct, frozen=True):
    pass


async def execute(manager: CallManager, session: str, call_id: str, tool: str,
                  args: dict[str, Any]) -> ToolResult:
    with trio.fail_after(10):
        async with trio.open_nursery() as background:
            manager.attach(background)
            result = await manager.execute(ToolsExecuteParams(session, call_id, tool, args))
            background.cancel_scope.cancel()
    return result


async def test_allow_session_does_not_carry_to_another_session(
        tmp_path: pathlib.Path) -> None:
    prompts = Prompts("allow-session")
    manager = CallManager(HostConfig(), prompts)
    for session in ("s1", "s2"):
        manager.open_session(session, str(tmp_path), "ask")
    write = {"path": "a.txt", "content": "x"}
    for call_id, session in (("c1", "s1"), ("c2", "s1"), ("c3", "s2"), ("c4", "s2")):
        result = await execute(manager, session, call_id, "Write", write)
        assert not result.is_error, result
    # Asked once per session; never for the session's second Write.
    assert prompts.asked == [("s1", "Write"), ("s2", "Write")]
    result = await execute(manager, "s1", "c5", "Edit", {
        "path": "a.txt", "old_string": "x", "new_string": "y"})
    assert prompts.asked[-1] == ("s1", "Edit")  # another tool is asked again


async def test_generate_images_and_plugin_tools_ask_in_ask_mode(
        tmp_path: pathlib.Path) -> None:
    ran: list[str] = []

    async def plugin_body(args: NoArgs, ctx: ToolContext) -> ToolResult:
        ran.append("plugin")
        return ok_result("found")

    prompts = Prompts("deny")
    plugin = ToolSpec("mcp__notes__search", NoArgs, ToolClass.PLUGIN, plugin_body)
    manager = CallManager(HostConfig(), prompts,
                          tools={**TOOLS, "mcp__notes__search": plugin})
    manager.open_session("s", str(tmp_path), "ask")
    images = await execute(manager, "s", "g1", "GenerateImages", {"prompt": "a red square"})
    found = await execute(manager, "s", "p1", "mcp__notes__search", {})
    assert prompts.asked == [("s", "GenerateImages"), ("s", "mcp__notes__search")]
    assert [images.code, found.code] == ["TOOL_DENIED", "TOOL_DENIED"]
    assert ran == [] and list(tmp_path.iterdir()) == []
    assert prompts.started == []  # a denied call's body never starts


async def test_tools_started_comes_after_the_permission_and_before_the_body(
        tmp_path: pathlib.Path) -> None:
    seen: list[str] = []
    prompts = Prompts("allow-once")

    async def plugin_body(args: NoArgs, ctx: ToolContext) -> ToolResult:
        seen.append(f"body, started: {prompts.started}")
        return ok_result("found")

    plugin = ToolSpec("mcp__notes__search", NoArgs, ToolClass.PLUGIN, plugin_body)
    manager = CallManager(HostConfig(), prompts, tools={**TOOLS, "mcp__notes__search": plugin})
    manager.open_session("s", str(tmp_path), "ask")
    result = await execute(manager, "s", "p1", "mcp__notes__search", {})
    assert not result.is_error and result.body_invoked
    assert prompts.asked == [("s", "mcp__notes__search")]
    assert seen == ["body, started: ['p1']"]  # once, before the body ran


async def test_a_read_only_result_that_races_its_stop_is_dropped(
        tmp_path: pathlib.Path) -> None:
    async def finishes_as_stopped(args: NoArgs, ctx: ToolContext) -> ToolResult:
        # The stop lands after the body's last checkpoint: its result is already made.
        manager.abort(ToolsAbortParams("s", "r1", "Peek"))
        return ok_result("secret contents")

    manager = CallManager(HostConfig(), Prompts("deny"), tools={
        "Peek": ToolSpec("Peek", NoArgs, ToolClass.READ_ONLY, finishes_as_stopped)})
    manager.open_session("s", str(tmp_path), "auto")
    result = await execute(manager, "s", "r1", "Peek", {})
    assert result.code == "ABORTED" and result.body_invoked
    assert result.details == {"discarded": True}
    assert "secret" not in msgspec.json.encode(result).decode()


# -- confinement before the prompt (real host) ------------------------------------------

async def test_a_path_outside_the_workspace_is_refused_before_asking(
        tmp_path: pathlib.Path, marked: Marked) -> None:
    workspace = tmp_path / "ws"
    outside = tmp_path / "outside"
    workspace.mkdir()
    outside.mkdir()
    os.symlink(outside, workspace / "link")

    calls = [("Write", {"path": "../x.txt", "content": "x"}),
             ("Write", {"path": str(outside / "x.txt"), "content": "x"}),
             ("Write", {"path": "link/x.txt", "content": "x"}),
             ("Edit", {"path": "link/x.txt", "old_string": "a", "new_string": "b"})]
    async with running_host(str(workspace), marked.env(), mode="ask", answer=deny) as host:
        for n, (tool, args) in enumerate(calls):
            result = await host.execute(f"c{n}", tool, args)
            assert result.code == "PATH_OUTSIDE_WORKSPACE" and not result.body_invoked, \
                (tool, args, result)
        assert host.permission_requests == []
        inside = await host.execute("in", "Write", {"path": "sub/x.txt", "content": "x"})
        assert inside.code == "TOOL_DENIED"  # a path inside is asked about as before
        assert len(host.permission_requests) == 1
    assert list(outside.iterdir()) == []
