"""The Bash specification the model receives states the session's own sandbox: its mode
as narrowed, its network, where it may write (issue 25, item 4)."""

from __future__ import annotations

import pathlib
import sys
from typing import Any

import pytest
import trio

from protocol.messages.client import OpenAIProviderConfig, SessionNewParams
from tests.conftest import Marked
from tests.e2e.sandboxkit import as_root, config
from tests.kit.daemon import agent_daemon
from tests.providers.fakeserver import FakeServer, Reply
from tests.providers.recorded import event, sse

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only")


PROXY = '[sandbox]\nnetwork = "proxy"\nallow_domains = ["localhost", "*.example.org"]\n'


def bash_description(request: dict[str, Any]) -> str:
    [bash] = [t["function"] for t in request["tools"] if t["function"]["name"] == "Bash"]
    description: str = bash["description"]
    return description


async def test_the_bash_spec_states_the_sessions_narrowed_mode(
        tmp_path: pathlib.Path, marked: Marked) -> None:
    """A session narrowed to ``read-only`` is told it may write only in ``$TMPDIR``; a
    default one is told ``workspace-write`` with its workspace among the roots."""
    server = FakeServer()
    for _ in range(2):
        server.queue(Reply(body=(sse(event({"content": "ok"}), event({}, "stop")),)))
    workspace = tmp_path / "ws"
    workspace.mkdir()
    async with trio.open_nursery() as nursery:
        await server.start(nursery)
        async with agent_daemon(marked, env_extra={"QUIESCE_TEST_KEY": "k"}) as agent:
            for narrowed in ("read-only", None):
                opened = await agent.daemon.request("session.new", SessionNewParams(
                    str(workspace), "auto",
                    OpenAIProviderConfig(base_url=server.base_url, model="m",
                                         api_key_env="QUIESCE_TEST_KEY"),
                    sandbox=narrowed))
                agent.session_id = opened.session_id
                with trio.fail_after(30):
                    await agent.prompt("hi")
        nursery.cancel_scope.cancel()
    narrow, default = (bash_description(r.json()) for r in server.requests)
    assert "mode read-only" in narrow and "workspace-write" not in narrow, narrow
    assert "write nowhere but $TMPDIR" in narrow, narrow
    assert "mode workspace-write" in default, default
    assert str(workspace.resolve()) in default, default
    assert "has no network" in default and "has no network" in narrow


@as_root
async def test_the_bash_spec_names_the_proxy_and_its_domains(
        tmp_path: pathlib.Path, marked: Marked) -> None:
    server = FakeServer()
    server.queue(Reply(body=(sse(event({"content": "ok"}), event({}, "stop")),)))
    workspace = tmp_path / "ws"
    workspace.mkdir()
    async with trio.open_nursery() as nursery:
        await server.start(nursery)
        async with agent_daemon(marked, env_extra={"QUIESCE_TEST_KEY": "k"},
                                extra_args=config(tmp_path, PROXY)) as agent:
            opened = await agent.daemon.request("session.new", SessionNewParams(
                str(workspace), "auto",
                OpenAIProviderConfig(base_url=server.base_url, model="m",
                                     api_key_env="QUIESCE_TEST_KEY")))
            agent.session_id = opened.session_id
            with trio.fail_after(30):
                await agent.prompt("hi")
        nursery.cancel_scope.cancel()
    described = bash_description(server.requests[0].json())
    assert "only through an HTTP proxy" in described, described
    assert "localhost, *.example.org" in described, described
    assert "proxy's 403 naming it" in described, described
