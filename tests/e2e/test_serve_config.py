"""``quiesce serve --config FILE``: the file's defaults reach the daemon and every host it
starts; options on the command line win; a bad file is refused before anything runs."""

from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys

import msgspec
import psutil
import pytest
import trio

from protocol.messages.client import AgentPromptResult, SessionNewParams
from protocol.messages.events import AssistantMessageEvent
from tests.conftest import Marked
from tests.kit.daemon import Agent, agent_daemon, call, text


def json_script(responses: list[list[dict[str, object]]]) -> str:
    return json.dumps(responses)


def write_config(path: pathlib.Path, body: str) -> pathlib.Path:
    path.write_text(body)
    return path


async def new_default_session(agent: Agent, workspace: pathlib.Path) -> None:
    result = await agent.daemon.request("session.new", SessionNewParams(str(workspace), "ask"))
    agent.session_id = result.session_id


async def test_file_sets_the_default_provider_and_every_hosts_settings(
        tmp_path: pathlib.Path, marked: Marked) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    script = tmp_path / "script.json"
    script.write_text(json_script([[call("w1", "Write", path="a.txt", content="x")],
                                   [text("after the denial")],
                                   [call("w2", "Write", path="b.txt", content="y")],
                                   [text("after the second denial")]]))
    # Nobody answers the permission prompts: only the file's host setting makes them end.
    config = write_config(tmp_path / "config.toml", f'provider = "scripted:{script}"\n'
                          "[host]\npermission_timeout = 0.3\n")
    async with agent_daemon(marked, extra_args=("--config", str(config))) as agent:
        await new_default_session(agent, workspace)
        with trio.fail_after(20):
            first: AgentPromptResult = await agent.prompt("write")
        assert first.stop_reason == "end_turn" and first.turn_id is not None
        assert agent.results(first.turn_id)["w1"].code == "TOOL_DENIED"
        # Denied by the host's timeout, which withdraws the prompt it gave up on.
        assert [r.request_id for r in agent.permission_requests] == agent.withdrawn != []

        # A replacement host gets the same settings.
        assert agent.daemon.info is not None
        first_host = int(agent.daemon.info.capabilities["host"]["pid"])
        os.kill(first_host, signal.SIGKILL)
        with trio.fail_after(10):  # reaped: the daemon has seen it die
            while psutil.pid_exists(first_host):
                await trio.sleep(0.02)
        with trio.fail_after(20):
            second: AgentPromptResult = await agent.prompt("write again")
        assert second.turn_id is not None
        results = agent.results(second.turn_id)
        assert [r.code for r in results.values()] == ["TOOL_DENIED"], results
        assert [r.request_id for r in agent.permission_requests] == agent.withdrawn
        assert len(agent.withdrawn) == 2
        agent.assert_balanced()
    assert not (workspace / "a.txt").exists() and not (workspace / "b.txt").exists()


async def test_command_line_option_beats_the_file(tmp_path: pathlib.Path,
                                                  marked: Marked) -> None:
    from_file, from_flag = tmp_path / "file.json", tmp_path / "flag.json"
    from_file.write_text(json_script([[text("from the file")]]))
    from_flag.write_text(json_script([[text("from the flag")]]))
    config = write_config(tmp_path / "config.toml", f'provider = "scripted:{from_file}"\n')
    async with agent_daemon(marked, extra_args=("--config", str(config),
                                                "--provider", f"scripted:{from_flag}")) as agent:
        await new_default_session(agent, tmp_path)
        with trio.fail_after(20):
            await agent.prompt("hi")
        said = [e for e in agent.log() if isinstance(e, AssistantMessageEvent)]
        assert "from the flag" in msgspec.json.encode(said).decode()


async def refused(marked: Marked, config: pathlib.Path) -> str:
    with trio.fail_after(30):
        done = await trio.run_process(
            [sys.executable, "-m", "runtime", "serve", "--config", str(config)],
            stdin=subprocess.DEVNULL, capture_stdout=True, capture_stderr=True, check=False,
            env=marked.env())
    assert done.returncode == 2, done
    assert done.stdout == b""
    return done.stderr.decode()


async def test_unknown_key_is_refused_by_name(tmp_path: pathlib.Path, marked: Marked) -> None:
    config = write_config(tmp_path / "c.toml", "process_grase = 3\n")
    assert "unknown field `process_grase`" in await refused(marked, config)


async def test_bad_host_setting_is_refused_by_name(tmp_path: pathlib.Path,
                                                   marked: Marked) -> None:
    config = write_config(tmp_path / "c.toml", '[host]\npermission_timeout = "soon"\n')
    message = await refused(marked, config)
    assert "[host]" in message and "permission_timeout" in message


async def test_missing_named_file_is_refused(tmp_path: pathlib.Path, marked: Marked) -> None:
    assert "does not exist" in await refused(marked, tmp_path / "absent.toml")



async def test_unknown_host_key_is_refused_by_name(tmp_path: pathlib.Path,
                                                   marked: Marked) -> None:
    config = write_config(tmp_path / "c.toml", "[host.tools]\nkill_grase = 1\n")
    assert "tools.kill_grase" in await refused(marked, config)


async def test_bad_environment_table_is_refused_by_name(tmp_path: pathlib.Path,
                                                        marked: Marked) -> None:
    config = write_config(tmp_path / "c.toml", '[environment]\ninclude = "GITHUB_TOKEN"\n')
    message = await refused(marked, config)
    assert "[environment]" in message and "environment.include" in message
    config = write_config(tmp_path / "d.toml", "[environment]\nincluded = []\n")
    assert "environment.included" in await refused(marked, config)


async def test_step_limit_from_the_file(tmp_path: pathlib.Path, marked: Marked) -> None:
    config = write_config(tmp_path / "c.toml", "max_steps = 1\n")
    script = [[call("g1", "Glob", pattern="*")], [text("a second step")]]
    async with agent_daemon(marked, extra_args=("--config", str(config))) as agent:
        await agent.new_session(tmp_path, script)
        with trio.fail_after(20):
            answer = await agent.prompt("go")
        assert answer.stop_reason == "max_steps"
        agent.assert_balanced()


@pytest.mark.parametrize(("args", "env", "named"), [
    (["--max-steps", "0"], {}, "--max-steps"),
    (["--ping-interval", "0"], {}, "--ping-interval"),
    (["--process-grace", "soon"], {}, "--process-grace"),
    ([], {"QUIESCE_MAX_FRAME": "big"}, "--max-frame-size"),
])
async def test_bad_option_values_are_refused_by_name(marked: Marked, args: list[str],
                                                     env: dict[str, str], named: str) -> None:
    with trio.fail_after(30):
        done = await trio.run_process(
            [sys.executable, "-m", "runtime", "serve", *args], stdin=subprocess.DEVNULL,
            capture_stdout=True, capture_stderr=True, check=False, env=marked.env(**env))
    assert done.returncode == 2 and done.stdout == b""
    assert f"argument {named}:" in done.stderr.decode()


async def test_relative_paths_are_read_from_the_files_folder(tmp_path: pathlib.Path,
                                                             marked: Marked) -> None:
    """``data_dir``, a ``scripted:FILE`` provider and a hook's command given relative to the
    configuration file are found beside it, whatever the daemon's working directory; a
    path that is not there is named as resolved."""
    conf = tmp_path / "conf"
    (conf / "hooks").mkdir(parents=True)
    (conf / "script.json").write_text(json_script([[call("b1", "Bash", command="echo ran")],
                                                   [text("done")]]))
    hook = conf / "hooks" / "allow"
    hook.write_text("#!/bin/sh\ncat > /dev/null\ntouch \"$0.ran\"\n")
    hook.chmod(0o755)
    config = write_config(conf / "config.toml", 'data_dir = "data"\n'
                          'provider = "scripted:script.json"\n'
                          '[[hooks.pre_tool_use]]\nmatcher = "Bash"\n'
                          'command = ["./hooks/allow"]\n')
    workspace = tmp_path / "ws"
    workspace.mkdir()
    assert pathlib.Path.cwd() != conf
    async with agent_daemon(marked, extra_args=("--config", str(config)),
                            env_drop=("QUIESCE_DATA_DIR",)) as agent:
        result = await agent.daemon.request("session.new", SessionNewParams(
            str(workspace), "auto"))
        agent.session_id = result.session_id
        with trio.fail_after(20):
            answer: AgentPromptResult = await agent.prompt("go")
        assert answer.stop_reason == "end_turn"
    assert (conf / "data" / "sessions" / f"{result.session_id}.jsonl").is_file()
    assert (conf / "hooks" / "allow.ran").exists()  # the hook found and run

    missing = write_config(conf / "missing.toml", 'provider = "scripted:nothere.json"\n')
    async with agent_daemon(marked, extra_args=("--config", str(missing))) as agent:
        with pytest.raises(Exception) as refused:
            await agent.daemon.request("session.new", SessionNewParams(str(workspace), "auto"))
        assert str(conf / "nothere.json") in str(refused.value)
