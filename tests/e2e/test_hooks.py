"""Hooks against the real daemon and host: decisions, the log, and the stop contract."""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import signal

import trio

from protocol.causes import HookCause
from protocol.messages.events import ToolResultEvent
from protocol.messages.host import PermissionRequestParams, PermissionRequestResult
from tests.conftest import Marked
from tests.e2e.hookkit import (
    decisions,
    gone,
    hook_table,
    hooked,
    pid_file_script,
    script,
    wait_for_file,
)
from tests.kit.daemon import call, text

DONE = [text("done")]


def result_text(result: ToolResultEvent) -> str:
    return "\n".join(c.text for c in result.content if hasattr(c, "text"))


async def test_exit_2_denies_with_stderr_as_the_reason(tmp_path: pathlib.Path,
                                                       marked: Marked) -> None:
    """The `rm -rf` blocker of docs/hooks.md: the command never runs."""
    check = script(tmp_path, "no-rm", 'input=$(cat)\ncase "$input" in *"rm -rf"*)\n'
                   '  echo "rm -rf is not allowed here" >&2; exit 2;; esac\nexit 0\n')
    ws = tmp_path / "ws"
    async with hooked(marked, tmp_path, hook_table("pre_tool_use", "Bash", check)) as agent:
        (ws / "keep").mkdir()
        await agent.new_session(ws, [[call("b1", "Bash", command="rm -rf keep")], DONE])
        with trio.fail_after(15):
            assert (await agent.prompt("clean")).stop_reason == "end_turn"
        (turn,) = {e.turn_id for e in agent.log() if isinstance(e, ToolResultEvent)}
        result = agent.results(turn)["b1"]
        assert result.code == "TOOL_DENIED"
        assert "rm -rf is not allowed here" in result_text(result)
        assert (ws / "keep").is_dir()
        (logged,) = decisions(agent)
        assert (logged.call_id, logged.event, logged.index, logged.decision) == (
            "b1", "pre_tool_use", 0, "deny")
        assert logged.reason == "rm -rf is not allowed here" and not logged.failed
        assert logged.command == (check,) and logged.duration_ms >= 0
        agent.assert_balanced()


async def test_the_hook_reads_its_input_and_allow_runs_the_call(tmp_path: pathlib.Path,
                                                                marked: Marked) -> None:
    seen = tmp_path / "input.json"
    record = script(tmp_path, "record", f'cat > "{seen}"\n')
    ws = tmp_path / "ws"
    async with hooked(marked, tmp_path, hook_table("pre_tool_use", "*", record)) as agent:
        session = await agent.new_session(
            ws, [[call("b1", "Bash", command="echo ran > out.txt")], DONE])
        with trio.fail_after(15):
            assert (await agent.prompt("run")).stop_reason == "end_turn"
        assert (ws / "out.txt").read_text() == "ran\n"
        given = json.loads(seen.read_text())
        assert given == {"event": "pre_tool_use", "sessionId": session, "turnId": "t1",
                         "callId": "b1", "tool": "Bash",
                         "args": {"command": "echo ran > out.txt", "timeoutMs": None,
                                  "sandbox": None},
                         "workspace": str(ws)}
        assert [d.decision for d in decisions(agent)] == ["allow"]


async def test_json_deny_and_the_first_deny_wins(tmp_path: pathlib.Path,
                                                 marked: Marked) -> None:
    deny = script(tmp_path, "deny", 'echo \'{"decision": "deny", "reason": "not today"}\'\n')
    later = tmp_path / "later-ran"
    never_runs = script(tmp_path, "later", f'touch "{later}"\n')
    toml = hook_table("pre_tool_use", "Write|Edit", deny) + hook_table(
        "pre_tool_use", "Write", never_runs)
    ws = tmp_path / "ws"
    async with hooked(marked, tmp_path, toml) as agent:
        await agent.new_session(ws, [[call("w1", "Write", path="x.txt", content="no")], DONE])
        with trio.fail_after(15):
            await agent.prompt("write")
        result = agent.results("t1")["w1"]
        assert result.code == "TOOL_DENIED" and "not today" in result_text(result)
        assert not (ws / "x.txt").exists() and not later.exists()
        assert [(d.index, d.decision, d.reason) for d in decisions(agent)] == [
            (0, "deny", "not today")]


async def test_a_failing_hook_fails_closed(tmp_path: pathlib.Path, marked: Marked) -> None:
    crash = script(tmp_path, "crash", "echo oops >&2\nexit 1\n")
    garbled = script(tmp_path, "garbled", "echo 'this is not json'\n")
    toml = hook_table("pre_tool_use", "Bash", crash) + hook_table("pre_tool_use", "Read",
                                                                 garbled)
    ws = tmp_path / "ws"
    (ws).mkdir()
    (ws / "a.txt").write_text("a")
    async with hooked(marked, tmp_path, toml) as agent:
        await agent.new_session(ws, [[call("b1", "Bash", command="touch ran")],
                                     [call("r1", "Read", path="a.txt")], DONE])
        with trio.fail_after(15):
            await agent.prompt("go")
        results = agent.results("t1")
        assert results["b1"].code == "TOOL_DENIED" and results["r1"].code == "TOOL_DENIED"
        assert "the hook failed: exit status 1: oops" in result_text(results["b1"])
        assert "not a valid answer" in result_text(results["r1"])
        assert not (ws / "ran").exists()
        assert [(d.decision, d.failed) for d in decisions(agent)] == [("deny", True)] * 2


async def test_a_long_answer_is_read_whole_and_a_nul_in_a_command_fails_closed(
        tmp_path: pathlib.Path, marked: Marked) -> None:
    # An answer of 100 KB (a linter's report as context) is JSON only if read whole; a
    # command holding a NUL cannot start: it is a failed hook, not an internal error.
    body = ("cat >/dev/null\nprintf '{\"additionalContext\": \"'\n"
            "head -c 100000 /dev/zero | tr '\\0' x\nprintf '\"}'\n")
    long_answer = script(tmp_path, "long", body)
    toml = (hook_table("post_tool_use", "Read", long_answer)
            + '[[hooks.pre_tool_use]]\nmatcher = "Bash"\ncommand = ["/bin/true\\u0000x"]\n')
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("a")
    async with hooked(marked, tmp_path, toml) as agent:
        await agent.new_session(ws, [[call("r1", "Read", path="a.txt")],
                                     [call("b1", "Bash", command="touch ran")], DONE])
        with trio.fail_after(15):
            await agent.prompt("go")
        results = agent.results("t1")
        assert results["r1"].code is None, result_text(results["r1"])
        assert results["b1"].code == "TOOL_DENIED"
        assert "could not start" in result_text(results["b1"]), result_text(results["b1"])
        assert not (ws / "ran").exists()


async def test_ask_prompts_even_in_auto_mode(tmp_path: pathlib.Path, marked: Marked) -> None:
    asked: list[PermissionRequestParams] = []

    async def allow(params: PermissionRequestParams) -> PermissionRequestResult:
        asked.append(params)
        return PermissionRequestResult("allow-once")

    ask = script(tmp_path, "ask", 'echo \'{"decision": "ask", "reason": "check this"}\'\n')
    ws = tmp_path / "ws"
    async with hooked(marked, tmp_path, hook_table("pre_tool_use", "Write", ask),
                      answer=allow) as agent:
        await agent.new_session(ws, [[call("w1", "Write", path="x.txt", content="yes")],
                                     [call("w2", "Write", path="y.txt", content="yes")], DONE],
                                mode="auto")
        with trio.fail_after(15):
            await agent.prompt("write")
        assert (ws / "x.txt").read_text() == "yes" and (ws / "y.txt").exists()
        assert [p.tool for p in asked] == ["Write", "Write"]  # auto mode asks nobody else
        assert [d.decision for d in decisions(agent)] == ["ask", "ask"]


async def test_additional_context_reaches_the_next_model_request(
        tmp_path: pathlib.Path, marked: Marked) -> None:
    from protocol.messages.client import OpenAIProviderConfig, SessionNewParams
    from tests.providers.fakeserver import FakeServer, Reply
    from tests.providers.recorded import call as sse_call
    from tests.providers.recorded import event, sse

    lint = script(tmp_path, "lint", 'cat > /dev/null\n'
                  'echo \'{"additionalContext": "lint: line 1 is too long"}\'\n')
    ws = tmp_path / "ws"
    ws.mkdir()
    server = FakeServer()
    server.queue(
        Reply(body=(sse(event(sse_call(0, id="call_1", name="Write",
                                       args='{"path": "a.py", "content": "x = 1"}')),
                        event({}, "tool_calls")),)),
        Reply(body=(sse(event({"content": "Fixed."}), event({}, "stop")),)),
    )
    config = tmp_path / "config.toml"
    config.write_text(hook_table("post_tool_use", "Write|Edit", lint))
    from tests.kit.daemon import agent_daemon

    async with trio.open_nursery() as nursery:
        await server.start(nursery)
        async with agent_daemon(marked, env_extra={"QUIESCE_TEST_KEY": "k"},
                                extra_args=("--config", str(config))) as agent:
            result = await agent.daemon.request("session.new", SessionNewParams(
                str(ws), "auto", OpenAIProviderConfig(
                    base_url=server.base_url, model="m", api_key_env="QUIESCE_TEST_KEY")))
            agent.session_id = result.session_id
            with trio.fail_after(20):
                assert (await agent.prompt("write")).stop_reason == "end_turn"
            tool_message = next(m for m in server.requests[1].json()["messages"]
                                if m["role"] == "tool")
            assert "lint: line 1 is too long" in tool_message["content"]
            written = agent.results("t1")["call_1"]
            assert written.code is None
            assert written.details["contexts"] == ["lint: line 1 is too long"]
        nursery.cancel_scope.cancel()


async def test_stop_turn_ends_the_turn_with_cause_hook(tmp_path: pathlib.Path,
                                                       marked: Marked) -> None:
    stop = script(tmp_path, "stop", 'echo \'{"stopTurn": true, "reason": "budget spent"}\'\n')
    ws = tmp_path / "ws"
    async with hooked(marked, tmp_path, hook_table("post_tool_use", "Bash", stop)) as agent:
        await agent.new_session(ws, [[call("b1", "Bash", command="echo hi")],
                                     [call("b2", "Bash", command="touch never")], DONE])
        with trio.fail_after(15):
            answer = await agent.prompt("go")
        assert answer.stop_reason == "cancelled"
        end = agent.turn_end_on_disk("t1")
        assert end is not None and end.end.kind == "aborted"
        assert end.end.reason == HookCause("budget spent")
        result = agent.results("t1")["b1"]
        assert result.code == "ABORTED" and "hi" in result.details["output"]  # body kept
        assert not (ws / "never").exists()
        assert [(d.decision, d.reason) for d in decisions(agent)] == [("stop", "budget spent")]
        agent.assert_balanced()


async def test_stop_during_a_pre_hook_kills_it(tmp_path: pathlib.Path, marked: Marked) -> None:
    slow, pid_file = pid_file_script(tmp_path, "slow", "sleep 30")
    ws = tmp_path / "ws"
    async with hooked(marked, tmp_path, hook_table("pre_tool_use", "Bash", slow)) as agent:
        await agent.new_session(ws, [[call("b1", "Bash", command="touch ran")]])
        async with trio.open_nursery() as nursery:
            nursery.start_soon(agent.prompt, "go")
            pid = int(await wait_for_file(pid_file))
            aborted = await agent.stop_and_check()
        assert [(c.call_id, c.code) for c in aborted.tool_calls] == [
            ("b1", "ABORTED_BEFORE_DISPATCH")]
        assert gone(pid), "the hook outlived the stop"
        assert aborted.settled_ms < 1000, aborted.settled_ms
        assert not (ws / "ran").exists()
        assert [d.decision for d in decisions(agent)] == ["aborted"]


async def test_a_frozen_host_never_leaves_a_stopped_hook_alive(tmp_path: pathlib.Path,
                                                               marked: Marked) -> None:
    # The host freezes (SIGSTOP) while a pre hook runs: no answer to hooks.abort within
    # the process grace, so the runtime kills the hook's cgroup itself before it answers.
    slow, pid_file = pid_file_script(tmp_path, "slow", "sleep 30")
    ws = tmp_path / "ws"
    host_pid = 0
    async with hooked(marked, tmp_path, hook_table("pre_tool_use", "Bash", slow),
                      extra_args=("--process-grace", "0.3")) as agent:
        assert agent.daemon.info is not None
        host_pid = int(agent.daemon.info.capabilities["host"]["pid"])
        try:
            await agent.new_session(ws, [[call("b1", "Bash", command="touch ran")]])
            async with trio.open_nursery() as nursery:
                nursery.start_soon(agent.prompt, "go")
                pid = int(await wait_for_file(pid_file))
                os.kill(host_pid, signal.SIGSTOP)
                aborted = await agent.stop_and_check(within=10)
                assert gone(pid), "the hook outlived the stop's answer"
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.kill(host_pid, signal.SIGCONT)
        assert [(c.call_id, c.code) for c in aborted.tool_calls] == [
            ("b1", "ABORTED_BEFORE_DISPATCH")]
        assert not (ws / "ran").exists()


async def test_a_denial_that_settles_after_the_stop_wins(tmp_path: pathlib.Path,
                                                         marked: Marked) -> None:
    """The stop comes first; the hook answers deny on its way out (on the TERM)."""
    last_word, pid_file = pid_file_script(
        tmp_path, "last-word",
        "trap 'echo \"denied as it was stopped\" >&2; exit 2' TERM\n"
        "while :; do sleep 0.05; done")
    ws = tmp_path / "ws"
    async with hooked(marked, tmp_path, hook_table("pre_tool_use", "Bash", last_word)) as agent:
        await agent.new_session(ws, [[call("b1", "Bash", command="touch ran")]])
        async with trio.open_nursery() as nursery:
            nursery.start_soon(agent.prompt, "go")
            pid = int(await wait_for_file(pid_file))
            aborted = await agent.stop_and_check()
        assert [c.code for c in aborted.tool_calls] == ["TOOL_DENIED"]
        assert "denied as it was stopped" in result_text(agent.results("t1")["b1"])
        assert gone(pid) and not (ws / "ran").exists()
        assert [d.decision for d in decisions(agent)] == ["deny"]


async def test_a_term_ignoring_hook_is_killed_after_the_kill_grace(
        tmp_path: pathlib.Path, marked: Marked) -> None:
    stubborn, pid_file = pid_file_script(tmp_path, "stubborn",
                                         "trap '' TERM\nwhile :; do sleep 0.05; done")
    ws = tmp_path / "ws"
    toml = hook_table("pre_tool_use", "Bash", stubborn) + "[host.tools]\nkill_grace = 0.5\n"
    async with hooked(marked, tmp_path, toml) as agent:
        await agent.new_session(ws, [[call("b1", "Bash", command="touch ran")]])
        async with trio.open_nursery() as nursery:
            nursery.start_soon(agent.prompt, "go")
            pid = int(await wait_for_file(pid_file))
            aborted = await agent.stop_and_check()
        assert [c.code for c in aborted.tool_calls] == ["ABORTED_BEFORE_DISPATCH"]
        assert gone(pid)
        assert 450 <= aborted.settled_ms < 2500, aborted.settled_ms  # TERM ignored, KILL at 0.5 s


async def test_stop_during_a_post_hook_keeps_the_body_details(tmp_path: pathlib.Path,
                                                              marked: Marked) -> None:
    slow, pid_file = pid_file_script(tmp_path, "slow", "sleep 30")
    ws = tmp_path / "ws"
    async with hooked(marked, tmp_path, hook_table("post_tool_use", "Bash", slow)) as agent:
        await agent.new_session(ws, [[call("b1", "Bash", command="echo body-ran")]])
        async with trio.open_nursery() as nursery:
            nursery.start_soon(agent.prompt, "go")
            pid = int(await wait_for_file(pid_file))
            aborted = await agent.stop_and_check()
        assert [c.code for c in aborted.tool_calls] == ["ABORTED"]
        result = agent.results(aborted.turn_id or "")["b1"]
        assert "body-ran" in result.details["output"] and result.details["exitStatus"] == 0
        assert gone(pid)
        assert aborted.settled_ms < 1000, aborted.settled_ms


async def test_a_hook_past_its_time_limit_denies(tmp_path: pathlib.Path,
                                                 marked: Marked) -> None:
    slow, pid_file = pid_file_script(tmp_path, "slow", "sleep 30")
    ws = tmp_path / "ws"
    toml = hook_table("pre_tool_use", "Bash", slow, timeout=0.3)
    async with hooked(marked, tmp_path, toml) as agent:
        await agent.new_session(ws, [[call("b1", "Bash", command="touch ran")], DONE])
        with trio.fail_after(15):
            await agent.prompt("go")
        result = agent.results("t1")["b1"]
        assert result.code == "TOOL_DENIED"
        assert "did not finish within its 0.3 s time limit" in result_text(result)
        assert gone(int(pid_file.read_text()))
        assert not (ws / "ran").exists()
        (logged,) = decisions(agent)
        assert logged.failed and logged.duration_ms >= 300


async def test_a_per_tool_timeout_ends_the_call_tool_timeout(tmp_path: pathlib.Path,
                                                             marked: Marked) -> None:
    ws = tmp_path / "ws"
    pid_file = ws / "bash.pid"
    toml = "[tools.timeouts]\nBash = 0.5\n"
    async with hooked(marked, tmp_path, toml) as agent:
        await agent.new_session(ws, [[call("b1", "Bash", command="echo $$ > bash.pid; sleep 30")],
                                     DONE])
        with trio.fail_after(15):
            assert (await agent.prompt("go")).stop_reason == "end_turn"
        result = agent.results("t1")["b1"]
        assert result.code == "TOOL_TIMEOUT", result
        assert "timed out after 0.5 s" in result_text(result)
        assert gone(int(pid_file.read_text()))
        await agent.check_no_tool_process()


async def test_ops_show_names_a_running_hook(tmp_path: pathlib.Path, marked: Marked) -> None:
    from tests.e2e.test_ops import ops, ops_text

    slow, pid_file = pid_file_script(tmp_path, "slow", "sleep 30")
    ws = tmp_path / "ws"
    async with hooked(marked, tmp_path, hook_table("pre_tool_use", "Bash", slow)) as agent:
        session = await agent.new_session(ws, [[call("b1", "Bash", command="true")]])
        async with trio.open_nursery() as nursery:
            nursery.start_soon(agent.prompt, "go")
            await wait_for_file(pid_file)
            shown = await ops_text(marked, "show", session)
            (row,) = [line for line in shown.splitlines() if line.startswith("b1 ")]
            assert row.split()[1:5] == ["Bash", "process", "hook", "pre_tool_use[0]"], shown
            code, data = await ops(marked, "show", session)
            assert code == 0 and f"pre_tool_use[0] {slow}" in json.dumps(data), data
            aborted = await agent.stop_and_check()
        assert [c.code for c in aborted.tool_calls] == ["ABORTED_BEFORE_DISPATCH"]


async def test_bad_hooks_are_refused_at_start_up_by_name(tmp_path: pathlib.Path,
                                                         marked: Marked) -> None:
    from tests.e2e.test_serve_config import refused

    config = tmp_path / "c.toml"
    config.write_text('[[hooks.pre_tool_use]]\nmatcher = "Bash"\ncommand = ["x"]\n'
                      "timeuot = 3\n")
    assert "unknown field `timeuot`" in await refused(marked, config)
    config.write_text('[[hooks.pre_tool_use]]\nmatcher = "(Bash"\ncommand = ["x"]\n')
    assert "hooks.pre_tool_use[0].matcher" in await refused(marked, config)


async def test_a_failing_post_hook_keeps_the_result_and_adds_its_failure(
        tmp_path: pathlib.Path, marked: Marked) -> None:
    """A post hook runs after the call did: its failure denies nothing. The real result is
    kept (code, text, details) and the failure is added after it; later hooks still run."""
    crash = script(tmp_path, "crash", "cat > /dev/null\necho 'no linter here' >&2\nexit 127\n")
    note = script(tmp_path, "note", "cat > /dev/null\n"
                  "echo '{\"additionalContext\": \"second hook ran\"}'\n")
    toml = (hook_table("post_tool_use", "Write|Bash", crash)
            + hook_table("post_tool_use", "Write|Bash", note))
    ws = tmp_path / "ws"
    async with hooked(marked, tmp_path, toml) as agent:
        await agent.new_session(ws, [[call("w1", "Write", path="a.py", content="x = 1\n")],
                                     [call("b1", "Bash", command="echo out; exit 3")], DONE])
        with trio.fail_after(20):
            await agent.prompt("go")
        results = agent.results("t1")
        written, ran = results["w1"], results["b1"]
        assert (ws / "a.py").read_text() == "x = 1\n"
        assert written.code is None and not written.is_error
        assert "denied" not in result_text(written)
        assert ran.code is None and "[exit status 3]" in result_text(ran)  # its own result
        assert "out" in ran.details["output"]
        for result in (written, ran):
            failure, second = result.details["contexts"]
            assert failure.startswith("the post_tool_use[0] hook failed after the call ran")
            assert "exit status 127: no linter here" in failure
            assert second == "second hook ran"
        assert [(d.call_id, d.decision, d.failed) for d in decisions(agent)] == [
            ("w1", "failed", True), ("w1", "allow", False),
            ("b1", "failed", True), ("b1", "allow", False)]
