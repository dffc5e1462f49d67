"""``quiesce chat --provider anthropic`` in a real terminal, against a local server that
speaks the Messages stream format (run by trio in a thread of the test)."""

from __future__ import annotations

import pathlib
import sys
import threading
from collections.abc import Iterator

import pytest
import trio

from tests.chat.pane import Pane, needs_tmux
from tests.conftest import Marked
from tests.providers.fakeserver import FakeServer, Reply
from tests.providers.messages_recorded import ev, finish, ping, start, text_block

pytestmark = needs_tmux

READY = "Esc stops the turn"


class ServerThread:
    """A FakeServer in its own trio loop; stopped (and joined) by :meth:`close`."""

    def __init__(self, *replies: Reply) -> None:
        self.server = FakeServer()
        self.server.queue(*replies)
        self._ready = threading.Event()
        self._token: trio.lowlevel.TrioToken | None = None
        self._cancel: trio.CancelScope | None = None
        self._thread = threading.Thread(target=trio.run, args=(self._main,), daemon=True)
        self._thread.start()
        assert self._ready.wait(5), "the fake server did not start"

    async def _main(self) -> None:
        async with trio.open_nursery() as nursery:
            self._cancel = nursery.cancel_scope
            self._token = trio.lowlevel.current_trio_token()
            await self.server.start(nursery)
            self._ready.set()

    def gone(self, timeout: float) -> bool:
        assert self._token is not None

        async def wait() -> bool:
            with trio.move_on_after(timeout):
                await self.server.gone.wait()
            return self.server.gone.is_set()

        return bool(trio.from_thread.run(wait, trio_token=self._token))

    def close(self) -> None:
        if self._token is not None and self._cancel is not None:
            trio.from_thread.run_sync(self._cancel.cancel, trio_token=self._token)
        self._thread.join(5)


@pytest.fixture
def claude() -> Iterator[ServerThread]:
    thread = ServerThread(
        Reply(body=(start() + text_block(0, "Hello from ", "the Messages stream.") + finish(),)),
        Reply(body=(start() + ev("content_block_start", index=0, content_block={
            "type": "text", "text": ""}) + ev("content_block_delta", index=0, delta={
                "type": "text_delta", "text": "Thinking about it"}),), forever=ping()))
    try:
        yield thread
    finally:
        thread.close()


def test_chat_with_the_anthropic_provider_streams_and_stops(
        tmp_path: pathlib.Path, marked: Marked, claude: ServerThread) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    pane = Pane(marked.env(ANTHROPIC_BASE_URL=claude.server.base_url,
                           ANTHROPIC_API_KEY="sk-ant-chat", ANTHROPIC_MODEL="claude-test"))
    try:
        pane.start([sys.executable, "-m", "runtime", "chat", "--workspace", str(workspace),
                    "--provider", "anthropic", "--permission-mode", "auto"])
        pane.wait_for(READY)
        pane.type("hello")
        pane.send("Enter")
        pane.wait_for("Hello from the Messages stream.")
        pane.type("and now?")
        pane.send("Enter")
        pane.wait_for("Thinking about it")
        pane.send("Escape")
        screen = pane.wait_for("turn settled in")
        assert "turn/end aborted (user) on disk" in screen
        assert claude.gone(5), "the client did not leave the stream after the stop"
        request = claude.server.requests[0]
        assert request.target == "/v1/messages"
        assert request.headers["x-api-key"] == "sk-ant-chat"
        assert request.json()["model"] == "claude-test"
        pane.send("C-d")
        assert pane.exit_status() == 0
    finally:
        pane.close()
