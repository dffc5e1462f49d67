"""A real headless Debian ``chromium`` driven over the DevTools protocol (CDP), for the
browser client's tests: a small CDP client over a WebSocket (wsproto over trio, as the
socket link's own tests use), one flattened session per page.

The browser runs in its own process group with a fresh profile; ``headless_chromium``
kills the whole group and waits for it, so no browser process outlives a test.
"""

from __future__ import annotations

import itertools
import json
import os
import pathlib
import re
import shutil
import signal
import subprocess
import tempfile
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

import psutil
import trio
from wsproto import ConnectionType, WSConnection
from wsproto.events import AcceptConnection, CloseConnection, Request, TextMessage

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--remote-debugging-port=0", "--remote-allow-origins=*")


class CdpError(Exception):
    pass


class Cdp:
    def __init__(self, stream: trio.SocketStream, ws: WSConnection) -> None:
        self._stream = stream
        self._ws = ws
        self._ids = itertools.count(1)
        self._waiting: dict[int, trio.MemorySendChannel[dict[str, Any]]] = {}
        self.events: list[dict[str, Any]] = []

    async def run(self) -> None:
        text: list[str] = []
        while True:
            data = await self._stream.receive_some(1 << 20)
            if not data:
                return
            self._ws.receive_data(data)
            for event in self._ws.events():
                if isinstance(event, TextMessage):
                    text.append(event.data)
                    if event.message_finished:
                        message = json.loads("".join(text))
                        text.clear()
                        channel = self._waiting.pop(message.get("id", -1), None)
                        if channel is not None:
                            channel.send_nowait(message)
                        else:
                            self.events.append(message)
                elif isinstance(event, CloseConnection):
                    return

    async def send(self, method: str, params: dict[str, Any] | None = None, *,
                   session: str | None = None, within: float = 30.0) -> dict[str, Any]:
        request_id = next(self._ids)
        send, receive = trio.open_memory_channel[dict[str, Any]](1)
        self._waiting[request_id] = send
        message: dict[str, Any] = {"id": request_id, "method": method, "params": params or {}}
        if session is not None:
            message["sessionId"] = session
        await self._stream.send_all(self._ws.send(TextMessage(data=json.dumps(message))))
        with trio.fail_after(within):
            answer = await receive.receive()
        if "error" in answer:
            raise CdpError(f"{method}: {answer['error']}")
        result: dict[str, Any] = answer["result"]
        return result


class Page:
    def __init__(self, cdp: Cdp, session: str, target: str) -> None:
        self.cdp = cdp
        self.session = session
        self.target = target

    async def evaluate(self, expression: str) -> Any:
        """The expression's value (awaited if a promise); raises on a page exception."""
        result = await self.cdp.send("Runtime.evaluate", {
            "expression": expression, "awaitPromise": True, "returnByValue": True},
            session=self.session)
        if "exceptionDetails" in result:
            raise CdpError(json.dumps(result["exceptionDetails"])[:2000])
        return result["result"].get("value")

    async def wait_for(self, expression: str, within: float = 30.0) -> Any:
        """Poll until ``expression`` is truthy; its value."""
        with trio.fail_after(within):
            while True:
                try:
                    value = await self.evaluate(expression)
                except CdpError:
                    value = None
                if value:
                    return value
                await trio.sleep(0.1)

    async def navigate(self, url: str) -> None:
        await self.cdp.send("Page.navigate", {"url": url}, session=self.session)

    async def reload(self) -> None:
        await self.cdp.send("Page.reload", {}, session=self.session)


class Browser:
    def __init__(self, cdp: Cdp) -> None:
        self.cdp = cdp

    async def new_page(self, url: str) -> Page:
        target = (await self.cdp.send("Target.createTarget", {"url": "about:blank"}))["targetId"]
        session = (await self.cdp.send("Target.attachToTarget", {
            "targetId": target, "flatten": True}))["sessionId"]
        await self.cdp.send("Page.enable", {}, session=session)
        await self.cdp.send("Runtime.enable", {}, session=session)
        page = Page(self.cdp, session, target)
        await page.navigate(url)
        return page


async def _cdp_connect(url: str) -> tuple[trio.SocketStream, WSConnection]:
    match = re.match(r"ws://([^/:]+):(\d+)(/.*)", url)
    assert match, url
    host, port, path = match.group(1), int(match.group(2)), match.group(3)
    stream = await trio.open_tcp_stream(host, port)
    ws = WSConnection(ConnectionType.CLIENT)
    await stream.send_all(ws.send(Request(host=f"{host}:{port}", target=path)))
    with trio.fail_after(10):
        while True:
            data = await stream.receive_some(65536)
            assert data, "chromium closed the DevTools connection"
            ws.receive_data(data)
            for event in ws.events():
                if isinstance(event, AcceptConnection):
                    return stream, ws
                raise AssertionError(f"DevTools refused: {event!r}")


@asynccontextmanager
async def headless_chromium(env: Mapping[str, str]) -> AsyncIterator[Browser]:
    profile = pathlib.Path(tempfile.mkdtemp(prefix="qchrome-"))
    log_path = profile.parent / (profile.name + ".log")
    with open(log_path, "wb") as log:
        process = await trio.lowlevel.open_process(
            [CHROMIUM, *FLAGS, f"--user-data-dir={profile}", "about:blank"],
            stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=dict(env),
            start_new_session=True)
    try:
        with trio.fail_after(60):
            while True:
                found = re.search(r"DevTools listening on (ws://\S+)", log_path.read_text(
                    errors="replace"))
                if found:
                    break
                assert process.poll() is None, log_path.read_text(errors="replace")
                await trio.sleep(0.1)
        stream, ws = await _cdp_connect(found.group(1))
        cdp = Cdp(stream, ws)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(cdp.run)
            yield Browser(cdp)
            nursery.cancel_scope.cancel()
        await stream.aclose()
    finally:
        with trio.CancelScope(shield=True):
            _kill_group(process.pid)
            with trio.move_on_after(10):
                await process.wait()
            shutil.rmtree(profile, ignore_errors=True)
            log_path.unlink(missing_ok=True)


def _kill_group(pgid: int) -> None:
    """Every process of the browser's group, and any of its descendants that left it."""
    try:
        members = psutil.Process(pgid).children(recursive=True)
    except psutil.NoSuchProcess:
        members = []
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    for member in members:
        try:
            member.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(members, timeout=5)
