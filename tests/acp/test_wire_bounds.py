"""``quiesce acp``'s link keeps the wire's bounds: a lone surrogate keeps its id, a batch
over the member limit is one error."""

from __future__ import annotations

import asyncio
import pathlib
import time

from tests.conftest import Marked
from tests.kit.acpclient import TIMEOUT, acp_agent, new_session, run, workspace


def test_a_lone_surrogate_keeps_the_id_over_acp(marked: Marked, tmp_path: pathlib.Path) -> None:
    ws = workspace(tmp_path)

    async def main() -> None:
        async with acp_agent(marked, [[{"text": "hi"}]], tmp_path) as (conn, editor):
            session = await new_session(conn, editor, ws)
            # json.dumps writes a lone surrogate as its escape, as JSON.stringify does.
            await editor.send_raw(
                {"jsonrpc": "2.0", "id": "bad-cwd", "method": "session/new",
                 "params": {"cwd": "relative\udcff", "mcpServers": []}},
                {"jsonrpc": "2.0", "id": "half-emoji", "method": "session/prompt",
                 "params": {"sessionId": session.session_id,
                            "prompt": [{"type": "text", "text": "half \ud83d"}]}})
            bad = await asyncio.wait_for(editor.wait_for(
                lambda d, m: d == "in" and m.get("id") == "bad-cwd"), TIMEOUT)
            assert bad["error"]["code"] == -32602, bad
            prompt = await asyncio.wait_for(editor.wait_for(
                lambda d, m: d == "in" and m.get("id") == "half-emoji"), TIMEOUT)
            assert prompt["result"]["stopReason"] == "end_turn", prompt
    run(main())


def test_a_batch_over_the_limit_is_one_error_over_acp(marked: Marked,
                                                      tmp_path: pathlib.Path) -> None:
    async def main() -> None:
        async with acp_agent(marked, [[{"text": "hi"}]], tmp_path) as (conn, editor):
            started = time.monotonic()
            editor.process.stdin.write(b"[" + b",".join([b"1"] * 1_000_000) + b"]\n")
            await editor.process.stdin.drain()
            # The SDK drops what it cannot attribute; the agent answers what follows at once.
            session = await new_session(conn, editor, workspace(tmp_path))
            assert session.session_id
            assert time.monotonic() - started < 3.0  # today: tens of seconds
    run(main())

