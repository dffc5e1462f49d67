"""The ops socket served in the test's nursery over a real Unix socket, fake backend."""

from __future__ import annotations

import os
import pathlib
import stat
import time
from typing import Any

import pytest
import trio

from protocol.errors import ErrorCode, RemoteError
from protocol.messages.ops import OpsEventParams
from protocol.version import PROTOCOL_VERSION
from runtime.clients.ops.client import connect
from runtime.daemon.ops.connection import MAX_TAIL_LAG
from runtime.daemon.ops.pidfile import read_pid_file
from runtime.daemon.ops.rundir import UnsafeRunDir
from runtime.daemon.ops.server import OpsServer
from tests.kit.lineclient import LineClient
from tests.ops.support import STUCK, FakeBackend, tool_call, turn_start


def mode(path: pathlib.Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


async def start(nursery: trio.Nursery, backend: FakeBackend | None = None,
                **kwargs: Any) -> tuple[OpsServer, FakeBackend, pathlib.Path]:
    backend = backend or FakeBackend()
    server = OpsServer(backend, **kwargs)
    path: pathlib.Path = await nursery.start(server.serve)
    return server, backend, path


def line_client(stream: trio.SocketStream) -> LineClient:
    """Newline-delimited JSON over the socket, byte for byte."""
    return LineClient(stream, stream, within=5)


def initialize(request_id: int = 1) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "method": "initialize",
            "params": {"protocolVersion": PROTOCOL_VERSION}}


async def test_directory_socket_and_pid_file(nursery: trio.Nursery, xdg: pathlib.Path) -> None:
    server, _, path = await start(nursery, data_dir=pathlib.Path("/data/q"))
    run_dir = xdg / "quiesce"
    assert path == run_dir / f"{os.getpid()}.sock" == server.socket_path
    assert mode(run_dir) == 0o700 and os.lstat(run_dir).st_uid == os.getuid()
    assert stat.S_ISSOCK(os.lstat(path).st_mode) and mode(path) == 0o600
    pid_file = run_dir / f"{os.getpid()}.json"
    assert server.pid_file == pid_file and mode(pid_file) == 0o600
    info = read_pid_file(pid_file)
    assert (info.pid, info.socket, info.data_dir) == (os.getpid(), str(path), "/data/q")
    assert abs(info.started_at - time.time()) < 60
    assert sorted(p.name for p in run_dir.iterdir()) == sorted([path.name, pid_file.name])


async def test_files_removed_when_the_server_stops(xdg: pathlib.Path) -> None:
    async with trio.open_nursery() as nursery:
        server, _, path = await start(nursery)
        pid_file = server.pid_file
        assert pid_file is not None and pid_file.exists()
        async with connect(path) as client:  # a live connection does not keep them
            await client.sessions()
            nursery.cancel_scope.cancel()
    assert not path.exists() and not pid_file.exists()
    assert (xdg / "quiesce").is_dir()  # the directory stays, for the next daemon
    assert server.socket_path is None


async def test_an_existing_private_directory_and_leftover_socket_are_reused(
        nursery: trio.Nursery, xdg: pathlib.Path) -> None:
    run_dir = xdg / "quiesce"
    run_dir.mkdir(mode=0o700)
    leftover = run_dir / f"{os.getpid()}.sock"
    sock = trio.socket.socket(trio.socket.AF_UNIX)
    await sock.bind(str(leftover))  # a crashed earlier life of this pid
    sock.close()
    _, _, path = await start(nursery)
    async with connect(path) as client:
        assert (await client.sessions()).sessions


@pytest.mark.parametrize("bad_mode", [0o750, 0o705, 0o777])
async def test_refuses_a_directory_open_to_others(xdg: pathlib.Path, bad_mode: int) -> None:
    run_dir = xdg / "quiesce"
    run_dir.mkdir()
    run_dir.chmod(bad_mode)
    with pytest.raises(UnsafeRunDir, match="0700"):
        await OpsServer(FakeBackend()).serve()
    assert mode(run_dir) == bad_mode and not list(run_dir.iterdir())  # never repaired


@pytest.mark.skipif(os.getuid() != 0, reason="needs root to give a directory away")
async def test_refuses_a_directory_owned_by_another_user(xdg: pathlib.Path) -> None:
    run_dir = xdg / "quiesce"
    run_dir.mkdir(mode=0o700)
    os.chown(run_dir, 65534, 65534)
    with pytest.raises(UnsafeRunDir, match="owned by uid 65534"):
        await OpsServer(FakeBackend()).serve()


async def test_every_method_round_trips(nursery: trio.Nursery, xdg: pathlib.Path) -> None:
    _, backend, path = await start(nursery, data_dir=pathlib.Path("/data/q"))
    async with connect(path) as client:
        assert client.info is not None
        assert client.info.capabilities == {"pid": os.getpid(), "dataDir": "/data/q"}
        listing = await client.sessions()
        assert listing.pid == os.getpid() and listing.sessions[0] == STUCK
        assert listing.sessions[0].calls[0].tool_class == "mutating"
        aborted = await client.abort("s-stuck")
        assert aborted.outcome == "aborted" and aborted.cause is not None
        assert aborted.cause.kind == "operator" and backend.aborts == ["s-stuck"]
        forced = await client.force("s-stuck", "t-7.write-1")
        assert forced.forced and backend.forced == [("s-stuck", "t-7.write-1")]
        assert (await client.restart_host()).new_pid == 4200 and backend.restarts == 1
        stats = await client.stats()
        assert stats.stop_latency_ms_p90 == 48.5 and stats.tombstones == 3


async def test_errors_map_to_json_rpc_errors(nursery: trio.Nursery, xdg: pathlib.Path) -> None:
    _, backend, path = await start(nursery)
    backend.fail_stats = True
    async with connect(path) as client:
        with pytest.raises(RemoteError) as err:
            await client.abort("s-nope")
        assert err.value.code == ErrorCode.NOT_FOUND and "s-nope" in err.value.message
        with pytest.raises(RemoteError) as err:
            await client.stats()
        assert err.value.code == ErrorCode.INTERNAL and "broke" not in err.value.message
        assert (await client.sessions()).sessions  # still serving


async def test_handshake_required_and_checked(nursery: trio.Nursery, xdg: pathlib.Path) -> None:
    _, _, path = await start(nursery)
    async with await trio.open_unix_socket(path) as stream:
        raw = line_client(stream)
        await raw.send({"jsonrpc": "2.0", "id": 1, "method": "ops.sessions"})
        assert (await raw.receive())["error"]["code"] == ErrorCode.NOT_INITIALIZED
        await raw.send({"jsonrpc": "2.0", "id": 2, "method": "initialize",
                        "params": {"protocolVersion": "9.0"}})
        assert (await raw.receive())["error"]["code"] == ErrorCode.PROTOCOL_MISMATCH
        await raw.send({"jsonrpc": "2.0", "id": 3, "method": "agent.prompt", "params": {}})
        assert (await raw.receive())["error"]["code"] == ErrorCode.METHOD_NOT_FOUND
        await raw.send(initialize(4))
        assert (await raw.receive())["result"]["serverInfo"]["name"] == "quiesce"
        await raw.send({"jsonrpc": "2.0", "id": 5, "method": "ops.force",
                        "params": {"sessionId": "s-stuck"}})
        assert (await raw.receive())["error"]["code"] == ErrorCode.INVALID_PARAMS


async def test_tail_streams_filtered_events_until_the_client_leaves(
        nursery: trio.Nursery, xdg: pathlib.Path) -> None:
    _, backend, path = await start(nursery)
    got: list[OpsEventParams] = []
    every: list[OpsEventParams] = []
    done = trio.Event()
    async with connect(path) as one, connect(path) as all_:
        async with trio.open_nursery() as tails:
            def on_one(params: OpsEventParams) -> None:
                got.append(params)
                if len(got) == 2:
                    done.set()

            tails.start_soon(one.tail, on_one, "s-stuck")
            tails.start_soon(all_.tail, every.append)
            await backend.wait_listeners(2)
            backend.emit("s-stuck", turn_start(1))
            backend.emit("s-other", turn_start(1, "t-1"))
            backend.emit("s-stuck", tool_call(2))
            with trio.fail_after(5):
                await done.wait()
                while len(every) < 3:
                    await trio.sleep(0.005)
            tails.cancel_scope.cancel()
    assert [(p.session_id, p.event) for p in got] == [("s-stuck", turn_start(1)),
                                                      ("s-stuck", tool_call(2))]
    assert [p.session_id for p in every] == ["s-stuck", "s-other", "s-stuck"]
    await backend.wait_listeners(0)  # both connections closed: both listeners removed
    backend.emit("s-stuck", turn_start(3))  # nobody listens; nothing breaks


async def test_tail_answers_when_the_client_closes_its_sending_side(
        nursery: trio.Nursery, xdg: pathlib.Path) -> None:
    _, backend, path = await start(nursery)
    async with await trio.open_unix_socket(path) as stream:
        raw = line_client(stream)
        await raw.send(initialize())
        await raw.receive()
        await raw.send({"jsonrpc": "2.0", "id": 2, "method": "ops.tail",
                        "params": {"sessionId": "s-stuck"}})
        await backend.wait_listeners(1)
        backend.emit("s-stuck", turn_start(1))
        note = await raw.receive()
        assert note["method"] == "ops.event" and note["params"]["event"]["kind"] == "turn/start"
        await stream.send_eof()
        assert await raw.receive() == {"jsonrpc": "2.0", "id": 2, "result": {"events": 1}}
    await backend.wait_listeners(0)


async def test_tail_listener_removed_when_the_server_stops(xdg: pathlib.Path) -> None:
    backend = FakeBackend()
    async with trio.open_nursery() as outer:
        _, _, path = await start(outer, backend)
        async with connect(path) as client:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(client.tail, lambda p: None)
                await backend.wait_listeners(1)
                outer.cancel_scope.cancel()  # the daemon stops while the tail runs
    assert backend.listeners == []


async def test_a_reader_that_falls_behind_gets_counted_drops_not_unbounded_memory(
        nursery: trio.Nursery, xdg: pathlib.Path) -> None:
    _, backend, path = await start(nursery)
    emitted = MAX_TAIL_LAG * 3
    async with await trio.open_unix_socket(path) as stream:
        raw = line_client(stream)
        await raw.send(initialize())
        await raw.receive()
        await raw.send({"jsonrpc": "2.0", "id": 2, "method": "ops.tail"})
        await backend.wait_listeners(1)
        for seq in range(emitted):  # one burst: the writer gets no chance to drain
            backend.emit("s-stuck", turn_start(seq))
        backend.emit("s-stuck", turn_start(emitted))  # skipped as well: still behind
        seqs: list[int] = []
        while len(seqs) < MAX_TAIL_LAG:
            seqs.append((await raw.receive())["params"]["event"]["seq"])
        # The bound is approximate by the responses written on the connection (one here).
        with trio.move_on_after(0.2):
            seqs.append((await raw.receive())["params"]["event"]["seq"])
        assert seqs == list(range(len(seqs))) and len(seqs) <= MAX_TAIL_LAG + 1
        backend.emit("s-stuck", turn_start(emitted + 1))  # caught up: it says what was lost
        last = (await raw.receive())["params"]
        assert last["event"]["seq"] == emitted + 1
        assert last["dropped"] == emitted + 1 - len(seqs)


@pytest.mark.skipif(os.getuid() != 0, reason="needs root to connect as another user")
async def test_refuses_a_connection_from_another_user(nursery: trio.Nursery,
                                                      xdg: pathlib.Path) -> None:
    server, _, path = await start(nursery)
    # Let uid 65534 reach the socket, so the peer-credential check is what refuses it.
    os.chmod(xdg, 0o711)
    os.chmod(path.parent, 0o711)
    os.chmod(path, 0o666)
    script = (
        "import socket, sys\n"
        "s = socket.socket(socket.AF_UNIX)\n"
        "s.connect(sys.argv[1])\n"
        "s.settimeout(5)\n"
        "try:\n"
        "    s.sendall(b'{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",'\n"
        "              b'\"params\":{\"protocolVersion\":\"1.0\"}}\\n')\n"
        "    answer = s.recv(4096)\n"
        "except (BrokenPipeError, ConnectionResetError):\n"
        "    answer = b''\n"
        "print('answered' if answer else 'refused')\n"
    )
    with trio.fail_after(10):
        done = await trio.run_process(["/usr/bin/python3", "-c", script, str(path)],
                                      user=65534, cwd="/", capture_stdout=True)
    assert done.stdout.decode().strip() == "refused"
    assert server.refused == 1
    async with connect(path) as client:  # its own user still gets in
        await client.sessions()


async def test_connections_over_the_limit_or_without_a_handshake_are_closed(
        nursery: trio.Nursery, xdg: pathlib.Path) -> None:
    """Issue 31 item 7: a bounded number of connections, each shaking hands in time."""
    server, _, path = await start(nursery, max_connections=2, handshake_timeout=0.5)
    first, second = await trio.open_unix_socket(str(path)), await trio.open_unix_socket(str(path))
    await line_client(first).send(initialize())
    assert "result" in await line_client(first).receive()
    over = await trio.open_unix_socket(str(path))
    with pytest.raises(EOFError):  # over the limit: closed at once
        await line_client(over).receive()
    assert server.turned_away == 1
    with pytest.raises(EOFError):  # no initialize within its time: closed
        await line_client(second).receive()
    await trio.sleep(0.7)
    ops = line_client(first)  # the one that shook hands is still served
    await ops.send({"jsonrpc": "2.0", "id": 2, "method": "ops.stats"})
    assert "result" in await ops.receive()
    for stream in (first, second, over):
        await stream.aclose()
