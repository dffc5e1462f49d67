"""A stop that did not come from the editor closes its permission dialog, with the official
ACP Python SDK as the editor and no error in it.

The editor here behaves as ACP editors do: a ``session/request_permission`` opens a dialog
tied to its tool call, and the dialog closes when that tool call gets its final
``tool_call_update`` (``completed`` or ``failed``). The SDK (0.12.x) has no handler for
``$/cancel_request``: sent to it, it logs an error with a traceback. An operator's stop
(``quiesce ops abort``) during a prompt must close the dialog and log nothing.
"""

from __future__ import annotations

import asyncio
import logging
import pathlib
import subprocess
import sys
from typing import Any

from acp.schema import DeniedOutcome, PermissionOption, RequestPermissionResponse, ToolCallUpdate

from tests.conftest import Marked
from tests.kit.acpclient import (
    TIMEOUT,
    Editor,
    acp_agent,
    assert_balanced,
    new_session,
    run,
    workspace,
)

FINAL = ("completed", "failed")


class DialogEditor(Editor):
    """An editor whose permission dialogs close on their call's final update."""

    def __init__(self) -> None:
        super().__init__()
        self.dialogs: dict[str, asyncio.Event] = {}
        self.closed: list[str] = []

    async def request_permission(self, options: list[PermissionOption], session_id: str,
                                 tool_call: ToolCallUpdate,
                                 **kwargs: Any) -> RequestPermissionResponse:
        self.permission_requests.append(tool_call)
        closing = self.dialogs[tool_call.tool_call_id] = asyncio.Event()
        self.changed.set()
        await closing.wait()  # the user never answers: only the agent can close it
        return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        call_id = getattr(update, "tool_call_id", None)
        dialog = self.dialogs.get(call_id) if call_id is not None else None
        if dialog is not None and getattr(update, "status", None) in FINAL:
            self.closed.append(call_id)
            dialog.set()


class _Errors(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def test_an_operators_stop_closes_the_editors_dialog_without_an_error(
        marked: Marked, tmp_path: pathlib.Path) -> None:
    ws = workspace(tmp_path)
    script = [[{"toolCall": {"id": "w1", "name": "Write",
                             "args": {"path": "a.txt", "content": "x"}}}],
              [{"text": "not reached"}]]
    errors = _Errors()
    logging.getLogger().addHandler(errors)

    async def main() -> None:
        editor = DialogEditor()
        async with acp_agent(marked, script, tmp_path, editor=editor) as (conn, _):
            session = await new_session(conn, editor, ws)
            prompt = asyncio.create_task(session.prompt("write"))
            await asyncio.wait_for(editor.wait_for(
                lambda d, m: d == "in" and m.get("method") == "session/request_permission"),
                TIMEOUT)
            stopped = await asyncio.to_thread(
                subprocess.run, [sys.executable, "-m", "runtime", "ops", "abort",
                                 session.session_id, "--timeout", "15"],
                env=marked.env(), capture_output=True, text=True, timeout=30)
            assert stopped.returncode == 0, stopped.stderr
            assert await prompt == "cancelled"
            # The dialog closed: its call's final update reached the editor.
            (asked,) = editor.permission_requests
            assert editor.closed == [asked.tool_call_id]
            await asyncio.sleep(0.3)  # anything else the agent sends arrives meanwhile
            assert editor.incoming("$/cancel_request") == []
            results = assert_balanced(marked, session.session_id)
            assert [r.code for r in results.values()] == ["ABORTED_BEFORE_DISPATCH"]
        assert not (ws / "a.txt").exists()

    try:
        run(main())
    finally:
        logging.getLogger().removeHandler(errors)
    assert [r.getMessage() for r in errors.records] == []  # the SDK logged no error
