"""SIGKILL of a busy daemon at random moments (``scripts/crashtest.py``, short mode): every
log loads afterwards and every turn is balanced or honestly repaired."""

from __future__ import annotations

import importlib.util
import json
import pathlib
import random
import subprocess
import sys
from types import ModuleType
from typing import Any

import trio

from protocol.causes import UserCause
from protocol.errors import RemoteError
from protocol.messages.events import (
    SessionMeta,
    ToolCallEvent,
    ToolResultEvent,
    TurnEnd,
    TurnOutcome,
    TurnStart,
)
from protocol.tools import ABORTED_TEXT, TextContent
from protocol.transcript import INTERRUPTED
from runtime.agent.sessionlog import LogContents
from runtime.link import ConnectionClosed
from tests.conftest import Marked

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "crashtest.py"


def crashtest() -> ModuleType:
    if "crashtest" not in sys.modules:
        spec = importlib.util.spec_from_file_location("crashtest", SCRIPT)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules["crashtest"] = module  # dataclasses look their module up
        spec.loader.exec_module(module)
    return sys.modules["crashtest"]


def test_every_log_loads_after_random_kills(tmp_path: pathlib.Path, marked: Marked) -> None:
    report = tmp_path / "report.json"
    run = subprocess.run([sys.executable, str(SCRIPT), "--rounds", "3", "--sessions", "4",
                          "--seed", "15", "--min-delay", "0.1", "--max-delay", "1.0",
                          "--json", str(report)],
                         cwd=ROOT, env=marked.env(), capture_output=True, text=True,
                         timeout=240, check=False)
    assert run.returncode == 0, run.stdout + run.stderr
    data = json.loads(report.read_text())
    assert data["problems"] == []
    assert data["rounds"] == 3 and data["sessions"] == 4
    assert data["loads"] >= 4 + 3  # the last daemon loads all; each round the earlier ones
    assert data["prompts_answered"] > 0
    assert data["repaired_turns"] > 0  # the kills landed inside turns


def test_the_checks_catch_what_a_load_must_not_do() -> None:
    check_log = crashtest().check_log
    meta = SessionMeta(0, "", "s", "/w", "auto", 0.0)
    start = TurnStart(1, "t1")
    call = ToolCallEvent(2, "t1", 0, "c1", "Read", "read-only", {})
    before = LogContents((meta, start, call), 0)
    result = ToolResultEvent(3, "t1", 0, "c1", True, "ABORTED", (TextContent(ABORTED_TEXT),),
                             {"recovered": "the runtime stopped mid-call"})
    end = TurnEnd(4, "t1", TurnOutcome("interrupted", error=INTERRUPTED), "error")
    assert check_log("s", before, [meta, start, call, result, end]) == []
    # An invented end, an unanswered call, a changed prefix, a gap in the seqs:
    invented = TurnEnd(4, "t1", TurnOutcome("aborted", UserCause()), "cancelled")
    assert check_log("s", before, [meta, start, call, result, invented])
    assert check_log("s", before, [meta, start, call, TurnEnd(3, "t1", end.end, "error")])
    assert check_log("s", before, [meta, TurnStart(1, "t9"), call, result, end])
    assert check_log("s", before, [meta, start, call, result,
                                   TurnEnd(5, "t1", end.end, "error")])
    # A repair of a turn that was not open:
    closed = LogContents((meta, start, TurnEnd(2, "t1", TurnOutcome("completed"), "end_turn")), 0)
    assert check_log("s", closed, [*closed.events, TurnEnd(3, "t1", end.end, "error")])


class _Answering:
    """Stands for the daemon's client: every request fails with ``error``."""

    def __init__(self, error: Exception) -> None:
        self.error = error

    async def request(self, method: str, params: Any) -> Any:
        await trio.lowlevel.checkpoint()
        raise self.error


async def test_only_a_closed_connection_counts_as_the_kill() -> None:
    report = crashtest().Report(0)
    with trio.fail_after(5):
        await crashtest().busy(_Answering(ConnectionClosed("link closed")), "s-1",
                               random.Random(1), report)
    assert report.problems == []
    with trio.fail_after(5):
        await crashtest().busy(_Answering(RemoteError(-32603, "boom")), "s-1",
                               random.Random(1), report)
    assert report.problems and all("s-1: answered" in p for p in report.problems)
