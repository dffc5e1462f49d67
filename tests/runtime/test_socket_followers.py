"""What the socket clients' hub keeps of the sessions a client names: a follower entry for
a session that exists, and nothing for one that does not (a client naming thousands of
missing ids must not grow the daemon), nor for a client gone."""

from __future__ import annotations

import json
import pathlib
from typing import Any

import trio
import trio.testing

from runtime.daemon.socket_clients import SocketClients
from tests.runtime.test_session_lifecycle import _new, _serving

INIT = {"protocolVersion": "1.0", "clientInfo": {"name": "test"}}
MISSING = 300


class _Wire:
    def __init__(self, stream: trio.StapledStream[Any, Any]) -> None:
        self._stream = stream
        self._buffer = b""

    async def call(self, frames: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Write the frames in one go; every answer, in id order."""
        await self._stream.send_all(b"".join(json.dumps(f).encode() + b"\n" for f in frames))
        answers: dict[int, dict[str, Any]] = {}
        while len(answers) < len(frames):
            while b"\n" not in self._buffer:
                self._buffer += await self._stream.receive_some()
            line, self._buffer = self._buffer.split(b"\n", 1)
            message = json.loads(line)
            if "id" in message and ("result" in message or "error" in message):
                answers[message["id"]] = message
        return [answers[k] for k in sorted(answers)]


async def test_requests_naming_missing_sessions_leave_the_hub_nothing(
        tmp_path: pathlib.Path, autojump_clock: trio.testing.MockClock) -> None:
    async with _serving(tmp_path) as (daemon, _):
        session_id = await _new(daemon, tmp_path)
        clients = SocketClients(daemon)
        ours, theirs = trio.testing.memory_stream_pair()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(clients.serve_link, ours, ours)
            wire = _Wire(theirs)
            (init,) = await wire.call([{"jsonrpc": "2.0", "id": 0, "method": "initialize",
                                        "params": INIT}])
            assert "result" in init, init
            frames = []
            for n in range(MISSING):
                missing = f"s-{n:012x}"
                method, params = [("session.load", {"sessionId": missing}),
                                  ("agent.prompt", {"sessionId": missing, "text": "hi"}),
                                  ("agent.abort", {"sessionId": missing})][n % 3]
                frames.append({"jsonrpc": "2.0", "id": n + 1, "method": method,
                               "params": params})
            answers = await wire.call(frames)
            assert all(a["error"]["code"] == -32003 for a in answers), answers[:3]
            (abort,) = await wire.call([{"jsonrpc": "2.0", "id": MISSING + 1,
                                         "method": "agent.abort",
                                         "params": {"sessionId": session_id}}])
            assert abort["result"]["outcome"] == "idle", abort
            assert set(clients.hub._followers) == {session_id}  # the one that exists
            await theirs.send_eof()  # the client leaves
        assert clients.hub._followers == {}  # the client gone: nothing of it kept
