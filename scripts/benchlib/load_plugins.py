"""The plugin sessions of the load test's phase A: each with its own MCP server (the SDK
test server of ``tests/plugins``), whose files say when a call started and was cancelled,
and which must be gone once its session is closed."""

from __future__ import annotations

import pathlib
import sys
import time
from typing import Any

import psutil
import trio

from benchlib.harness import Bench, Session
from benchlib.load_leftovers import LEFTOVER_WAIT
from benchlib.load_records import PhaseA
from host.admission import DEFAULT_PER_CLASS
from protocol.errors import RemoteError
from protocol.messages.client import (
    ScriptedProviderConfig,
    SessionCloseParams,
    SessionNewParams,
    SessionNewResult,
)
from protocol.messages.common import McpServerConfig
from protocol.toolclass import ToolClass
from runtime.link import ConnectionClosed

PLUGIN_SLOTS = DEFAULT_PER_CLASS[ToolClass.PLUGIN]
"""Plugin calls the host runs at once; the rest queue in its admission."""
PLUGIN_SERVER = (pathlib.Path(__file__).resolve().parents[2] / "tests" / "plugins"
                 / "servers" / "tools_server.py")
"""The MCP SDK server of the plugin tests: ``wait_politely`` waits a minute, and a cancel
ends it at once (it writes ``started-politely`` with its pid, then ``cancelled-politely``)."""
PLUGIN_TOOL = "mcp__tools__wait_politely"


async def new_plugin_session(bench: Bench, workspace: pathlib.Path,
                             script: list[list[dict[str, Any]]]) -> Session:
    """A session with its own MCP server (the harness's sessions have none)."""
    server = McpServerConfig("tools", sys.executable, (str(PLUGIN_SERVER),))
    result: SessionNewResult = await bench.request("session.new", SessionNewParams(
        str(workspace), "auto", ScriptedProviderConfig(script=script), (server,)))
    return bench.sessions.setdefault(result.session_id, Session(result.session_id))


def server_pid(workspace: pathlib.Path) -> int | None:
    """The pid the plugin server of ``workspace`` left when its call started, if it did."""
    try:
        return int((workspace / "started-politely").read_text())
    except (OSError, ValueError):
        return None  # not started yet, or being written


def plugin_servers(bench: Bench) -> set[int]:
    """The marked processes running ``PLUGIN_SERVER`` (every plugin session has one)."""
    servers = set()
    for member in bench.members():
        try:
            if str(PLUGIN_SERVER) in psutil.Process(member.pid).cmdline():
                servers.add(member.pid)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            pass
    return servers


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


async def close_plugin_sessions(bench: Bench, sessions: list[Session],
                                workspaces: list[pathlib.Path], servers: set[int],
                                out: PhaseA) -> None:
    """Count the plugin calls cancelled at their server; close their sessions, after which
    no server may be left."""
    started = [w for w in workspaces if (w / "started-politely").exists()]
    out.plugin_calls = len(started)
    out.plugin_cancelled = sum(1 for w in started if (w / "cancelled-politely").exists())
    for session in sessions:
        try:
            with trio.fail_after(LEFTOVER_WAIT):
                await bench.request("session.close", SessionCloseParams(session.session_id))
        except (trio.TooSlowError, RemoteError, ConnectionClosed) as exc:
            out.anomalies.append(f"{session.session_id}: session.close failed: {exc!r}")
    deadline = time.monotonic() + LEFTOVER_WAIT
    while True:
        left = sorted(p for p in servers if _alive(p))
        if not left or time.monotonic() > deadline:
            break
        await trio.sleep(0.05)
    out.plugin_servers_left = [str(pid) for pid in left]
    for pid in left:
        psutil.Process(pid).kill()
