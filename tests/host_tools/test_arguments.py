"""Bad arguments to every built-in tool: a clear ``INVALID_PARAMS`` tool error, never a crash.

Wrong types, values out of range, unknown fields, missing required fields and the
snake_case spelling of a wire name (``timeout_ms`` for ``timeoutMs``, ``ignore_case``
for ``ignoreCase``; Edit's wire names are snake_case, so its camelCase spelling is
the wrong one). Each case is checked at the call manager (one test per case) and,
all of them, over the wire against one real host. Nothing runs and nothing is
written: the arguments are refused before the body, except GenerateImages' pixel
bound, which its body checks before the backend runs.
"""

from __future__ import annotations

import pathlib
from typing import Any

import pytest
import trio

from host.manager import CallManager, HostConfig
from host.tools import TOOLS
from protocol.messages.host import ToolsExecuteParams
from protocol.tools import ToolResult
from tests.conftest import Marked
from tests.kit.host import NoRuntime, running_host

CASES: list[tuple[str, dict[str, Any], str]] = [  # tool, arguments, the field at fault
    ("Read", {"path": 1}, "path"),
    ("Read", {"path": "f.txt", "offset": -1}, "offset"),
    ("Read", {"path": "f.txt", "limit": 0}, "limit"),
    ("Read", {"path": "f.txt", "lines": 3}, "lines"),
    ("Read", {}, "path"),
    ("Glob", {"pattern": 5}, "pattern"),
    ("Glob", {"pattern": "*", "path": ["."]}, "path"),
    ("Glob", {"pattern": "*", "dir": "."}, "dir"),
    ("Grep", {"pattern": "x", "ignore_case": True}, "ignore_case"),
    ("Grep", {"pattern": "x", "ignoreCase": "yes"}, "ignoreCase"),
    ("Grep", {"pattern": "x", "glob": 3}, "glob"),
    ("Grep", {"path": "."}, "pattern"),
    ("Write", {"path": "w.txt", "content": None}, "content"),
    ("Write", {"path": "w.txt", "contents": "x"}, "contents"),
    ("Write", {"content": "x"}, "path"),
    ("Edit", {"path": "f.txt", "oldString": "a", "newString": "b"}, "oldString"),
    ("Edit", {"path": "f.txt", "old_string": "a", "new_string": "b", "replace_all": "yes"},
     "replace_all"),
    ("Edit", {"path": "f.txt", "old_string": "a"}, "new_string"),
    ("Bash", {"command": "touch ran", "timeout_ms": 1000}, "timeout_ms"),
    ("Bash", {"command": "touch ran", "timeoutMs": 0}, "timeoutMs"),
    ("Bash", {"command": "touch ran", "timeoutMs": "1000"}, "timeoutMs"),
    ("Bash", {"command": "touch ran", "timeoutMs": True}, "timeoutMs"),
    ("Bash", {"command": ["touch", "ran"]}, "command"),
    ("GenerateImages", {"prompt": "x", "count": 0}, "count"),
    ("GenerateImages", {"prompt": "x", "count": 17}, "count"),
    ("GenerateImages", {"prompt": "x", "count": "2"}, "count"),
    ("GenerateImages", {"prompt": "x", "size": "big"}, "size"),
    ("GenerateImages", {"prompt": "x", "size": "9999x9999"}, "size"),  # beyond the pixel bound
    ("GenerateImages", {"prompt": "x", "n": 2}, "n"),
    ("GenerateImages", {"count": 1}, "prompt"),
]
BODY_CHECKED = {("GenerateImages", "9999x9999")}


def _workspace(root: pathlib.Path) -> None:
    (root / "f.txt").write_text("a\n")


def _problem(tool: str, args: dict[str, Any], field: str, result: ToolResult,
             root: pathlib.Path) -> str | None:
    """What is wrong with the result of a bad call, or ``None``."""
    if result.code != "INVALID_PARAMS" or result.error is None:
        return f"code {result.code}"
    if field not in result.error.message:
        return f"the message does not name {field!r}: {result.error.message}"
    if result.body_invoked and (tool, args.get("size")) not in BODY_CHECKED:
        return "the body ran"
    left = sorted(p.name for p in root.iterdir())
    if left != ["f.txt"] or (root / "f.txt").read_text() != "a\n":
        return f"the workspace changed: {left}"
    return None


def test_every_tool_has_cases() -> None:
    assert {tool for tool, _, _ in CASES} == set(TOOLS)


@pytest.mark.parametrize(("tool", "args", "field"), CASES,
                         ids=[f"{t}-{a}" for t, a, _ in CASES])
async def test_bad_arguments_are_invalid_params(tmp_path: pathlib.Path, tool: str,
                                                args: dict[str, Any], field: str) -> None:
    _workspace(tmp_path)
    manager = CallManager(HostConfig(), NoRuntime())
    manager.open_session("s", str(tmp_path), "auto")
    with trio.fail_after(10):
        async with trio.open_nursery() as background:
            manager.attach(background)
            result = await manager.execute(ToolsExecuteParams("s", "c1", tool, args))
            background.cancel_scope.cancel()
    assert _problem(tool, args, field, result, tmp_path) is None, result


async def test_bad_arguments_over_the_wire(tmp_path: pathlib.Path, marked: Marked) -> None:
    _workspace(tmp_path)
    problems = {}
    async with running_host(str(tmp_path), marked.env()) as host:
        with trio.fail_after(20):
            for number, (tool, args, field) in enumerate(CASES):
                result = await host.execute(f"c{number}", tool, args)
                problem = _problem(tool, args, field, result, tmp_path)
                if problem is not None:
                    problems[f"{tool} {args}"] = problem
            # The host is still up and a good call still works.
            good = await host.execute("good", "Read", {"path": "f.txt"})
    assert problems == {}
    assert good.code is None and "a" in str(good.content)
