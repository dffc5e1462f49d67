"""``quiesce acp`` stops, driven by the official ACP Python SDK.

Every stop case checks the same promise in ACP terms: ``session/prompt`` answers
``cancelled`` (never an error); every ``tool_call`` the editor saw had its final
``tool_call_update`` before that answer, and no ``session/update`` follows it; the native
log is balanced; no process survives (the ``marked`` fixture).
"""

from __future__ import annotations

import asyncio
import pathlib
from typing import Any

import pytest

from protocol.messages.events import TurnEnd
from tests.conftest import Marked
from tests.kit.acpclient import (
    TIMEOUT,
    Editor,
    acp_agent,
    assert_balanced,
    assert_settled_before_answer,
    native_log,
    new_session,
    run,
    workspace,
)


def test_cancel_during_stream_keeps_the_interrupted_prefix(marked: Marked,
                                                           tmp_path: pathlib.Path) -> None:
    ws = workspace(tmp_path)
    script = [[{"text": "Partial answer"}, {"sleepMs": 20000}, {"text": " never sent"}]]

    async def main() -> None:
        async with acp_agent(marked, script, tmp_path) as (conn, editor):
            session = await new_session(conn, editor, ws)
            prompt = asyncio.create_task(session.prompt("go"))
            await asyncio.sleep(0.5)  # the stream is in its pause
            await conn.cancel(session_id=session.session_id)
            assert await prompt == "cancelled"
            await asyncio.sleep(0.2)
            updates = assert_settled_before_answer(editor)
            assert [u["content"]["text"] for u in updates] == ["Partial answer"]
            assert_balanced(marked, session.session_id)
    run(main())


@pytest.mark.parametrize("declared", [False, True])
def test_cancel_during_permission_prompt(marked: Marked, tmp_path: pathlib.Path,
                                         declared: bool) -> None:
    """The editor never answers the prompt: the cancel does not wait for it; the call ends
    ABORTED_BEFORE_DISPATCH (never TOOL_DENIED) and its final update closes the dialog; an
    editor that declared ``_meta.cancelRequest`` is also told with $/cancel_request."""
    ws = workspace(tmp_path)
    script = [[{"toolCall": {"id": "w1", "name": "Write", "args": {"path": "a.txt",
                                                                   "content": "x"}}}],
              [{"text": "not reached"}]]

    async def main() -> None:
        async with acp_agent(marked, script, tmp_path,
                             client_meta={"cancelRequest": True} if declared else None
                             ) as (conn, editor):
            session = await new_session(conn, editor, ws)
            prompt = asyncio.create_task(session.prompt("write"))
            asked = await asyncio.wait_for(editor.wait_for(
                lambda d, m: d == "in" and m.get("method") == "session/request_permission"),
                TIMEOUT)
            await conn.cancel(session_id=session.session_id)
            assert await prompt == "cancelled"
            await asyncio.sleep(0.2)
            updates = assert_settled_before_answer(editor)
            final = [u for u in updates if u.get("status") == "failed"]
            assert len(final) == 1
            assert final[0]["rawOutput"]["code"] == "ABORTED_BEFORE_DISPATCH"
            told = editor.incoming("$/cancel_request")
            assert [m["params"]["requestId"] for m in told] == ([asked["id"]] if declared
                                                                 else [])
            results = assert_balanced(marked, session.session_id)
            assert [r.code for r in results.values()] == ["ABORTED_BEFORE_DISPATCH"]
        assert not (ws / "a.txt").exists()
    run(main())


def test_cancel_during_bash_tree(marked: Marked, tmp_path: pathlib.Path) -> None:
    """A Bash call running a process tree: the tree is killed (the fixture fails on any
    survivor), its output so far is kept, the call ends ABORTED."""
    ws = workspace(tmp_path)
    command = "echo started; (sleep 30 &); sleep 30 & wait"
    script = [[{"toolCall": {"id": "b1", "name": "Bash", "args": {"command": command}}}],
              [{"text": "not reached"}]]

    async def main() -> None:
        async with acp_agent(marked, script, tmp_path,
                             extra=("--permission-mode", "auto")) as (conn, editor):
            session = await new_session(conn, editor, ws)
            prompt = asyncio.create_task(session.prompt("run it"))
            await asyncio.wait_for(editor.wait_for(
                lambda d, m: m.get("method") == "session/update"
                and m["params"]["update"].get("status") == "in_progress"
                and "started" in str(m["params"]["update"].get("content"))), TIMEOUT)
            started = asyncio.get_running_loop().time()
            await conn.cancel(session_id=session.session_id)
            assert await prompt == "cancelled"
            assert asyncio.get_running_loop().time() - started < 5
            await asyncio.sleep(0.2)
            updates = assert_settled_before_answer(editor)
            call = [u for u in updates if u["sessionUpdate"] == "tool_call"]
            assert call[0]["kind"] == "execute"
            final = [u for u in updates if u.get("status") == "failed"]
            assert final[0]["rawOutput"]["code"] == "ABORTED"
            assert "started" in final[0]["content"][0]["content"]["text"]
            results = assert_balanced(marked, session.session_id)
            assert [r.code for r in results.values()] == ["ABORTED"]
    run(main())


def test_cancel_right_after_prompt(marked: Marked, tmp_path: pathlib.Path) -> None:
    """session/prompt and session/cancel back to back through the SDK: the cancel lands
    before the turn started or early in it; either way the prompt answers cancelled and
    its tool never runs."""
    ws = workspace(tmp_path)
    script = [[{"sleepMs": 300},
               {"toolCall": {"id": "b1", "name": "Bash", "args": {"command": "touch ran"}}}],
              [{"text": "not reached"}]]

    async def main() -> None:
        async with acp_agent(marked, script, tmp_path,
                             extra=("--permission-mode", "auto")) as (conn, editor):
            session = await new_session(conn, editor, ws)
            prompt = asyncio.create_task(session.prompt("go"))
            await asyncio.wait_for(editor.wait_for(
                lambda d, m: d == "out" and m.get("method") == "session/prompt"), TIMEOUT)
            await conn.cancel(session_id=session.session_id)
            assert await prompt == "cancelled"
            await asyncio.sleep(0.2)
            assert_settled_before_answer(editor)
            assert_balanced(marked, session.session_id)
        assert not (ws / "ran").exists()
    run(main())


def test_cancel_read_with_its_prompt_stops_it_before_it_starts(
        marked: Marked, tmp_path: pathlib.Path) -> None:
    """A prompt and its cancel read in one chunk: the cancel is handled before the
    prompt's handler runs, and still wins; the prompt never reaches the agent."""
    ws = workspace(tmp_path)
    script = [[{"toolCall": {"id": "b1", "name": "Bash", "args": {"command": "touch ran"}}}],
              [{"text": "not reached"}]]

    async def main() -> None:
        async with acp_agent(marked, script, tmp_path,
                             extra=("--permission-mode", "auto")) as (conn, editor):
            session = await new_session(conn, editor, ws)
            sid = session.session_id
            await editor.send_raw(
                {"jsonrpc": "2.0", "id": "raw-1", "method": "session/prompt",
                 "params": {"sessionId": sid, "prompt": [{"type": "text", "text": "go"}]}},
                {"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": sid}})
            answer = await asyncio.wait_for(editor.wait_for(
                lambda d, m: d == "in" and m.get("id") == "raw-1"), TIMEOUT)
            assert answer["result"] == {"stopReason": "cancelled"}
            assert editor.updates() == []
            assert [type(e).__name__ for e in native_log(marked, sid)] == ["SessionMeta"]
            # The session is not spoilt: a later prompt runs.
            assert await session.prompt("now") == "end_turn"
        assert (ws / "ran").exists()
    run(main())


def test_cancel_request_of_a_prompt(marked: Marked, tmp_path: pathlib.Path) -> None:
    """$/cancel_request naming a running session/prompt stops it like session/cancel; the
    prompt gets a valid answer, stopReason cancelled."""
    ws = workspace(tmp_path)
    script = [[{"text": "Partial"}, {"sleepMs": 20000}]]

    async def main() -> None:
        async with acp_agent(marked, script, tmp_path) as (conn, editor):
            session = await new_session(conn, editor, ws)
            prompt = asyncio.create_task(session.prompt("go"))
            sent = await asyncio.wait_for(editor.wait_for(
                lambda d, m: d == "out" and m.get("method") == "session/prompt"), TIMEOUT)
            await asyncio.sleep(0.3)
            await conn._conn.send_notification("$/cancel_request", {"requestId": sent["id"]})
            assert await prompt == "cancelled"
            await asyncio.sleep(0.2)
            updates = assert_settled_before_answer(editor)
            assert [u["content"]["text"] for u in updates] == ["Partial"]
            assert_balanced(marked, session.session_id)
    run(main())


BASH_UP_SCRIPT = [[{"toolCall": {"id": "b1", "name": "Bash",
                                 "args": {"command": "echo up; sleep 30 & wait"}}}]]
"""One Bash call that prints ``up`` and then waits on a background child."""


async def shown(editor: Editor, text: str) -> None:
    """Until a ``session/update`` whose content carries ``text`` has reached the editor."""
    await asyncio.wait_for(editor.wait_for(
        lambda d, m: text in str(m.get("params", {}).get("update", {}).get("content"))),
        TIMEOUT)


def test_editor_quitting_mid_turn_stops_everything(marked: Marked, tmp_path: pathlib.Path
                                                   ) -> None:
    """The editor closes stdin while a Bash tree runs: quiesce acp stops the turn (cause
    disposed), kills the tree and exits 0 (the harness checks the exit; the fixture,
    the survivors); the native log is balanced."""
    ws = workspace(tmp_path)
    script = BASH_UP_SCRIPT

    async def main() -> str:
        async with acp_agent(marked, script, tmp_path,
                             extra=("--permission-mode", "auto")) as (conn, editor):
            session = await new_session(conn, editor, ws)
            prompt = asyncio.create_task(session.prompt("run"))
            await shown(editor, "up")
        # The editor left without an answer: its side of the link is closed.
        [outcome] = await asyncio.gather(prompt, return_exceptions=True)
        assert isinstance(outcome, ConnectionError)
        return session.session_id

    session_id = run(main())
    results = assert_balanced(marked, session_id)
    assert [r.code for r in results.values()] == ["ABORTED"]
    ends = [e for e in native_log(marked, session_id) if isinstance(e, TurnEnd)]
    assert [(e.end.kind, e.end.reason.kind if e.end.reason else None) for e in ends] == [
        ("aborted", "disposed")]


def test_editor_answering_cancelled_stops_the_turn(marked: Marked, tmp_path: pathlib.Path
                                                   ) -> None:
    """ACP: an editor answers a permission prompt ``cancelled`` only when it cancelled the
    turn. Taken as the stop it is (not as a denial): the call ends ABORTED_BEFORE_DISPATCH
    and the prompt answers cancelled, even before the editor's session/cancel arrives."""
    ws = workspace(tmp_path)
    script = [[{"toolCall": {"id": "w1", "name": "Write", "args": {"path": "a.txt",
                                                                   "content": "x"}}}],
              [{"text": "not reached"}]]

    async def cancelled(options: Any, tool_call: Any) -> Any:
        from acp.schema import DeniedOutcome, RequestPermissionResponse
        return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))

    async def main() -> None:
        editor = Editor(answer=cancelled)
        async with acp_agent(marked, script, tmp_path, editor=editor) as (conn, _):
            session = await new_session(conn, editor, ws)
            assert await session.prompt("write") == "cancelled"
            await asyncio.sleep(0.2)
            updates = assert_settled_before_answer(editor)
            assert [u["rawOutput"]["code"] for u in updates if u.get("status") == "failed"
                    ] == ["ABORTED_BEFORE_DISPATCH"]
            results = assert_balanced(marked, session.session_id)
            assert [r.code for r in results.values()] == ["ABORTED_BEFORE_DISPATCH"]
        assert not (ws / "a.txt").exists()
    run(main())


def test_sigterm_mid_turn_is_an_orderly_shutdown(marked: Marked, tmp_path: pathlib.Path
                                                 ) -> None:
    """SIGTERM (an editor killing its agent server): the running prompt answers
    cancelled, its Bash tree dies, the process exits 0."""
    import signal

    ws = workspace(tmp_path)
    script = BASH_UP_SCRIPT

    async def main() -> str:
        async with acp_agent(marked, script, tmp_path,
                             extra=("--permission-mode", "auto")) as (conn, editor):
            session = await new_session(conn, editor, ws)
            prompt = asyncio.create_task(session.prompt("run"))
            await shown(editor, "up")
            editor.process.send_signal(signal.SIGTERM)
            assert await prompt == "cancelled"
            assert await asyncio.wait_for(editor.process.wait(), TIMEOUT) == 0
            updates = assert_settled_before_answer(editor)
            # The shutting-down daemon still announces how the call ended: the editor
            # gets the real result (code and all), not a placeholder.
            finals = [u for u in updates if u.get("status") in ("completed", "failed")]
            assert [(u["status"], u.get("rawOutput", {}).get("code")) for u in finals] == [
                ("failed", "ABORTED")]
            return session.session_id

    session_id = run(main())
    assert [r.code for r in assert_balanced(marked, session_id).values()] == ["ABORTED"]


def test_editor_quitting_during_permission_prompt(marked: Marked, tmp_path: pathlib.Path
                                                  ) -> None:
    """The editor leaves with a permission prompt open: that is no denial; the shutdown's
    stop (cause disposed) withdraws the prompt and the call ends ABORTED_BEFORE_DISPATCH."""
    ws = workspace(tmp_path)
    script = [[{"toolCall": {"id": "w1", "name": "Write", "args": {"path": "a.txt",
                                                                   "content": "x"}}}]]

    async def main() -> str:
        async with acp_agent(marked, script, tmp_path) as (conn, editor):
            session = await new_session(conn, editor, ws)
            prompt = asyncio.create_task(session.prompt("write"))
            await asyncio.wait_for(editor.wait_for(
                lambda d, m: m.get("method") == "session/request_permission"), TIMEOUT)
        await asyncio.gather(prompt, return_exceptions=True)
        return session.session_id

    session_id = run(main())
    assert [r.code for r in assert_balanced(marked, session_id).values()] == [
        "ABORTED_BEFORE_DISPATCH"]
    ends = [e for e in native_log(marked, session_id) if isinstance(e, TurnEnd)]
    assert [e.end.reason.kind for e in ends if e.end.reason] == ["disposed"]
    assert not (ws / "a.txt").exists()


def test_cancel_request_of_session_new_undoes_the_session(marked: Marked,
                                                          tmp_path: pathlib.Path) -> None:
    """$/cancel_request naming a session/new whose plugin servers are starting (one would
    take 8 s, one never answers its handshake): the request answers -32800 (Request
    cancelled) at once, not when they are up or time out, and the half-opened session is
    closed, both servers' trees killed (the fixture fails on any survivor)."""
    import sys
    import time

    from acp.exceptions import RequestError
    from acp.schema import McpServerStdio

    from tests.support import command_line, marked_processes

    ws = workspace(tmp_path)
    slow = ("import sys, time; time.sleep(8); "
            "exec(open(sys.argv[1]).read())")  # never reached: cancelled before
    hung = "import time; time.sleep(300)"

    def servers() -> list[Any]:
        return [p for p in marked_processes(marked.mark) if "quiesce-test-server" in
                command_line(p)]

    async def main() -> None:
        async with acp_agent(marked, [], tmp_path) as (conn, editor):
            new = asyncio.create_task(conn.new_session(cwd=str(ws), mcp_servers=[
                McpServerStdio(name="slow", command=sys.executable,
                               args=["-c", slow, "quiesce-test-server"], env=[]),
                McpServerStdio(name="hung", command=sys.executable,
                               args=["-c", hung, "quiesce-test-server"], env=[])]))
            sent = await asyncio.wait_for(editor.wait_for(
                lambda d, m: d == "out" and m.get("method") == "session/new"), TIMEOUT)
            async with asyncio.timeout(TIMEOUT):
                while len(servers()) < 2:  # the session is opening: its servers start
                    await asyncio.sleep(0.02)
            cancelled_at = time.monotonic()
            await conn._conn.send_notification("$/cancel_request", {"requestId": sent["id"]})
            try:
                await asyncio.wait_for(new, TIMEOUT)
            except RequestError as exc:
                assert exc.code == -32800
            else:
                raise AssertionError("a cancelled session/new answered a session")
            took = time.monotonic() - cancelled_at
            assert took < 4.0, f"answered {took:.1f} s after the cancel"  # not 8 s, not 30 s
            assert servers() == []  # killed before the answer
    run(main())
