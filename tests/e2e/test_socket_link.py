"""``quiesce serve --listen``: the socket link's checks and wire rules, driven over real
sockets against the real daemon (issue 27)."""

from __future__ import annotations

import pathlib
import subprocess

import pytest
import trio
from wsproto.events import TextMessage

from runtime.clients.daemon_client import serve_command
from tests.conftest import Marked
from tests.kit.socketclient import (
    INIT,
    Refused,
    listening_daemon,
    mode_of,
    unix_connect,
    ws_connect,
)

pytestmark = pytest.mark.timeout(90)


async def serve_fails(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[bytes]:
    with trio.fail_after(30):
        return await trio.run_process(serve_command(*args), env=env, check=False,
                                      stdin=subprocess.DEVNULL, capture_stdout=True,
                                      capture_stderr=True)


async def test_token_host_and_origin_are_checked(marked: Marked, tmp_path: pathlib.Path
                                                 ) -> None:
    async with listening_daemon(marked.env(), "ws://127.0.0.1:0", "--allow-origin",
                                "app://renderer", tmp=tmp_path) as daemon:
        assert daemon.url is not None and daemon.url.startswith(
            f"http://127.0.0.1:{daemon.port}/#token=")
        assert len(daemon.token) == 64  # 256 bits, hex
        assert daemon.token_file is not None and mode_of(daemon.token_file) == 0o600
        assert pathlib.Path(daemon.token_file).read_text().strip() == daemon.token
        port, token = daemon.port, daemon.token
        refusals = [
            (dict(token=None), 403),
            (dict(token="0" * 64), 403),
            (dict(token=token[:-1]), 403),
            (dict(token=token, how="protocol"), None),  # browsers: Sec-WebSocket-Protocol
            (dict(token=token), None),  # native: Authorization: Bearer
            (dict(token=token, host=f"evil.example:{port}"), 421),  # DNS rebinding
            (dict(token=token, host="127.0.0.1:1"), 421),
            (dict(token=token, origin="http://evil.example"), 403),
            (dict(token=token, how="protocol", origin="http://evil.example"), 403),
            (dict(token=token, origin=f"http://127.0.0.1:{port}"), None),  # our own page
            (dict(token=token, origin="app://renderer"), None),  # a configured app
            (dict(token=token, origin="null"), 403),
        ]
        for kwargs, status in refusals:
            if status is None:
                client = await ws_connect(port, **kwargs)  # type: ignore[arg-type]
                answer = await client.call("initialize", INIT)
                assert answer["result"]["protocolVersion"] == "1.0", kwargs
                if kwargs.get("how") == "protocol":
                    assert client.subprotocol == "quiesce.v1"
                await client.aclose()
            else:
                with pytest.raises(Refused) as refused:
                    await ws_connect(port, **kwargs)  # type: ignore[arg-type]
                assert refused.value.status == status, kwargs
        # A cookie is never set (nor needed): the refusal carries none.
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        await stream.send_all(b"GET / HTTP/1.1\r\nHost: evil.example\r\n\r\n")
        reply = b""
        with trio.fail_after(10):
            while chunk := await stream.receive_some(4096):
                reply += chunk
        await stream.aclose()
        assert reply.startswith(b"HTTP/1.1 421") and b"set-cookie" not in reply.lower()
    log = daemon.stderr_path.read_text()
    assert "refused GET" in log and "Origin 'http://evil.example'" in log
    assert token not in log  # the token is never logged
    assert daemon.token_file is not None and not pathlib.Path(daemon.token_file).exists()


async def test_non_loopback_refused_unless_allowed(marked: Marked, tmp_path: pathlib.Path
                                                   ) -> None:
    for listen in ("ws://0.0.0.0:0", "ws://192.0.2.1:0", "ws://example.com:0"):
        done = await serve_fails(marked.env(), "--listen", listen)
        assert done.returncode == 2 and b"--listen" in done.stderr, done.stderr


async def test_frames_bounds_binary_and_pipelining(marked: Marked, tmp_path: pathlib.Path
                                                   ) -> None:
    async with listening_daemon(marked.env(), "ws://127.0.0.1:0", "--max-frame-size",
                                "4096", tmp=tmp_path) as daemon:
        client = await ws_connect(daemon.port, token=daemon.token)
        assert "result" in await client.call("initialize", INIT)
        # Pipelined: many requests in one write, answered each in its own frame, the
        # requests taking effect in wire order (the malformed one in its place).
        frames = b""
        for i in range(50):
            frames += client.ws.send(TextMessage(
                data=f'{{"jsonrpc":"2.0","id":{i},"method":"session.list"}}'))
        frames += client.ws.send(TextMessage(
            data='{"jsonrpc":"2.0","id":50,"method":"nope"}'))
        frames += client.ws.send(TextMessage(
            data='{"jsonrpc":"2.0","id":51,\n"method":\n"session.list"}'))  # newlines: JSON
        await client.stream.send_all(frames)
        answers = [await client.receive() for _ in range(52)]
        assert sorted(a["id"] for a in answers) == list(range(52))
        by_id = {a["id"]: a for a in answers}
        assert by_id[50]["error"]["code"] == -32601
        assert by_id[51]["result"] == {"sessions": []}
        assert all("result" in by_id[i] for i in range(50))
        # Invalid JSON: -32700 and the link serves on.
        await client.send_text("{not json")
        assert (await client.receive())["error"]["code"] == -32700
        # Oversized: closed 1009 before any of it is read as a request.
        await client.send_text('{"jsonrpc":"2.0","id":99,"method":"session.list","x":"'
                               + "a" * 5000 + '"}')
        closed = await client.wait_closed()
        assert closed.code == 1009
        await client.aclose()
        # Binary: closed 1003.
        client = await ws_connect(daemon.port, token=daemon.token)
        await client.send_bytes(b'{"jsonrpc":"2.0","id":1,"method":"initialize"}')
        closed = await client.wait_closed()
        assert closed.code == 1003
        await client.aclose()
        # The daemon still serves new clients, each of which must shake hands itself.
        client = await ws_connect(daemon.port, token=daemon.token)
        refused = await client.call("session.list")
        assert refused["error"]["code"] == -32002 or refused["error"]["message"]
        assert "result" in await client.call("initialize", INIT)
        assert "result" in await client.call("session.list")
        await client.aclose()


async def test_unix_socket_link(marked: Marked, tmp_path: pathlib.Path) -> None:
    sock_dir = pathlib.Path(marked.run_dir) / "link"
    path = sock_dir / "q.sock"
    async with listening_daemon(marked.env(), f"unix:{path}", tmp=tmp_path) as daemon:
        assert daemon.listen == f"unix:{path}"
        assert mode_of(sock_dir) == 0o700 and mode_of(path) == 0o600
        one = await unix_connect(str(path))
        two = await unix_connect(str(path))
        assert "result" in await one.call("initialize", INIT)
        assert "result" in await two.call("initialize", INIT)
        new = await one.call("session.new", {"workspace": str(tmp_path)})
        sid = new["result"]["sessionId"]
        listed = await two.call("session.list")
        assert [s["sessionId"] for s in listed["result"]["sessions"]] == [sid]
        await one.aclose()
        answer = await two.call("shutdown")
        assert answer["result"] == {}
        with trio.fail_after(30):
            assert await daemon.process.wait() == 0
        await two.aclose()
    assert not path.exists()


async def test_unix_socket_dir_open_to_others_refused(marked: Marked, tmp_path: pathlib.Path
                                                      ) -> None:
    sock_dir = pathlib.Path(marked.run_dir) / "open"
    sock_dir.mkdir(mode=0o755)
    sock_dir.chmod(0o755)
    done = await serve_fails(marked.env(), "--listen", f"unix:{sock_dir}/q.sock")
    assert done.returncode == 2 and b"must be 0700" in done.stderr, done.stderr


async def test_quiesce_web_serves_the_page_with_a_strict_csp(marked: Marked,
                                                             tmp_path: pathlib.Path) -> None:
    async with listening_daemon(marked.env(), None, "web", tmp=tmp_path) as daemon:
        assert daemon.listen.startswith("ws://127.0.0.1:") and daemon.url is not None
        pages = {}
        for path in ("/", "/app.js", "/app.css", "/nope", "/../pyproject.toml"):
            stream = await trio.open_tcp_stream("127.0.0.1", daemon.port)
            await stream.send_all(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{daemon.port}"
                                  f"\r\n\r\n".encode())
            reply = b""
            with trio.fail_after(10):
                while chunk := await stream.receive_some(65536):
                    reply += chunk
            await stream.aclose()
            pages[path] = reply
        head, _, body = pages["/"].partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200") and b"<script src=\"/app.js\"" in body
        headers = head.lower()
        assert b"content-security-policy: default-src 'none'; script-src 'self';" in headers
        assert b"frame-ancestors 'none'" in headers and b"set-cookie" not in headers
        assert b"<script>" not in body and b"http" not in body.split(b"<body>")[1]  # no CDN
        assert pages["/app.js"].startswith(b"HTTP/1.1 200")
        assert b"text/javascript" in pages["/app.js"].split(b"\r\n\r\n")[0]
        assert pages["/nope"].startswith(b"HTTP/1.1 404")
        assert pages["/../pyproject.toml"].startswith(b"HTTP/1.1 404")
