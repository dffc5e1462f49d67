"""``quiesce demo``: the daemon, its host and a tool call, end to end, for a person to read.

It starts ``quiesce serve`` exactly as an editor would (a subprocess over stdio),
opens a session on a temporary workspace, runs tools through the host, shows
that bad input is answered and the daemon keeps serving, and shuts down.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import sys
import tempfile
import time
from typing import Any

import trio

from protocol.errors import RemoteError
from protocol.messages.client import DebugRunToolParams, SessionNewParams
from protocol.messages.common import Empty
from protocol.tools import TextContent, ToolResult
from runtime.client import DaemonClient, spawn_daemon


def _say(text: str = "") -> None:
    print(text, flush=True)


def _summary(result: ToolResult) -> str:
    text = "\n".join(c.text for c in result.content if isinstance(c, TextContent))
    status = f"error {result.code}" if result.is_error else "ok"
    return f"[{status}]\n" + "\n".join("    " + line for line in text.splitlines()[:8])


async def _tool(daemon: DaemonClient, session: str, tool: str, args: dict[str, Any]) -> None:
    started = time.perf_counter()
    answer = await daemon.request("debug.runTool", DebugRunToolParams(session, tool, args))
    ms = (time.perf_counter() - started) * 1000
    _say(f"  {tool} {args} -> {ms:.1f} ms {_summary(answer.result)}")


async def _demo(workspace: pathlib.Path) -> None:
    (workspace / "README.md").write_text("# demo project\n\nquiesce reads this through its host.\n")
    (workspace / "src").mkdir()
    (workspace / "src" / "app.py").write_text("def main():\n    return 'stopped means stopped'\n")
    started = time.perf_counter()
    env = {**os.environ, "QUIESCE_LOG_LEVEL": os.environ.get("QUIESCE_LOG_LEVEL", "WARNING")}
    async with spawn_daemon(env=env) as daemon:
        info = await daemon.initialize()
        host = info.capabilities["host"]
        _say(f"daemon pid {daemon.process.pid}, host pid {host['pid']}, protocol "
             f"{info.protocol_version}, ready in {(time.perf_counter() - started) * 1000:.0f} ms")
        _say(f"host tools: {', '.join(f'{k} ({v})' for k, v in host['tools'].items())}")
        session = (await daemon.request("session.new",
                                        SessionNewParams(str(workspace), "auto"))).session_id
        _say(f"session {session} on {workspace}")
        await _tool(daemon, session, "Read", {"path": "README.md"})
        await _tool(daemon, session, "Glob", {"pattern": "**/*.py"})
        await _tool(daemon, session, "Grep", {"pattern": "stopped", "path": "."})
        await _tool(daemon, session, "Read", {"path": "../../etc/passwd"})
        try:
            await daemon.request("session.new", SessionNewParams("not/absolute"))
        except RemoteError as exc:
            _say(f"  bad session.new -> JSON-RPC error {exc.raw_code}: {exc.message} "
                 f"({exc.data})")
        sessions = await daemon.request("session.list", Empty())
        _say(f"  still serving: session.list -> {len(sessions.sessions)} session(s)")
    _say(f"daemon exited with status {daemon.process.returncode}; host stopped with it")


def run_demo(*, keep: bool = False) -> int:
    workspace = pathlib.Path(tempfile.mkdtemp(prefix="quiesce-demo-"))
    try:
        trio.run(_demo, workspace)
    finally:
        if keep:
            print(f"workspace kept at {workspace}", file=sys.stderr)
        else:
            shutil.rmtree(workspace, ignore_errors=True)
    return 0
