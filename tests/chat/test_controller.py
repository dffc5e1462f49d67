"""The chat's controller against a real ``quiesce serve``, with a recording screen."""

from __future__ import annotations

import json
import os
import pathlib
import signal
from collections.abc import Sequence

import pytest
import trio
from rich.text import Text

from protocol.messages.client import ScriptedProviderConfig
from runtime.clients.chat.commands import Prompt, Quit, Stop
from runtime.clients.chat.controller import ChatError, ChatOptions, Controller
from tests.conftest import Marked
from tests.support import command_line, marked_processes

SLOW = [[{"text": "Working"},
         {"toolCall": {"id": "b", "name": "Bash", "args": {"command": "sleep 300"}}}]]


class Recording:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.refreshes = 0

    def commit(self, lines: Sequence[Text]) -> None:
        self.lines.extend(str(line) for line in lines)

    def refresh(self) -> None:
        self.refreshes += 1

    async def wait_for(self, text: str) -> None:
        with trio.fail_after(15):
            while not any(text in line for line in self.lines):
                await trio.sleep(0.02)


def _options(tmp_path: pathlib.Path, marked: Marked) -> ChatOptions:
    script = tmp_path / "script.json"
    script.write_text(json.dumps(SLOW))
    return ChatOptions(str(tmp_path), "auto", ScriptedProviderConfig(path=str(script)),
                       tmp_path / "data" / "chat-serve.log", env=marked.env())


async def test_quit_while_a_turn_runs_stops_it_and_settles_first(
        tmp_path: pathlib.Path, marked: Marked) -> None:
    screen = Recording()
    controller = Controller(_options(tmp_path, marked), screen)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(controller.run)
        await screen.wait_for("Esc stops the turn")
        controller.post(Prompt("go"))
        await screen.wait_for("● Bash (process) sleep 300")
        controller.post(Quit())
    lines = screen.lines
    settled = next(i for i, line in enumerate(lines) if "turn settled in" in line)
    assert any("■ Stop (quit): stop timeline" in line for line in lines[:settled])
    assert "b (Bash): ABORTED, process tree terminated" in "\n".join(lines[:settled])
    assert lines[-1] == "quiesce serve exited with status 0"
    assert (tmp_path / "data" / "chat-serve.log").exists()  # its logs went there, not to us


async def test_a_stop_then_quit_posted_together_show_the_stop_the_user_asked_for(
        tmp_path: pathlib.Path, marked: Marked) -> None:
    """Ctrl-C twice in one read posts Stop and Quit back to back: the quit joins the
    Ctrl-C stop (one timeline, titled by the key pressed) instead of starting its own."""
    screen = Recording()
    controller = Controller(_options(tmp_path, marked), screen)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(controller.run)
        await screen.wait_for("Esc stops the turn")
        controller.post(Prompt("go"))
        await screen.wait_for("● Bash (process) sleep 300")
        controller.post(Stop(via="Ctrl-C"))
        controller.post(Quit())
    lines = screen.lines
    titles = [line for line in lines if line.startswith("■ Stop (")]
    assert titles == ["■ Stop (Ctrl-C): stop timeline"], titles
    assert lines[-1] == "quiesce serve exited with status 0"


async def test_a_daemon_that_dies_ends_the_chat_with_a_chat_error(
        tmp_path: pathlib.Path, marked: Marked) -> None:
    screen = Recording()
    options = _options(tmp_path, marked)
    controller = Controller(options, screen)
    with pytest.raises(BaseExceptionGroup) as caught:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(controller.run)
            await screen.wait_for("Esc stops the turn")
            controller.post(Prompt("go"))
            await screen.wait_for("● Bash (process) sleep 300")
            serve = [p for p in marked_processes(marked.mark)
                     if "runtime serve" in command_line(p)]
            assert len(serve) == 1
            os.kill(serve[0].pid, signal.SIGKILL)
            with trio.fail_after(15):
                await trio.sleep_forever()
    chat_errors, others = caught.value.split(ChatError)
    assert chat_errors is not None and others is None, caught.value
    messages = [str(e) for e in _leaves(chat_errors)]
    assert all("quiesce serve closed the link" in m for m in messages), messages
    assert all(str(options.log_path) in m for m in messages)


def _leaves(group: BaseExceptionGroup[BaseException]) -> list[BaseException]:
    return [leaf for e in group.exceptions
            for leaf in (_leaves(e) if isinstance(e, BaseExceptionGroup) else [e])]
