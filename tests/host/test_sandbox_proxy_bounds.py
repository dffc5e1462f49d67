"""The sandbox proxy's bounds, on the real proxy in a real private network namespace (as
root): a request head over the limit, connections over the limit, an idle connection, and
closing the session's sandbox ends every connection. Clients connect from inside the
namespace (a thread enters it to make the socket), as a session's processes do."""

from __future__ import annotations

import contextlib
import ctypes
import os
import socket
from collections.abc import Iterator

import pytest
import trio

from host.sandbox.proxy import MAX_HEAD_BYTES, SessionProxy
from protocol.sandboxsettings import admits
from runtime.proc import netns

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (a network namespace)")


@contextlib.contextmanager
def namespace() -> Iterator[int]:
    fd = netns.make()
    assert fd is not None
    try:
        yield fd
    finally:
        os.close(fd)


def connect_inside(fd: int, port: int) -> socket.socket:
    """A client socket made in the namespace ``fd``, connected to its 127.0.0.1:port."""
    libc = ctypes.CDLL(None, use_errno=True)
    own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    try:
        assert libc.setns(fd, netns.CLONE_NEWNET) == 0
        try:
            sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        finally:
            assert libc.setns(own, netns.CLONE_NEWNET) == 0
    finally:
        os.close(own)
    return sock


async def started(nursery: trio.Nursery, fd: int, **bounds: float) -> SessionProxy:
    proxy = SessionProxy(("localhost",), lambda: os.dup(fd), **bounds)  # type: ignore[arg-type]
    nursery.start_soon(proxy.run)
    assert await proxy.ready() is not None
    return proxy


def answer(sock: socket.socket) -> bytes:
    chunks = []
    while chunk := sock.recv(4096):
        chunks.append(chunk)
    return b"".join(chunks)


async def test_a_head_over_the_limit_is_refused() -> None:
    with namespace() as fd:
        async with trio.open_nursery() as nursery:
            proxy = await started(nursery, fd)
            assert proxy.port is not None
            sock = await trio.to_thread.run_sync(connect_inside, fd, proxy.port)
            with sock:
                head = (b"GET http://localhost/ HTTP/1.1\r\nHost: localhost\r\nX-Big: "
                        + b"a" * (MAX_HEAD_BYTES + 1024) + b"\r\n\r\n")
                await trio.to_thread.run_sync(sock.sendall, head)
                got = await trio.to_thread.run_sync(answer, sock)
            assert got.startswith(b"HTTP/1.1 431 "), got[:200]
            proxy.close()


async def test_connections_over_the_limit_are_refused_and_idle_ones_end() -> None:
    with namespace() as fd:
        async with trio.open_nursery() as nursery:
            proxy = await started(nursery, fd, idle=1.0, max_connections=2)
            assert proxy.port is not None
            held = [await trio.to_thread.run_sync(connect_inside, fd, proxy.port)
                    for _ in range(2)]
            await trio.sleep(0.2)  # both accepted
            extra = await trio.to_thread.run_sync(connect_inside, fd, proxy.port)
            with extra:
                got = await trio.to_thread.run_sync(answer, extra)
            assert got.startswith(b"HTTP/1.1 503 "), got[:200]
            start = trio.current_time()
            for sock in held:  # they sent nothing: closed once idle
                with sock:
                    assert await trio.to_thread.run_sync(answer, sock) == b""
            assert trio.current_time() - start < 5
            proxy.close()


async def test_closing_ends_every_connection() -> None:
    with namespace() as fd:
        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:
                proxy = await started(nursery, fd)
                assert proxy.port is not None
                sock = await trio.to_thread.run_sync(connect_inside, fd, proxy.port)
                await trio.sleep(0.2)
                proxy.close()
            with sock:  # run() returned: its connection is closed
                assert await trio.to_thread.run_sync(answer, sock) == b""


def test_domains_match_exactly_or_below_a_wildcard() -> None:
    allow = ("example.org", "*.pypi.org")
    assert admits(allow, "example.org") and admits(allow, "EXAMPLE.org.")
    assert not admits(allow, "www.example.org") and not admits(allow, "example.org.evil")
    assert admits(allow, "files.pypi.org") and admits(allow, "a.b.pypi.org")
    assert not admits(allow, "pypi.org") and not admits(allow, "evilpypi.org")


async def test_malformed_requests_get_an_answer_and_the_proxy_keeps_serving() -> None:
    with namespace() as fd:
        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:
                proxy = await started(nursery, fd)
                assert proxy.port is not None
                for head in (b"GET http://localhost:abc/ HTTP/1.1\r\nHost: x\r\n\r\n",
                             b"GET http://localhost:1/ HTTP/1.0\r\n\r\n",  # no Host
                             b"CONNECT localhost HTTP/1.1\r\nHost: x\r\n\r\n",
                             b"GET ftp://localhost/ HTTP/1.1\r\nHost: x\r\n\r\n",
                             b"\x00\x01 nonsense\r\n\r\n"):
                    sock = await trio.to_thread.run_sync(connect_inside, fd, proxy.port)
                    with sock:
                        await trio.to_thread.run_sync(sock.sendall, head)
                        got = await trio.to_thread.run_sync(answer, sock)
                    assert got.startswith((b"HTTP/1.1 400 ", b"HTTP/1.1 502 ")), (head, got)
                proxy.close()
