"""A real terminal for ``quiesce chat``: a private tmux server, keys in, screen out."""

from __future__ import annotations

import json
import pathlib
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence

import pytest

TMUX = shutil.which("tmux")
needs_tmux = pytest.mark.skipif(
    TMUX is None, reason="tmux is not installed (.ci/run installs it from Debian's packages)")

REPO = pathlib.Path(__file__).resolve().parents[2]
WIDTH, HEIGHT = 120, 45
COMMAND_TIMEOUT = 5.0
EXITED = re.compile(r"\[chat exited with status (\d+)\]")


class Pane:
    """One tmux server on a private socket, one window of a fixed size."""

    def __init__(self, env: Mapping[str, str]) -> None:
        assert TMUX is not None
        self._dir = pathlib.Path(tempfile.mkdtemp(prefix="qtmux-"))  # short: a socket path
        self._socket = str(self._dir / "sock")
        self._env = dict(env)
        config = self._dir / "tmux.conf"
        # remain-on-exit: the last screen and the exit status stay readable.
        config.write_text("set -g remain-on-exit on\nset -g history-limit 5000\n")
        self._config = str(config)

    def tmux(self, *args: str) -> str:
        assert TMUX is not None
        done = subprocess.run([TMUX, "-S", self._socket, "-f", self._config, *args],
                              env=self._env, capture_output=True, text=True,
                              timeout=COMMAND_TIMEOUT, check=True)
        return done.stdout

    def start(self, command: Sequence[str], width: int = WIDTH) -> None:
        # The server inherits this environment (the test's process marker and data dir),
        # and so do the chat, its daemon and its host. A shell prints the chat's exit
        # status; it catches SIGINT (a Ctrl-C typed while prompt_toolkit briefly hands the
        # terminal back to cooked mode signals the whole foreground group; the chat takes
        # it as a key) and the chat gets the default disposition back at exec.
        line = f'trap : INT; {shlex.join(command)}; echo "[chat exited with status $?]"'
        self.tmux("new-session", "-d", "-x", str(width), "-y", str(HEIGHT), "-s", "chat",
                  "-c", str(REPO), "sh", "-c", line)

    def send(self, *keys: str) -> None:
        self.tmux("send-keys", "-t", "chat", *keys)

    def type(self, text: str) -> None:
        self.tmux("send-keys", "-t", "chat", "-l", text)

    def screen(self) -> str:
        """The pane's text, scrollback included, without colours."""
        return self.tmux("capture-pane", "-p", "-J", "-S", "-", "-t", "chat")

    def visible(self) -> str:
        return self.tmux("capture-pane", "-p", "-J", "-t", "chat")

    def wait_for(self, check: str | Callable[[str], bool], timeout: float = 15.0) -> str:
        predicate = (lambda s: check in s) if isinstance(check, str) else check
        deadline = time.monotonic() + timeout
        while True:
            screen = self.screen()
            if predicate(screen):
                return screen
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {check!r}; the screen:\n{screen}")
            time.sleep(0.05)

    def exit_status(self, timeout: float = 20.0) -> int:
        """Wait for the chat to exit; its status (as the shell that ran it printed it)."""
        screen = self.wait_for(lambda s: EXITED.search(s) is not None, timeout)
        found = EXITED.search(screen)
        assert found is not None
        return int(found.group(1))

    def close(self) -> None:
        try:
            self.tmux("kill-server")
        except subprocess.CalledProcessError:
            pass  # already gone
        shutil.rmtree(self._dir, ignore_errors=True)


def chat_command(workspace: pathlib.Path, script: list[object], *extra: str) -> list[str]:
    path = workspace.parent / "script.json"
    path.write_text(json.dumps(script))
    return [sys.executable, "-m", "runtime", "chat", "--workspace", str(workspace),
            "--provider", f"scripted:{path}", *extra]
