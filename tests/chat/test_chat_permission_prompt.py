"""The chat's permission prompt shows the whole call before a decision, in a real terminal.

A user answers ``y`` to what is on the screen: the whole command (wrapped at the
terminal's width, never cut), or, for arguments too long for the live part, the whole
call printed above it in the scrollback.
"""

from __future__ import annotations

import pathlib
import time
from collections.abc import Iterator

import pytest

from runtime.clients.chat.keys import SEEN_S
from tests.chat.pane import Pane, chat_command, needs_tmux
from tests.conftest import Marked

pytestmark = needs_tmux

READ_S = SEEN_S + 0.2
ANSWERS = "n  deny                d  deny for the session"


@pytest.fixture
def pane(marked: Marked) -> Iterator[Pane]:
    p = Pane(marked.env(QUIESCE_LOG_LEVEL="INFO"))
    try:
        yield p
    finally:
        p.close()


def _squeezed(text: str) -> str:
    """``text`` without whitespace: where the terminal's rows were wrapped does not matter."""
    return "".join(text.split())


def _long_command() -> str:
    steps = " && ".join(f"echo step {i} of the release build" for i in range(1, 9))
    command = f"{steps}; rm -rf precious"
    assert len(command) >= 300
    return command


@pytest.mark.parametrize("width", [120, 60])
def test_a_300_character_command_is_shown_whole_before_the_answer(
        tmp_path: pathlib.Path, marked: Marked, pane: Pane, width: int) -> None:
    workspace = tmp_path / "ws"
    (workspace / "precious").mkdir(parents=True)
    command = _long_command()
    script = [[{"toolCall": {"id": "b1", "name": "Bash", "args": {"command": command}}}],
              [{"text": "Denied, so nothing ran."}]]
    pane.start(chat_command(workspace, script, "--permission-mode", "ask"), width=width)
    pane.wait_for("Esc stops the turn")
    pane.type("release")
    pane.send("Enter")
    pane.wait_for(lambda _: ANSWERS in pane.visible())
    visible = pane.visible()
    # The whole command, its end included, is on the screen while the question is asked.
    assert _squeezed(command) in _squeezed(visible), visible
    assert all(len(row) <= width for row in visible.splitlines())
    time.sleep(READ_S)  # Enter answers only a prompt on screen long enough to read
    pane.type("n")
    pane.send("Enter")
    pane.wait_for("Denied, so nothing ran.")
    assert (workspace / "precious").is_dir()
    pane.type("/quit")
    pane.send("Enter")
    assert pane.exit_status() == 0


def test_arguments_too_long_for_the_live_part_are_printed_whole_above_it(
        tmp_path: pathlib.Path, marked: Marked, pane: Pane) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    content = "".join(f"line {i} of a long file\n" for i in range(200)) + "THE-LAST-LINE\n"
    script = [[{"toolCall": {"id": "w1", "name": "Write",
                             "args": {"path": "long.txt", "content": content}}}],
              [{"text": "Written."}]]
    pane.start(chat_command(workspace, script, "--permission-mode", "ask"))
    pane.wait_for("Esc stops the turn")
    pane.type("write it")
    pane.send("Enter")
    pane.wait_for(lambda _: ANSWERS in pane.visible())
    # The live part points at the call printed in full above it (scroll back to read).
    assert "printed above" in pane.visible()
    screen = pane.screen()
    for i in (0, 99, 199):
        assert f"line {i} of a long file" in screen
    assert "THE-LAST-LINE" in screen
    time.sleep(READ_S)
    pane.type("y")
    pane.send("Enter")
    pane.wait_for("Written.")
    assert (workspace / "long.txt").read_text() == content
    pane.type("/quit")
    pane.send("Enter")
    assert pane.exit_status() == 0
