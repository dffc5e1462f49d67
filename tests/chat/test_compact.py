"""``/compact`` in the chat, against a real ``quiesce serve``: the compaction's course
shown from the daemon's events, a turn's tokens under its end, and Esc stopping a slow
compaction."""

from __future__ import annotations

import json
import pathlib

import trio

from protocol.messages.client import ScriptedProviderConfig
from runtime.clients.chat.commands import Compact, Prompt, Quit, Stop, parse_line
from runtime.clients.chat.controller import ChatOptions, Controller
from tests.chat.test_controller import Recording
from tests.conftest import Marked

SCRIPT = [[{"text": "one"}, {"usage": {"input": 100, "output": 10}}], [{"text": "two"}],
          [{"text": "SUMMARY"}], [{"text": "three"}],
          [{"text": "half"}, {"sleepMs": 30_000}]]


def _options(tmp_path: pathlib.Path, marked: Marked) -> ChatOptions:
    script = tmp_path / "script.json"
    script.write_text(json.dumps(SCRIPT))
    return ChatOptions(str(tmp_path), "auto", ScriptedProviderConfig(path=str(script)),
                       tmp_path / "data" / "chat-serve.log", env=marked.env())


def test_the_command_parses() -> None:
    assert parse_line("/compact") == Compact()


async def test_compact_then_stop_a_slow_one(tmp_path: pathlib.Path, marked: Marked) -> None:
    screen = Recording()
    controller = Controller(_options(tmp_path, marked), screen)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(controller.run)
        await screen.wait_for("Esc stops the turn")
        controller.post(Prompt("first"))
        await screen.wait_for("tokens: 100 in / 10 out")
        controller.post(Prompt("second"))
        await screen.wait_for("tokens: ~")  # unreported: estimated, marked
        controller.post(Compact())
        await screen.wait_for("✓ history compacted: 1 turn(s) summarised")
        controller.post(Prompt("third"))
        await screen.wait_for("three")
        controller.post(Compact())  # its summary streams for 30 s
        await screen.wait_for("⋯ compacting the history (as asked)")
        controller.post(Stop())
        await screen.wait_for("■ compaction stopped; the history is unchanged")
        controller.post(Quit())
    text = "\n".join(screen.lines)
    assert "nothing to stop" not in text
