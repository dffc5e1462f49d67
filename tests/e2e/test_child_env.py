"""No child process inherits the user's secrets (issue 26, item 3): a Bash call, a hook and
a plugin server each start from the daemon's environment without secret-looking
variables and provider keys, with what ``[environment]`` includes and sets, and a plugin
server's declared ``env`` as declared."""

from __future__ import annotations

import pathlib
import sys

import trio

from protocol.messages.client import (
    OpenAIProviderConfig,
    ScriptedProviderConfig,
    SessionNewParams,
    SessionNewResult,
)
from protocol.messages.common import McpServerConfig
from tests.conftest import Marked
from tests.e2e.hookkit import hook_table, script, wait_for_file
from tests.kit.daemon import agent_daemon, call, text
from tests.plugins.support import SERVER

SECRETS = {
    "OPENAI_API_KEY": "sk-openai-secret",
    "ANTHROPIC_API_KEY": "sk-ant-secret",
    "AWS_SECRET_ACCESS_KEY": "aws-secret",
    "DB_PASSWORD": "hunter2",
    "MY_CREDENTIALS_FILE": "/secret/creds",
    "npm_token": "npm-secret",
    "MY_LLM_ACCESS": "llm-secret",  # not secret-looking: the provider table names it
    "SESSION_LLM_ACCESS": "session-llm-secret",  # a session's provider names it
    "EXCLUDED_BY_CONFIG": "gone",
}
KEPT = {"GITHUB_TOKEN": "ghp-included", "PLAIN_VARIABLE": "plain"}


def names(env_text: str) -> dict[str, str]:
    pairs = (line.split("=", 1) for line in env_text.splitlines() if "=" in line)
    return {name: value for name, value in pairs}


def check(where: str, env: dict[str, str]) -> None:
    leaked = sorted(set(SECRETS) & set(env))
    assert not leaked, f"{where} sees {leaked}"
    assert not any(value in env.values() for value in SECRETS.values()), where
    assert env.get("GITHUB_TOKEN") == "ghp-included", f"{where}: the included variable is missing"
    assert env.get("PLAIN_VARIABLE") == "plain", where
    assert env.get("SET_BY_CONFIG") == "from-the-file", where


async def test_bash_hook_and_plugin_server_see_no_secret(tmp_path: pathlib.Path,
                                                         marked: Marked) -> None:
    hook_out = tmp_path / "hook-env"
    server_out = tmp_path / "server-env"
    hook = script(tmp_path, "env-hook", f"env > {hook_out}\nexit 0\n")
    config = tmp_path / "config.toml"
    config.write_text(
        'provider = { kind = "openai", apiKeyEnv = "MY_LLM_ACCESS", '
        'baseUrl = "http://127.0.0.1:9" }\n'
        "[environment]\n"
        'include = ["GITHUB_TOKEN"]\n'
        'exclude = ["EXCLUDED_*"]\n'
        'set = { SET_BY_CONFIG = "from-the-file" }\n'
        + hook_table("pre_tool_use", "Bash", hook))
    workspace = tmp_path / "ws"
    workspace.mkdir()
    server = McpServerConfig(
        "envdump", "sh", ("-c", f'env > {server_out}; exec "$0" "$1"', sys.executable,
                          str(SERVER)), {"DECLARED_TOKEN": "declared"})
    script_turns = [[call("b", "Bash", command="env")], [text("done")]]
    provider = ScriptedProviderConfig(script=script_turns)
    async with agent_daemon(marked, extra_args=("--config", str(config)),
                            env_extra={**SECRETS, **KEPT}) as agent:
        # A session whose provider names its own key variable: from its open on, no
        # child of any session sees that variable either.
        with trio.fail_after(30):
            await agent.daemon.request("session.new", SessionNewParams(
                str(workspace), "auto", OpenAIProviderConfig(
                    base_url="http://127.0.0.1:9", model="m",
                    api_key_env="SESSION_LLM_ACCESS")))
        with trio.fail_after(30):
            opened: SessionNewResult = await agent.daemon.request("session.new", SessionNewParams(
                str(workspace), "auto", provider, (server,)))
        agent.session_id = opened.session_id
        assert [(s.name, s.error) for s in opened.plugin_servers] == [("envdump", None)]
        with trio.fail_after(30):
            answer = await agent.prompt("go")
        result = agent.results(answer.turn_id or "")["b"]
        assert result.code is None, result
        bash_env = names(result.content[0].text)  # type: ignore[union-attr]
        check("a Bash call", bash_env)
        check("a hook", names(await wait_for_file(hook_out)))
        server_env = names(await wait_for_file(server_out))
        check("a plugin server", server_env)
        assert server_env.get("DECLARED_TOKEN") == "declared", "declared env not passed"
