"""``quiesce serve --listen ws://… --web``: the browser client in a real headless Debian
``chromium`` driven over the DevTools protocol (issue 27). The page runs a whole turn
with a Bash call and answers its permission prompt, a reload attaches to a running turn,
Stop stays "stopping" until ``agent.abort`` answers and then shows the stop's timeline; a
page of another origin holding the right token, and a page without it, are refused."""

from __future__ import annotations

import functools
import json
import os
import pathlib

import pytest
import trio

from tests.conftest import Marked
from tests.e2e.browser import CHROMIUM, Page, headless_chromium
from tests.kit.socketclient import client_of, listening_daemon, run_stubborn, stubborn_session

pytestmark = [pytest.mark.timeout(180),
              pytest.mark.skipif(not os.path.exists(CHROMIUM),
                                 reason="Debian's chromium is not installed (.ci/run installs it)")]


def bash(call_id: str, command: str) -> dict[str, object]:
    return {"toolCall": {"id": call_id, "name": "Bash", "args": {"command": command}}}


async def click(page: Page, selector: str) -> None:
    await page.wait_for(f"!!document.querySelector({json.dumps(selector)})")
    await page.evaluate(f"document.querySelector({json.dumps(selector)}).click()")


async def text_of(page: Page, selector: str) -> str:
    value = await page.evaluate(
        f"(document.querySelector({json.dumps(selector)}) || {{}}).textContent || ''")
    return str(value)


async def socket_from_page(page: Page, protocols: list[str], port: int) -> str:
    """What a WebSocket this page opens to the daemon comes to: ``open`` or ``closed``."""
    return str(await page.evaluate(f"""new Promise((resolve) => {{
        const ws = new WebSocket("ws://127.0.0.1:{port}/", {json.dumps(protocols)});
        ws.onopen = () => {{ resolve("open"); ws.close(); }};
        ws.onclose = () => resolve("closed");
    }})"""))


async def _elsewhere(stream: trio.SocketStream) -> None:
    """A page of another origin."""
    async with stream:
        request = b""
        while b"\r\n\r\n" not in request:
            chunk = await stream.receive_some(4096)
            if not chunk:
                return
            request += chunk
        body = b"<!doctype html><title>elsewhere</title>"
        await stream.send_all(b"HTTP/1.1 200 OK\r\ncontent-type: text/html\r\n"
                              b"content-length: %d\r\nconnection: close\r\n\r\n" % len(body)
                              + body)


async def test_the_browser_client_runs_stops_and_reattaches(
        marked: Marked, tmp_path: pathlib.Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    script = tmp_path / "script.json"
    script.write_text(json.dumps([
        [{"text": "Running it."}, bash("b1", "echo hello-from-bash")],
        [{"text": "All done."}],
        [bash("b2", "echo started-long; sleep 60")],
        [{"text": "never"}],
    ]))
    async with listening_daemon(marked.env(), "ws://127.0.0.1:0", "--web", "--provider",
                                f"scripted:{script}", tmp=tmp_path) as daemon, \
            headless_chromium(marked.env()) as browser:
        assert daemon.url is not None
        page = await browser.new_page(daemon.url)
        await page.wait_for("document.body.dataset.state === 'connected'")
        assert "#token" not in await page.evaluate("location.href")  # out of the address bar
        csp = await page.evaluate(
            "fetch('/').then((r) => r.headers.get('content-security-policy'))")
        assert "default-src 'none'" in csp and "script-src 'self'" in csp
        # A new session in a chosen workspace, a prompt, a permission prompt answered.
        await page.evaluate(f"document.getElementById('workspace').value = "
                            f"{json.dumps(str(workspace))}")
        await click(page, "#create")
        await page.wait_for("document.body.dataset.attached")
        await page.evaluate("document.getElementById('prompt').value = 'run it'")
        await click(page, "#send")
        await page.wait_for("!!document.querySelector('.permission')")
        assert "echo hello-from-bash" in await text_of(page, ".permission .full-args")
        await click(page, ".permission [data-decision='allow-session']")
        await page.wait_for("!!document.querySelector('[data-call=b1][data-code=ok]')")
        assert "hello-from-bash" in await text_of(page, "[data-call=b1] .out")
        assert "process" in await text_of(page, "[data-call=b1] .cls")
        await page.wait_for("[...document.querySelectorAll('.end')]"
                            ".some((e) => e.textContent.includes('completed'))")
        assert "All done." in await text_of(page, "#transcript")
        # A long Bash call; the window reloads; it attaches to the running turn.
        await page.evaluate("document.getElementById('prompt').value = 'long one'")
        await click(page, "#send")
        await page.wait_for("(document.querySelector('[data-call=b2] .out') || {})"
                            ".textContent?.includes('started-long')")
        await page.reload()
        await page.wait_for("document.body.dataset.state === 'connected' && "
                            "document.body.dataset.attached")
        await page.wait_for("!!document.querySelector('[data-call=b2]')")
        assert await page.evaluate("document.getElementById('stop').disabled") is False
        assert "hello-from-bash" in await text_of(page, "[data-call=b1] .out")  # replayed
        # Stop: "stopping" until agent.abort answers, then the timeline.
        states = await page.evaluate("""(() => {
            document.getElementById('stop').click();
            return [document.getElementById('stop').textContent,
                    document.getElementById('status').textContent];
        })()""")
        assert states == ["Stopping…", "stopping…"]
        timeline = await page.wait_for(
            "(document.querySelector('.timeline') || {}).textContent")
        assert "Stop: aborted" in timeline and "b2" in timeline and "ABORTED" in timeline
        assert await text_of(page, "#status") == "stopped"
        await page.wait_for("!!document.querySelector('[data-call=b2][data-code=ABORTED]')")

        # A page of another origin (another local server), holding the right token:
        # refused.
        async with trio.open_nursery() as nursery:
            (listener,) = await nursery.start(functools.partial(
                trio.serve_tcp, _elsewhere, 0, host="127.0.0.1"))
            other_port = listener.socket.getsockname()[1]
            other = await browser.new_page(f"http://127.0.0.1:{other_port}/")
            await other.wait_for("document.title === 'elsewhere'")
            assert await socket_from_page(
                other, ["quiesce.v1", f"quiesce.token.{daemon.token}"], daemon.port) == "closed"
            nursery.cancel_scope.cancel()
        # Our own page without the token: refused, and the page says so.
        bare = await browser.new_page(f"http://127.0.0.1:{daemon.port}/")
        await bare.wait_for("document.getElementById('status')?.textContent"
                            ".includes('no token')")
        assert await socket_from_page(bare, ["quiesce.v1"], daemon.port) == "closed"
        assert await socket_from_page(bare, ["quiesce.v1", f"quiesce.token.{daemon.token}"],
                                      daemon.port) == "open"  # the same page with it: in
        await trio.sleep(0.2)
    log = daemon.stderr_path.read_text()
    assert "403 no token" in log
    assert f"Origin 'http://127.0.0.1:{other_port}' is not allowed" in log


async def test_the_page_shows_what_a_stop_waits_on_and_forces_it(
        marked: Marked, tmp_path: pathlib.Path) -> None:
    """A plugin call that ignores the cancel: the page stays "Stopping…", lists the call
    it waits on with its class, and its Force button settles the stop."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    env = marked.env(QUIESCE_PLUGIN_QUIET_WINDOW="0.5")
    async with listening_daemon(env, "ws://127.0.0.1:0", "--web", tmp=tmp_path) as daemon, \
            headless_chromium(marked.env()) as browser:
        assert daemon.url is not None
        # Another window (a native client) opened the session and prompted it.
        native = await client_of(daemon.port, daemon.token)
        sid = await stubborn_session(native, workspace)
        await run_stubborn(native, sid, workspace, request_id=900, text="wait for it")

        page = await browser.new_page(daemon.url)
        await page.wait_for("document.body.dataset.state === 'connected'")
        item = f"#session-list [data-session='{sid}']"
        await page.wait_for(f"(document.querySelector({json.dumps(item)}) || {{}})"
                            f".textContent?.includes('wait for it')")  # the picker's title
        await click(page, item)
        await page.wait_for(f"document.body.dataset.attached === '{sid}'")
        await page.wait_for("!!document.querySelector('[data-call=w1]')")
        await click(page, "#stop")
        waiting = await page.wait_for(
            "(document.querySelector('#waiting-list [data-call=w1]') || {}).textContent")
        assert "mcp__tools__wait_stubbornly" in waiting and "plugin" in waiting
        assert await page.evaluate("document.getElementById('waiting').hidden") is False
        await trio.sleep(1.0)  # the plugin ignores the cancel: the stop still waits
        assert await text_of(page, "#stop") == "Stopping…"
        assert not await page.evaluate("!!document.querySelector('.timeline')")
        await click(page, "#waiting-list [data-call=w1] .force")
        timeline = await page.wait_for(
            "(document.querySelector('.timeline') || {}).textContent")
        assert "Stop: aborted" in timeline and "w1" in timeline and "ABORTED" in timeline
        await page.wait_for("document.getElementById('waiting').hidden")
        answer = await native.answer(900, within=30)
        assert answer["result"]["stopReason"] == "cancelled"
        await native.aclose()
