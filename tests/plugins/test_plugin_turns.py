"""Plugin (MCP) tools end to end: ``quiesce serve`` → host → servers built with the SDK."""

from __future__ import annotations

import json
import pathlib

import pytest
import trio

from protocol.messages.events import ToolCallEvent, ToolProgressEvent, ToolResultEvent, TurnEnd
from tests.conftest import Marked
from tests.e2e.test_ops import find_key, ops
from tests.kit.daemon import agent_daemon, call, text
from tests.kit.waiters import wait_file
from tests.plugins.support import QUIET, new_plugin_session, pid_in
from tests.support import alive


async def test_plugin_tools_are_listed_and_called_with_progress(tmp_path: pathlib.Path,
                                                               marked: Marked) -> None:
    script = [[call("e1", "mcp__tools__echo", text="hi")],
              [call("c1", "mcp__tools__count", steps=3)],
              [call("f1", "mcp__tools__fail", reason="no luck")],
              [text("done")]]
    async with agent_daemon(marked, env_extra=QUIET) as agent:
        opened = await new_plugin_session(agent, tmp_path, script)
        (status,) = opened.plugin_servers
        assert status.name == "tools" and status.tools == 8 and status.error is None
        with trio.fail_after(30):
            answer = await agent.prompt("go")
        assert answer.stop_reason == "end_turn"
        results = agent.results(answer.turn_id or "")
        echo = results["e1"]
        assert not echo.is_error and echo.content[0].text.startswith("echo hi from ")  # type: ignore[union-attr]
        assert echo.details["plugin"] == {"server": "tools", "tool": "echo"}
        assert results["c1"].content[0].text == "counted to 3"  # type: ignore[union-attr]
        progress = [e.text for e in agent.events
                    if isinstance(e, ToolProgressEvent) and e.call_id == "c1"]
        assert progress == ["1/3 step 1\n", "2/3 step 2\n", "3/3 step 3\n"]
        assert all(e.stream == "progress" for e in agent.events
                   if isinstance(e, ToolProgressEvent))
        assert results["f1"].code == "TOOL_FAILED"
        classes = {e.call_id: e.tool_class for e in agent.log() if isinstance(e, ToolCallEvent)}
        assert classes == {"e1": "plugin", "c1": "plugin", "f1": "plugin"}
        agent.assert_balanced()


async def test_a_stop_the_server_honours(tmp_path: pathlib.Path, marked: Marked) -> None:
    script = [[call("w1", "mcp__tools__wait_politely")]]
    async with agent_daemon(marked, env_extra=QUIET) as agent:
        await new_plugin_session(agent, tmp_path, script)
        async with trio.open_nursery() as nursery:
            prompts = []

            async def prompt() -> None:
                prompts.append(await agent.prompt("go"))

            nursery.start_soon(prompt)
            server_pid = int(await wait_file(tmp_path / "started-politely"))
            # Answered only once settled and balanced; the server alone is left running.
            aborted = await agent.stop_and_check(spare=[server_pid])
            assert aborted.outcome == "aborted" and aborted.turn_id is not None
        assert prompts[0].stop_reason == "cancelled"
        # The server got the MCP cancel and stopped the tool; it keeps serving.
        assert (tmp_path / "cancelled-politely").read_text() == "yes"
        result = agent.results(aborted.turn_id)["w1"]
        assert result.code == "ABORTED"
        assert "answered a ping" in result.details["cancel"]
        # Honoured, as it happens; but MCP cannot say so, and the result does not claim it.
        assert result.details["unconfirmed"] is True and result.details["cancelRead"] is True
        assert [(c.call_id, c.code) for c in aborted.tool_calls] == [("w1", "ABORTED")]
        assert alive(server_pid)
        agent.assert_balanced()


def ignored_cancel_warnings(stderr: str) -> list[dict[str, object]]:
    """The host's JSON log lines (on the daemon's stderr) saying a cancel was ignored."""
    complete = stderr[:stderr.rfind("\n") + 1]  # a line still being written waits
    lines = [json.loads(line) for line in complete.splitlines() if line.startswith("{")]
    return [line for line in lines
            if line.get("level") == "warning" and "ignored the cancel" in str(line.get("msg"))]


async def test_a_stop_a_sync_tool_silently_ignores_is_unconfirmed_and_its_end_logged(
        tmp_path: pathlib.Path, marked: Marked, capfd: pytest.CaptureFixture[str]) -> None:
    # The SDK runs a sync tool in a worker thread: the cancel cannot interrupt it, and
    # it sends nothing for the call until it has slept (well past the quiet window).
    script = [[call("s1", "mcp__tools__sleep_then_write", seconds=1.5)]]
    async with agent_daemon(marked, env_extra=QUIET) as agent:
        await new_plugin_session(agent, tmp_path, script)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(agent.prompt, "go")
            server_pid = int(await wait_file(tmp_path / "started-sync"))
            aborted = await agent.stop_and_check(spare=[server_pid])
        assert aborted.outcome == "aborted" and aborted.turn_id is not None
        # Settled while the tool still runs: what the result says must not claim otherwise.
        assert not (tmp_path / "finished-sync").exists()
        result = agent.results(aborted.turn_id)["s1"]
        assert result.code == "ABORTED"
        assert result.details["unconfirmed"] is True and result.details["cancelRead"] is True
        texts = [c.text for c in result.content]  # type: ignore[union-attr]
        assert any("no confirmation that the tool stopped" in t for t in texts), texts
        # The tool goes on, finishes, and says so for the request: the host logs it.
        assert await wait_file(tmp_path / "finished-sync") == "yes"
        stderr = ""
        with trio.fail_after(10):
            while not ignored_cancel_warnings(stderr):
                await trio.sleep(0.05)
                stderr += capfd.readouterr().err
        (warning,) = ignored_cancel_warnings(stderr)
        assert warning["proc"] == "host" and str(warning["msg"]).startswith("plugin tools sent")
        await trio.sleep(0.2)  # nothing else comes of it: one result, in the log and on disk
        results = [e for e in agent.log() if isinstance(e, ToolResultEvent)]
        assert [(e.call_id, e.code) for e in results] == [("s1", "ABORTED")]
        agent.assert_balanced()


async def test_a_stop_the_server_ignores_stays_pending_until_forced(
        tmp_path: pathlib.Path, marked: Marked) -> None:
    script = [[call("w1", "mcp__tools__wait_stubbornly")],
              [call("e1", "mcp__tools__echo", text="again")], [text("after")]]
    # Progress every 50 ms; a quiet window of 0.5 s leaves a loaded machine some slack.
    async with agent_daemon(marked, extra_args=("--stuck-after", "0.3"),
                            env_extra={"QUIESCE_PLUGIN_QUIET_WINDOW": "0.5"}) as agent:
        await new_plugin_session(agent, tmp_path, script)
        aborted = []
        async with trio.open_nursery() as nursery:
            nursery.start_soon(agent.prompt, "go")
            server_pid = int(await wait_file(tmp_path / "started-stubbornly"))

            async def abort() -> None:  # the forced server is gone when it answers
                aborted.append(await agent.stop_and_check(within=30))

            nursery.start_soon(abort)
            await trio.sleep(1.6)  # three quiet windows: it is still reporting progress
            assert aborted == []  # the plugin call is awaited, so the stop is too
            code, show = await ops(marked, "show", agent.session_id)
            assert code == 0, show
            assert find_key(show, "stuck") is True
            assert find_key(show, "class") == "plugin"
            assert find_key(show, "state") in {"aborting", "draining"}
            assert alive(server_pid)

            code, forced = await ops(marked, "force", agent.session_id, "w1")
            assert code == 0, forced
        (stop,) = aborted
        assert stop.outcome == "aborted"
        result = agent.results(stop.turn_id or "")["w1"]
        assert result.code == "ABORTED"
        assert result.details["forced"] is True
        assert result.details["pluginServerKilled"] == "tools"
        assert not alive(server_pid)  # the force killed the server's tree
        agent.assert_balanced()
        # The next use starts the server again.
        script_turn = await agent.prompt("again")
        assert script_turn.stop_reason == "end_turn"
        echo = agent.results(script_turn.turn_id or "")["e1"]
        assert not echo.is_error and pid_in(echo.content[0].text) != server_pid  # type: ignore[union-attr]


async def test_a_crashing_server_fails_its_call_and_restarts_on_next_use(
        tmp_path: pathlib.Path, marked: Marked) -> None:
    script = [[call("e1", "mcp__tools__echo", text="one")],
              [call("x1", "mcp__tools__crash")],
              [call("e2", "mcp__tools__echo", text="two")],
              [text("done")]]
    async with agent_daemon(marked, env_extra=QUIET) as agent:
        await new_plugin_session(agent, tmp_path, script)
        with trio.fail_after(30):
            answer = await agent.prompt("go")
        assert answer.stop_reason == "end_turn"
        results = agent.results(answer.turn_id or "")
        crashed = results["x1"]
        assert crashed.code == "TOOL_FAILED" and crashed.details["serverExited"] is True
        first = pid_in(results["e1"].content[0].text)  # type: ignore[union-attr]
        second = pid_in(results["e2"].content[0].text)  # type: ignore[union-attr]
        assert first != second and not alive(first)
        ends = [e for e in agent.log() if isinstance(e, TurnEnd)]
        assert ends[-1].end.kind == "completed"
        agent.assert_balanced()


async def test_an_embedded_resource_shows_its_text_bounded(tmp_path: pathlib.Path,
                                                           marked: Marked) -> None:
    """A text resource's text reaches the model (up to RESOURCE_TEXT characters, then a
    marker saying how many more were cut); a binary one is summarised, never its bytes."""
    from host.plugins.results import RESOURCE_TEXT

    script = [[call("r1", "mcp__tools__resources", lines=10)],
              [call("r2", "mcp__tools__resources", lines=5000)], [text("done")]]
    async with agent_daemon(marked, env_extra=QUIET) as agent:
        await new_plugin_session(agent, tmp_path, script)
        with trio.fail_after(30):
            answer = await agent.prompt("go")
        results = agent.results(answer.turn_id or "")
        small = results["r1"].content[0].text  # type: ignore[union-attr]
        assert "[resource file:///project/notes.txt, text/plain]" in small, small
        assert "line 0 of the file" in small and "line 9 of the file" in small
        assert "[resource file:///project/logo.png, image/png, 100 bytes, not shown]" in small
        assert "iVBOR" not in small  # no base64
        big = results["r2"].content[0].text  # type: ignore[union-attr]
        whole = "".join(f"line {i} of the file\n" for i in range(5000))
        assert whole[:RESOURCE_TEXT] in big and whole not in big
        cut = len(whole) - RESOURCE_TEXT
        assert f"[… {cut} more characters of file:///project/notes.txt cut]" in big, big[-300:]
        assert "logo.png, image/png" in big  # the next block is still there


async def test_agent_force_on_the_stdio_client_link(tmp_path: pathlib.Path,
                                                    marked: Marked) -> None:
    """``agent.force`` (issue 27) does on the client link what ``quiesce ops force`` does:
    the stop that waits on a cancel-ignoring plugin call settles, the call recorded
    forced."""
    from protocol.errors import RemoteError
    from protocol.messages.renderer import AgentForceParams, AgentForceResult

    script = [[call("w1", "mcp__tools__wait_stubbornly")], [text("after")]]
    async with agent_daemon(marked, env_extra={"QUIESCE_PLUGIN_QUIET_WINDOW": "0.5"}) as agent:
        await new_plugin_session(agent, tmp_path, script)
        with pytest.raises(RemoteError):  # nothing is being stopped: nothing to force
            await agent.daemon.request("agent.force", AgentForceParams(agent.session_id))
        aborted = []
        async with trio.open_nursery() as nursery:
            nursery.start_soon(agent.prompt, "go")
            server_pid = int(await wait_file(tmp_path / "started-stubbornly"))

            async def abort() -> None:
                aborted.append(await agent.stop_and_check(within=30))

            nursery.start_soon(abort)
            await trio.sleep(1.2)
            assert aborted == [] and alive(server_pid)  # the stop waits on the plugin
            forced: AgentForceResult = await agent.daemon.request(
                "agent.force", AgentForceParams(agent.session_id))
            assert [(c.call_id, c.forced) for c in forced.calls] == [("w1", True)]
        (stop,) = aborted
        assert stop.outcome == "aborted"
        result = agent.results(stop.turn_id or "")["w1"]
        assert result.code == "ABORTED" and result.details["forced"] is True
        assert not alive(server_pid)
        agent.assert_balanced()
