"""``quiesce chat`` asks before a workspace's declared servers run (issue 26, items 2 and
4), in a real terminal (tmux): the commands shown in full, nothing run until ``/trust``,
each server's state shown at start and by ``/tools``, asked again once the file changed."""

from __future__ import annotations

import pathlib
import time

from tests.chat.pane import Pane, chat_command, needs_tmux
from tests.conftest import Marked
from tests.e2e.test_workspace_trust import hostile

pytestmark = needs_tmux

READY = "Esc stops the turn"
QUESTION = "declares servers that would run on"


def squeezed(text: str) -> str:
    """Without whitespace: the chat wraps long lines at the terminal's width."""
    return "".join(text.split())


def run_chat(marked: Marked, workspace: pathlib.Path, answer: str) -> str:
    """One chat in the workspace: the question answered with ``answer``, ``/tools``, quit.
    The screen, as it was at the end."""
    pane = Pane(marked.env(QUIESCE_LOG_LEVEL="INFO", OPENAI_API_KEY="sk-user-secret"))
    try:
        pane.start(chat_command(workspace, [[{"text": "hi"}]]))
        if answer:
            pane.wait_for(QUESTION)
            time.sleep(0.3)
            assert READY not in pane.screen(), "the session opened before the answer"
            pane.type(answer)
            pane.send("Enter")
        pane.wait_for(READY)
        pane.type("/tools")
        pane.send("Enter")
        pane.wait_for(lambda s: s.count("plugin servers:") == 2)
        pane.type("/quit")
        pane.send("Enter")
        assert pane.exit_status() == 0
        return pane.screen()
    finally:
        pane.close()


def test_chat_shows_the_commands_and_runs_nothing_until_trusted(
        tmp_path: pathlib.Path, marked: Marked) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    evidence = tmp_path / "FILE"
    args = hostile(workspace, evidence)
    full = f"sh -c '{args[1]}'"

    screen = run_chat(marked, workspace, "/not-now")
    assert squeezed(full) in squeezed(screen), screen  # the command, in full
    assert squeezed(f"(in {workspace})") in squeezed(screen)
    assert "evil untrusted, not started" in screen
    time.sleep(0.3)
    assert not evidence.exists(), "a server of an untrusted workspace ran"

    screen = run_chat(marked, workspace, "/trust")
    assert "evil failed:" in screen  # it ran (and is no MCP server): shown, not only logged
    assert evidence.read_text().splitlines() == ["ran"]  # and saw no API key
    evidence.unlink()

    screen = run_chat(marked, workspace, "")  # trusted content: not asked
    assert QUESTION not in screen and "evil failed:" in screen
    assert evidence.read_text().splitlines() == ["ran"]
    evidence.unlink()

    hostile(workspace, evidence, extra="; true")  # changed: asked again
    screen = run_chat(marked, workspace, "/never")
    assert "evil untrusted, not started" in screen
    time.sleep(0.3)
    assert not evidence.exists()


def test_chat_shows_the_environment_a_declaration_sets(
        tmp_path: pathlib.Path, marked: Marked) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    evidence = tmp_path / "FILE"
    hostile(workspace, evidence, env={"LD_PRELOAD": "./payload.so"})
    screen = run_chat(marked, workspace, "/not-now")
    assert squeezed("evil: LD_PRELOAD=./payload.so sh -c") in squeezed(screen), screen
    assert not evidence.exists()
