"""The client link over stdio, a WebSocket and a Unix socket (``quiesce serve --listen``),
in the same run: ``session.list``'s round trip (one at a time) and requests/s
(``IN_FLIGHT`` pipelined), and a stop (``agent.abort`` of a turn whose Bash call sleeps,
sent until answered) over stdio and over the WebSocket.

Each transport gets its own daemon; every client here is byte-level (frames written and
read directly), so the three differ only in their transport.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import trio
from wsproto import ConnectionType, WSConnection
from wsproto.events import AcceptConnection, Request, TextMessage

from benchlib.harness import now_ms
from benchlib.report_figures import num
from benchlib.stats import Series
from runtime.clients.daemon_client import serve_command

IN_FLIGHT = 64
INIT = {"protocolVersion": "1.0", "clientInfo": {"name": "bench"}}
TRANSPORTS = ("stdio", "ws", "unix")
LABEL = {"stdio": "stdio", "ws": "WebSocket", "unix": "Unix socket"}


class _Link:
    """Write whole JSON-RPC messages, read whole ones, over one transport."""

    def __init__(self, send: Any, receive: Any, ws: WSConnection | None = None) -> None:
        self._send = send
        self._receive = receive
        self._ws = ws
        self._buffer = b""
        self._ready: list[bytes] = []
        self._text: list[str] = []
        self._ids = 0

    def encode(self, message: dict[str, Any]) -> bytes:
        text = json.dumps(message, separators=(",", ":"))
        if self._ws is not None:
            return self._ws.send(TextMessage(data=text))
        return text.encode() + b"\n"

    async def write(self, data: bytes) -> None:
        await self._send.send_all(data)

    async def read(self) -> dict[str, Any]:
        while not self._ready:
            data = await self._receive.receive_some(1 << 16)
            if not data:
                raise EOFError
            if self._ws is None:
                self._buffer += data
                *lines, self._buffer = self._buffer.split(b"\n")
                self._ready += lines
            else:
                self._ws.receive_data(data)
                for event in self._ws.events():
                    if isinstance(event, TextMessage):
                        self._text.append(event.data)
                        if event.message_finished:
                            self._ready.append("".join(self._text).encode())
                            self._text.clear()
        message: dict[str, Any] = json.loads(self._ready.pop(0))
        return message

    def request(self, method: str, params: Any = None) -> tuple[int, bytes]:
        self._ids += 1
        return self._ids, self.encode({"jsonrpc": "2.0", "id": self._ids, "method": method,
                                       "params": params if params is not None else {}})

    async def call(self, method: str, params: Any = None) -> dict[str, Any]:
        request_id, data = self.request(method, params)
        await self.write(data)
        while True:
            message = await self.read()
            if message.get("id") == request_id and "method" not in message:
                return message


@asynccontextmanager
async def _daemon(transport: str, workdir: pathlib.Path, env: dict[str, str]
                  ) -> AsyncIterator[_Link]:
    data = workdir / f"data-socket-{transport}"
    data.mkdir()
    run_dir = pathlib.Path(os.environ.get("TMPDIR", "/tmp")) / f"qbench-{os.getpid()}-{transport}"
    extra: tuple[str, ...] = ()
    if transport == "ws":
        extra = ("--listen", "ws://127.0.0.1:0")
    elif transport == "unix":
        extra = ("--listen", f"unix:{run_dir}/link.sock")
    log = os.open(workdir / f"socket-{transport}.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND,
                  0o600)
    process = await trio.lowlevel.open_process(
        serve_command(*extra), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log,
        env={**env, "QUIESCE_DATA_DIR": str(data)})
    stream: trio.abc.Stream | None = None
    try:
        assert process.stdin is not None and process.stdout is not None
        if transport == "stdio":
            link = _Link(process.stdin, process.stdout)
        else:
            line = b""
            with trio.fail_after(30):
                while not line.endswith(b"\n"):
                    line += await process.stdout.receive_some(1)
            listening = json.loads(line)
            if transport == "unix":
                stream = await trio.open_unix_socket(listening["listen"][len("unix:"):])
                link = _Link(stream, stream)
            else:
                port = int(listening["listen"].rsplit(":", 1)[1])
                token = listening["url"].split("#token=", 1)[1]
                stream = await trio.open_tcp_stream("127.0.0.1", port)
                ws = WSConnection(ConnectionType.CLIENT)
                await stream.send_all(ws.send(Request(
                    host=f"127.0.0.1:{port}", target="/",
                    extra_headers=[(b"authorization", b"Bearer " + token.encode())])))
                with trio.fail_after(10):
                    accepted = False
                    while not accepted:
                        ws.receive_data(await stream.receive_some(65536))
                        accepted = any(isinstance(e, AcceptConnection) for e in ws.events())
                link = _Link(stream, stream, ws)
        answer = await link.call("initialize", INIT)
        assert "result" in answer, answer
        yield link
    finally:
        with trio.CancelScope(shield=True):
            if stream is not None:
                await stream.aclose()
            if process.returncode is None:
                process.terminate()
                with trio.move_on_after(20):
                    await process.wait()
                if process.returncode is None:
                    process.kill()
                    await process.wait()
            os.close(log)


async def _round_trips(link: _Link, calls: int, warmup: int) -> list[float]:
    samples = []
    for i in range(calls + warmup):
        start = now_ms()
        answer = await link.call("session.list")
        if i >= warmup:
            samples.append(now_ms() - start)
        assert "result" in answer, answer
    return samples


async def _pipelined(link: _Link, total: int) -> float:
    """Requests/s with ``IN_FLIGHT`` written at once, each answer refilling the window."""
    sent = 0
    answered = 0
    start = now_ms()
    window = b""
    for _ in range(min(IN_FLIGHT, total)):
        window += link.request("session.list")[1]
        sent += 1
    await link.write(window)
    while answered < total:
        message = await link.read()
        if "id" not in message or "method" in message:
            continue
        answered += 1
        if sent < total:
            await link.write(link.request("session.list")[1])
            sent += 1
    return total / ((now_ms() - start) / 1000)


async def _stops(link: _Link, workspace: pathlib.Path, n: int, series: Series) -> None:
    script = [[{"toolCall": {"id": f"b{i}", "name": "Bash", "args": {"command": "sleep 30"}}}]
              for i in range(n)]
    new = await link.call("session.new", {"workspace": str(workspace), "permissionMode": "auto",
                                          "provider": {"kind": "scripted", "script": script}})
    session = new["result"]["sessionId"]
    for i in range(n):
        prompt_id, prompt = link.request("agent.prompt", {"sessionId": session, "text": "go"})
        await link.write(prompt)
        while True:  # the call's body started: the stop has a process tree to stop
            message = await link.read()
            event = message.get("params", {}).get("event", {})
            if event.get("kind") == "tool/started" and event.get("callId") == f"b{i}":
                break
        abort_id, abort = link.request("agent.abort", {"sessionId": session})
        start = now_ms()
        await link.write(abort)
        answers: dict[int, Any] = {}
        while abort_id not in answers or prompt_id not in answers:
            message = await link.read()
            if message.get("id") in (abort_id, prompt_id) and "method" not in message:
                answers[message["id"]] = message.get("result")
                if message["id"] == abort_id:
                    series.samples.append(now_ms() - start)
        result = answers[abort_id]
        series.add_extra("settledMs", result["settledMs"])
        if result["outcome"] != "aborted":
            series.anomalies.append(f"stop {i}: outcome {result['outcome']}")


async def socket_links(calls: int, warmup: int, flood: int, stops: int,
                       workdir: pathlib.Path, env: dict[str, str]) -> list[Series]:
    out: list[Series] = []
    workspace = workdir / "socket-ws"
    workspace.mkdir(exist_ok=True)
    for transport in TRANSPORTS:
        async with _daemon(transport, workdir, env) as link:
            label = LABEL[transport]
            rtt = Series(f"socket-rtt-{transport}",
                         f"`session.list` round trip, one at a time ({label})")
            rtt.samples = await _round_trips(link, calls, warmup)
            rate = Series(f"socket-rate-{transport}", f"`session.list` requests/s, "
                          f"{IN_FLIGHT} in flight ({label})", unit="calls/s")
            for _ in range(3):
                rate.samples.append(await _pipelined(link, flood))
            out += [rtt, rate]
            if transport != "unix":
                stop = Series(f"socket-stop-{transport}",
                              f"`agent.abort` of a sleeping Bash call, sent until answered "
                              f"({label})")
                await _stops(link, workspace, stops, stop)
                out.append(stop)
    return out


def socket_section(series: dict[str, Series]) -> list[str]:
    rows = [s for key, s in series.items() if key.startswith("socket-")]
    if not rows:
        return []
    out = ["## The client link over stdio, a WebSocket and a Unix socket", "",
           "Same run, one daemon per transport, byte-level clients "
           "(`quiesce serve --listen`).", "",
           "| row | unit | n | median | p90 | min | max |", "|---|---|---:|---:|---:|---:|---:|"]
    for s in rows:
        out.append(f"| {s.title} | {s.unit} | {s.n} | {num(s.median, s.unit)} | "
                   f"{num(s.p(90), s.unit)} | {num(min(s.samples, default=None), s.unit)} | "
                   f"{num(max(s.samples, default=None), s.unit)} |")
    stdio, ws = series.get("socket-stop-stdio"), series.get("socket-stop-ws")
    if stdio is not None and ws is not None and stdio.n and ws.n:
        gap = ws.median - stdio.median
        out += ["", f"Stop over the WebSocket minus stop over stdio (medians): {gap:+.3f} ms "
                f"(goal: no more than 1 ms slower: {'met' if gap <= 1.0 else 'NOT met'}; "
                f"the stops' own spread is far larger than the transport's share, see the "
                f"round trips above)."]
    return [*out, ""]
