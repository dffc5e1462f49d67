"""Issue 31 item 7: the ops socket against a flood of connections with unfinished lines.

200 connections each sending 1 MiB without a newline took the runtime to 1.66 GB (8 MiB
were held per connection, with no limit on connections). Now a connection holds at most
``MAX_OPS_FRAME`` of a line, at most ``MAX_OPS_CONNECTIONS`` are served at once (more are
closed at once), and the daemon's memory stays put; once the flood ends an operator gets in.
"""

from __future__ import annotations

import pathlib

import msgspec
import psutil
import trio

from runtime.daemon.ops.connection import MAX_OPS_FRAME
from tests.conftest import Marked
from tests.kit.daemon import agent_daemon

LINE = b'{"jsonrpc": "2.0", "id": 1, "method": "ops.stats", "params": {"x": "' + b"a" * (1 << 20)


async def flood_one(path: str, streams: list[trio.SocketStream]) -> None:
    try:
        stream = await trio.open_unix_socket(path)
    except OSError:
        return
    streams.append(stream)
    with trio.move_on_after(10):
        try:
            await stream.send_all(LINE)  # never ends its line
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass  # closed by the daemon: over the connection limit


async def call(path: str, method: str) -> dict[str, object]:
    stream = await trio.open_unix_socket(path)
    async with stream:
        init = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
                "params": {"protocolVersion": "1.0", "clientInfo": {"name": "t"}}}
        request = {"jsonrpc": "2.0", "id": 2, "method": method}
        await stream.send_all(msgspec.json.encode(init) + b"\n"
                              + msgspec.json.encode(request) + b"\n")
        buffer = b""
        with trio.fail_after(10):
            while buffer.count(b"\n") < 2:
                chunk = await stream.receive_some(65536)
                if not chunk:  # closed at once: over the connection limit
                    return {}
                buffer += chunk
        answer: dict[str, object] = msgspec.json.decode(buffer.split(b"\n")[1])
        return answer


async def test_a_flood_of_unfinished_lines_is_bounded(tmp_path: pathlib.Path,
                                                      marked: Marked) -> None:
    assert MAX_OPS_FRAME < len(LINE)
    async with agent_daemon(marked) as agent:
        info = await agent.daemon.initialize()
        path = info.capabilities["ops"]["socket"]
        daemon = psutil.Process(agent.daemon.process.pid)
        before = daemon.memory_info().rss
        streams: list[trio.SocketStream] = []
        try:
            async with trio.open_nursery() as nursery:
                for _ in range(200):
                    nursery.start_soon(flood_one, path, streams)
            await trio.sleep(2)  # the daemon reads what it was sent
            grown = daemon.memory_info().rss - before
            # 200 MiB held before (78 MiB read within 0.5 s); now at most 32 connections
            # x (64 KiB + a read chunk), measured ~5 MiB.
            assert grown < 32 * 1024 * 1024, grown
        finally:
            for stream in streams:
                await stream.aclose()
        with trio.fail_after(10):
            while True:  # the daemon notices the closed connections, then serves again
                try:
                    answer = await call(path, "ops.stats")
                except (trio.BrokenResourceError, OSError):  # still over the limit: closed
                    answer = {}
                if "result" in answer:
                    break
                await trio.sleep(0.1)
