"""``quiesce chat`` in a real terminal (tmux): keys in, the screen and the processes checked.

Each test runs the chat in its own tmux server (private socket, fixed 120x45 window)
whose environment carries the test's process marker and temporary data directory:
the chat, its ``quiesce serve``, the host and every tool process are marked, and the
``marked`` fixture fails the test if any of them survives it.
"""

from __future__ import annotations

import pathlib
import sys
import time
from collections.abc import Iterator

import psutil
import pytest

from runtime.clients.chat.keys import SEEN_S
from tests.chat.pane import Pane, chat_command, needs_tmux
from tests.conftest import Marked
from tests.support import command_line, marked_processes

pytestmark = needs_tmux

READ_S = SEEN_S + 0.2
READY = "Esc stops the turn"
TREE = ("echo 'build: starting'; sleep 300 & setsid sleep 300 & ( sleep 300 & ) ; "
        "nohup sleep 300 >/dev/null 2>&1 & "
        "for i in 1 2 3 4 5 6 7 8 9; do echo \"build: step $i\"; sleep 0.2; done; sleep 300")


@pytest.fixture
def pane(marked: Marked) -> Iterator[Pane]:
    # Depends on `marked`, so the tmux server is gone before survivors are looked for.
    p = Pane(marked.env(QUIESCE_LOG_LEVEL="INFO"))
    try:
        yield p
    finally:
        p.close()


def _sleepers(marked: Marked) -> list[psutil.Process]:
    return [p for p in marked_processes(marked.mark) if "sleep 300" in command_line(p)
            or command_line(p).startswith("sleep")]


def _workspace(tmp_path: pathlib.Path) -> pathlib.Path:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    return workspace


def test_esc_stops_a_bash_tree_and_shows_the_timeline(
        tmp_path: pathlib.Path, marked: Marked, pane: Pane) -> None:
    script = [[{"reasoning": "The user wants a build."}, {"text": "Running the build."},
               {"toolCall": {"id": "bash-1", "name": "Bash", "args": {"command": TREE}}}],
              [{"text": "The build finished."}]]
    pane.start(chat_command(_workspace(tmp_path), script, "--permission-mode", "auto"))
    pane.wait_for(READY)
    pane.type("build it")
    pane.send("Enter")
    # Live progress: the Bash output tail under a running call.
    running = pane.wait_for("build: step 2")
    assert "> build it" in running and "Running the build." in running
    assert "● Bash (process) echo 'build: starting'" in running
    assert len(_sleepers(marked)) >= 4  # the tree is really there: background, setsid, ...

    pane.send("Escape")
    screen = pane.wait_for("turn settled in")
    assert "■ Stop (Esc): stop timeline" in screen
    assert "agent.abort sent (cause user)" in screen
    assert "tools.abort bash-1 (Bash): host found it running, body running" in screen
    assert "bash-1 (Bash): ABORTED, process tree terminated:" in screen
    assert "turn/end aborted (user) on disk" in screen
    assert "bash-1     Bash     process   ABORTED" in screen
    assert "alive after it settled" in screen and ", 0 alive after it settled" in screen
    # The lines come in the order the stop settled in.
    order = [screen.index(s) for s in ("agent.abort sent", "tools.abort bash-1",
                                       "bash-1 (Bash): ABORTED", "turn/end aborted",
                                       "turn settled in")]
    assert order == sorted(order)
    assert "The build finished." not in screen
    # When the answer is on screen, the tree is gone: nothing to wait for.
    assert _sleepers(marked) == []

    # Ctrl-C twice within a second: quit (nothing runs, so at once); the daemon exits 0.
    pane.send("C-c")
    pane.send("C-c")
    assert pane.exit_status() == 0
    assert "quiesce serve exited with status 0" in pane.screen()
    # The chat returns only once its daemon (and the daemon's host) exited.
    assert [p for p in marked_processes(marked.mark) if not p.name().startswith("tmux")] == []


def test_a_permission_prompt_answered_and_one_withdrawn_by_a_stop(
        tmp_path: pathlib.Path, marked: Marked, pane: Pane) -> None:
    workspace = _workspace(tmp_path)
    script = [[{"text": "Writing two files."},
               {"toolCall": {"id": "w1", "name": "Write",
                             "args": {"path": "one.txt", "content": "one\n"}}}],
              [{"toolCall": {"id": "w2", "name": "Write",
                             "args": {"path": "two.txt", "content": "two\n"}}}],
              [{"text": "Both written."}]]
    pane.start(chat_command(workspace, script, "--permission-mode", "ask"))
    pane.wait_for(READY)
    pane.type("write the files")
    pane.send("Enter")
    asked = pane.wait_for("y  allow once          a  allow for the session")
    assert '? Write wants to run: {"path":"one.txt"' in asked
    assert not (workspace / "one.txt").exists()  # nothing runs before the answer

    time.sleep(READ_S)  # Enter answers only a prompt on screen long enough to read
    pane.type("y")
    pane.send("Enter")
    asked = pane.wait_for('? Write wants to run: {"path":"two.txt"')
    assert "permission for Write: allow-once" in asked
    assert "✓ Write ok" in asked and "[w1]" in asked
    assert (workspace / "one.txt").read_text() == "one\n"

    pane.send("Escape")
    screen = pane.wait_for("turn settled in")
    assert "permission prompt for Write withdrawn by the stop (the call never ran)" in screen
    assert "tools.abort w2 (Write): host found it permission-pending, body never started" \
        in screen
    assert "w2 (Write): ABORTED_BEFORE_DISPATCH" in screen
    # The question vanished from the live part; only the note remains.
    assert "wants to run" not in pane.visible()
    assert not (workspace / "two.txt").exists()
    assert "Both written." not in screen

    pane.type("/quit")
    pane.send("Enter")
    assert pane.exit_status() == 0


def test_queued_prompts_are_dropped_by_a_stop_and_kept_by_stop_keep(
        tmp_path: pathlib.Path, marked: Marked, pane: Pane) -> None:
    slow = [{"text": "Working"}, {"toolCall": {"id": "b", "name": "Bash",
                                               "args": {"command": "sleep 300"}}}]
    script = [slow, slow, slow]
    pane.start(chat_command(_workspace(tmp_path), script, "--permission-mode", "auto"))
    pane.wait_for(READY)
    pane.type("first")
    pane.send("Enter")
    pane.wait_for("● Bash (process) sleep 300")
    pane.type("second")
    pane.send("Enter")
    pane.wait_for("1 prompt(s) queued")
    assert "(queued) second" in pane.screen()

    pane.type("/stop-keep")
    pane.send("Enter")
    # The stopped turn settles, and the queued prompt starts the next turn.
    screen = pane.wait_for(lambda s: "> second" in s and s.count("● Bash (process)") == 2)
    assert "■ Stop (/stop-keep): stop timeline" in screen
    assert "agent.abort sent (cause user, keeping queued prompts)" in screen
    # The timeline is one block, printed when the stop settled; the next turn after it.
    block = screen[screen.index("■ Stop (/stop-keep)"):screen.index("turn settled in")]
    assert "> second" not in block and "Working" not in block
    assert screen.index("turn settled in") < screen.index("> second")

    pane.type("third")
    pane.send("Enter")
    pane.wait_for("1 prompt(s) queued")
    pane.send("Escape")
    screen = pane.wait_for("queued prompt dropped by the stop: third")
    pane.wait_for(lambda s: s.count("turn settled in") == 2)

    pane.type("/sessions")
    pane.send("Enter")
    pane.wait_for("(current)")
    pane.type("/load nope")
    pane.send("Enter")
    pane.wait_for("✗ cannot load nope: malformed session id")
    assert "INVALID_PARAMS" not in pane.screen()

    # Ctrl-C twice while a turn runs: stop, settle, then exit.
    pane.type("fourth")
    pane.send("Enter")
    pane.wait_for(lambda s: s.count("● Bash (process)") == 3)
    assert "> third" not in pane.screen()  # the dropped prompt never ran
    # The call shows before its process runs; the stop's block counts the tool processes
    # it found, so Ctrl-C waits for the one it must report killed.
    deadline = time.monotonic() + 15
    while not _sleepers(marked):
        assert time.monotonic() < deadline, "the fourth turn's sleep never started"
        time.sleep(0.02)
    pane.send("C-c")
    pane.send("C-c")
    assert pane.exit_status() == 0
    screen = pane.screen()
    tail = screen[screen.index("■ Stop (Ctrl-C)"):]
    assert "turn settled in" in tail and ", 0 alive after it settled" in tail
    assert tail.index("turn settled in") < tail.index("quiesce serve exited with status 0")


def test_typing_at_a_permission_prompt_never_answers_it(
        tmp_path: pathlib.Path, marked: Marked, pane: Pane) -> None:
    """A sentence typed while a prompt shows goes to the input line; only a line that is
    exactly one answer letter, submitted with Enter, decides."""
    workspace = _workspace(tmp_path)
    script = [[{"toolCall": {"id": "w1", "name": "Write",
                             "args": {"path": "one.txt", "content": "one\n"}}}],
              [{"toolCall": {"id": "b1", "name": "Bash",
                             "args": {"command": "echo ran > ran.txt"}}}],
              [{"text": "All done."}]]
    pane.start(chat_command(workspace, script, "--permission-mode", "ask"))
    pane.wait_for(READY)
    pane.type("write it")
    pane.send("Enter")
    pane.wait_for('? Write wants to run: {"path":"one.txt"')
    time.sleep(READ_S)  # a line begun at a prompt already read: bound to it
    pane.type("wait, do not do that")
    screen = pane.wait_for("wait, do not do that")
    assert "permission for Write" not in screen
    assert not (workspace / "one.txt").exists()
    assert "? Write wants to run" in pane.visible()  # the prompt is still open
    # Enter on a sentence is refused visibly: the text stays, the prompt stays.
    pane.send("Enter")
    screen = pane.wait_for("a permission prompt is open")
    assert "permission for Write" not in screen
    assert not (workspace / "one.txt").exists()
    pane.wait_for(lambda _: "? Write wants to run" in (v := pane.visible())
                  and "answer y/a/n/d> wait, do not do that" in v)
    pane.send("C-u")
    time.sleep(READ_S)  # Enter answers only a prompt on screen long enough to read
    pane.type("y")
    pane.send("Enter")
    pane.wait_for("permission for Write: allow-once")
    pane.wait_for("? Bash wants to run")
    assert (workspace / "one.txt").read_text() == "one\n"

    pane.type("hang on")
    pane.wait_for("hang on")
    assert "permission for Bash" not in pane.screen()
    assert "? Bash wants to run" in pane.visible()
    assert not (workspace / "ran.txt").exists()
    pane.send("C-u")
    time.sleep(READ_S)  # Enter answers only a prompt on screen long enough to read
    pane.type("n")
    pane.send("Enter")
    pane.wait_for("permission for Bash: deny")
    pane.wait_for("All done.")
    assert not (workspace / "ran.txt").exists()
    pane.type("/quit")
    pane.send("Enter")
    assert pane.exit_status() == 0


def test_data_dir_config_hint_and_this_workspaces_sessions(
        tmp_path: pathlib.Path, marked: Marked, pane: Pane) -> None:
    """--data-dir and --config reach serve; no model configured is said at start-up;
    /sessions lists this workspace's sessions; /load without an id says what it needs."""
    workspace = _workspace(tmp_path)
    other = tmp_path / "other"
    other.mkdir()
    data = tmp_path / "chat-data"
    config = tmp_path / "config.toml"
    config.write_text("max_steps = 3\n")
    # Another workspace's session in the same data dir, made by a first chat.
    pane.start(chat_command(other, [[{"text": "hi"}]], "--data-dir", str(data)))
    pane.wait_for(READY)
    pane.type("/quit")
    pane.send("Enter")
    assert pane.exit_status() == 0
    pane.close()

    second = Pane(marked.env(QUIESCE_LOG_LEVEL="INFO"))
    try:
        second.start([sys.executable, "-m", "runtime",
                      "chat", "--workspace", str(workspace), "--data-dir", str(data),
                      "--config", str(config)])
        screen = second.wait_for(READY)
        assert f"sessions and the daemon's log in {data}" in screen  # said, not silent
        second.wait_for("No model is configured")
        assert "--provider openai" in second.screen()
        assert (data / "chat-serve.log").stat().st_size > 0
        assert not (marked.data_dir / "chat-serve.log").exists()
        second.type("/sessions")
        second.send("Enter")
        screen = second.wait_for("1 in other workspaces")
        assert f"sessions in {workspace}:" in screen and "(current)" in screen
        assert str(other) not in screen.split(f"sessions in {workspace}:")[1]
        second.type("/sessions all")
        second.send("Enter")
        second.wait_for(lambda s: str(other) in s.split(f"sessions in {workspace}:")[1])
        second.type("/load")
        second.send("Enter")
        second.wait_for("/load needs one session id")
        assert "unknown command" not in second.screen()
        second.type("/quit")
        second.send("Enter")
        assert second.exit_status() == 0
    finally:
        second.close()


def test_at_60_columns_the_prompt_and_its_answers_fit(
        tmp_path: pathlib.Path, marked: Marked, pane: Pane) -> None:
    workspace = _workspace(tmp_path)
    script = [[{"toolCall": {"id": "w1", "name": "Write",
                             "args": {"path": "one.txt", "content": "one\n"}}}],
              [{"text": "ok"}]]
    pane.start(chat_command(workspace, script, "--permission-mode", "ask"), width=60)
    pane.wait_for("Esc stops the turn")
    pane.type("write")
    pane.send("Enter")
    pane.wait_for(lambda _: "d  deny for the session" in pane.visible())
    visible = pane.visible().splitlines()
    for whole in ("  answer: type one letter, then Enter · Esc stops the turn",
                  "    y  allow once          a  allow for the session",
                  "    n  deny                d  deny for the session"):
        assert whole in visible, (whole, visible)  # each on its own line, not cut
    assert "waiting for permission" in pane.visible()  # no timer runs meanwhile
    time.sleep(READ_S)  # Enter answers only a prompt on screen long enough to read
    pane.type("y")
    pane.send("Enter")
    pane.wait_for("✓ Write ok")
    pane.type("/quit")
    pane.send("Enter")
    assert pane.exit_status() == 0


def test_a_provider_that_cannot_start_is_said_plainly(
        tmp_path: pathlib.Path, marked: Marked) -> None:
    p = Pane({k: v for k, v in marked.env().items() if k != "OPENAI_MODEL"})
    try:
        p.start([sys.executable, "-m", "runtime", "chat", "--workspace",
                 str(_workspace(tmp_path)), "--provider", "openai"])
        assert p.exit_status() == 1
        screen = p.screen()
        assert "cannot open a session in" in screen
        assert "openai: no model in the provider config and OPENAI_MODEL is unset" in screen
        assert "INVALID_PARAMS" not in screen and "openai provider: openai" not in screen
    finally:
        p.close()


def test_a_resize_leaves_no_stale_live_lines(
        tmp_path: pathlib.Path, marked: Marked, pane: Pane) -> None:
    """Narrowed mid-call, the terminal re-wraps the old live part; the chat redraws the
    screen, so one spinner line is left, and what was printed is there, wrapped anew."""
    command = ("for i in $(seq 1 200); do echo step $i of a build whose output lines are "
               "wide; sleep 0.1; done")
    script = [[{"text": "Working on it."},
               {"toolCall": {"id": "b", "name": "Bash", "args": {"command": command}}}]]
    pane.start(chat_command(_workspace(tmp_path), script, "--permission-mode", "auto"))
    pane.wait_for(READY)
    pane.type("go")
    pane.send("Enter")
    pane.wait_for("step 5 of a build")
    pane.tmux("resize-window", "-t", "chat", "-x", "60")

    def spinners(_: str) -> bool:
        lines = pane.visible().splitlines()
        live = [line for line in lines if line and line[0] in "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"]
        return len(live) == 1 and "Working on it." in lines and "> go" in lines

    pane.wait_for(spinners, timeout=10)
    time.sleep(0.5)  # a few more redraws: still one
    assert spinners("")
    pane.send("Escape")
    pane.wait_for("turn settled in")
    pane.type("/quit")
    pane.send("Enter")
    assert pane.exit_status() == 0
