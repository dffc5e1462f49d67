"""The sandbox's network ``proxy`` end to end, as root (it needs a private network
namespace per session): real sandboxed Bash calls reach a listed domain through the host's
proxy and nothing else. No outside network: a stand-in HTTP server on 127.0.0.1 in the
test's (the host's) namespace, reached by the listed domain ``localhost``."""

from __future__ import annotations

import contextlib
import http.server
import os
import pathlib
import socket
import sys
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import trio

from protocol.messages.events import ToolCallEvent
from tests.conftest import Marked
from tests.e2e.sandboxkit import PY, as_root, config, needs_landlock, output, py, quote, run_calls
from tests.kit.daemon import agent_daemon, call, text

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only")

PROXY = '[sandbox]\nnetwork = "proxy"\nallow_domains = ["localhost"]\n'
# The model sends localhost through the proxy on purpose (NO_PROXY keeps the session's own
# loopback direct, where a test suite's local server would be).
THROUGH = "env -u NO_PROXY -u no_proxy "


class _StandIn(http.server.BaseHTTPRequestHandler):
    slow_started: threading.Event
    slow_ended: threading.Event

    def do_GET(self) -> None:
        if self.path == "/slow":  # a download that never ends
            self.send_response(200)
            self.end_headers()
            type(self).slow_started.set()
            try:
                for _ in range(600):
                    self.wfile.write(b"x" * 1024)
                    self.wfile.flush()
                    threading.Event().wait(0.05)
            except OSError:  # the proxy hung up: its client is gone
                type(self).slow_ended.set()
            return
        body = b"hello from the stand-in\n"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@contextlib.contextmanager
def stand_in() -> Iterator[tuple[int, type[_StandIn]]]:
    handler = type("Handler", (_StandIn,), {"slow_started": threading.Event(),
                                            "slow_ended": threading.Event()})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1], handler
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


def fetch(url: str) -> str:
    code = (f"import urllib.request; print(urllib.request.urlopen({url!r}, timeout=20)"
            ".read().decode())")
    return f"{THROUGH}{PY} -c {quote(code)} 2>&1"


@as_root
@needs_landlock
async def test_the_proxy_admits_a_listed_domain_and_nothing_else(
        tmp_path: pathlib.Path, marked: Marked) -> None:
    """``localhost`` is listed: reached through the proxy (plain HTTP and a CONNECT tunnel);
    ``example.org`` is refused by name, recognisably in the result; a direct connection
    to the stand-in fails; the proxy's port, from outside the namespace, is not the proxy."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    with stand_in() as (port, _):
        async with agent_daemon(marked, extra_args=config(tmp_path, PROXY)) as agent:
            results = await run_calls(agent, workspace, {
                "plain": fetch(f"http://localhost:{port}/hello"),
                "tunnel": f"{THROUGH}curl -sS -p http://localhost:{port}/hello 2>&1",
                "refused": fetch("https://example.org/"),
                "plain-refused": f"{THROUGH}curl -sS http://127.0.0.1:{port}/hello 2>&1",
                "direct": py(f"import socket; socket.create_connection(('127.0.0.1', {port}),"
                             " timeout=5)"),
                "outside": py("import socket; socket.create_connection(('192.0.2.1', 80),"
                              " timeout=5)"),
                "env": "echo $HTTPS_PROXY",
            })
        proxy_url = output(results["env"]).strip()
    assert "hello from the stand-in" in output(results["plain"]), output(results["plain"])
    assert "hello from the stand-in" in output(results["tunnel"]), output(results["tunnel"])
    refused = results["refused"]
    assert "example.org" in output(refused), output(refused)
    assert refused.details["sandbox"]["proxyRefused"] == "example.org", refused.details
    plain_refused = output(results["plain-refused"])
    assert "127.0.0.1 is not in the sandbox's allow_domains" in plain_refused, plain_refused
    assert results["plain-refused"].details["sandbox"]["proxyRefused"] == "127.0.0.1"
    assert "refused" in output(results["direct"]), output(results["direct"])
    assert "refused" in output(results["outside"]), output(results["outside"])
    assert proxy_url.startswith("http://127.0.0.1:"), proxy_url
    proxy_port = int(proxy_url.rsplit(":", 1)[1])
    # From the host's namespace that port is not the proxy (nothing, or someone else's).
    with contextlib.suppress(ConnectionRefusedError):
        with socket.create_connection(("127.0.0.1", proxy_port), timeout=5) as sock:
            sock.settimeout(5)
            sock.sendall(f"CONNECT localhost:{port} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
            with contextlib.suppress(OSError):
                assert b"Connection established" not in sock.recv(200)


@as_root
@needs_landlock
async def test_a_stop_during_a_proxied_download_settles_with_no_process_left(
        tmp_path: pathlib.Path, marked: Marked) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    """The download's tree dies by the stop, and the proxy then hangs up on the server."""
    with stand_in() as (port, handler):
        async with agent_daemon(marked, extra_args=config(tmp_path, PROXY)) as agent:
            script = [[call("dl", "Bash", command=fetch(f"http://localhost:{port}/slow"))],
                      [text("done")]]
            await agent.new_session(workspace, script)
            async with trio.open_nursery() as nursery:
                agent.prompt_soon(nursery, "go")
                await agent.wait_for(lambda e: isinstance(e, ToolCallEvent))
                with trio.fail_after(30):
                    while not handler.slow_started.is_set():
                        await trio.sleep(0.05)
                answer = await agent.stop_and_check()
            assert answer.outcome == "aborted", answer
            with trio.fail_after(10):
                while not handler.slow_ended.is_set():
                    await trio.sleep(0.05)


async def test_the_proxy_is_refused_at_start_where_no_namespace_can_be_made(
        tmp_path: pathlib.Path, marked: Marked) -> None:
    """Without a network namespace per session (here ``QUIESCE_SANDBOX_NETNS=off``; not
    root does the same) ``network = "proxy"`` is not offered: the daemon does not start,
    and says why."""
    path = tmp_path / "c.toml"
    path.write_text(PROXY)
    with trio.fail_after(30):
        done = await trio.run_process(
            [PY, "-m", "runtime", "serve", "--config", str(path)],
            env={**marked.env(), "QUIESCE_SANDBOX_NETNS": "off"}, stdin=b"",
            capture_stdout=True, capture_stderr=True, check=False)
    err = done.stderr.decode()
    assert done.returncode == 2, err[-2000:]
    assert "not offered here" in err and "private network namespace" in err, err[-2000:]
    assert ("QUIESCE_SANDBOX_NETNS=off" in err) == (os.geteuid() == 0), err[-2000:]
