"""A hook's answer read sans-IO (``runtime.agent.hooks.answer``) and its configuration checked
(``runtime.agent.hooks.config``)."""

from __future__ import annotations

import json

import msgspec
import pytest

from protocol.messages.host import HooksRunResult
from protocol.tools import ok_result
from runtime.agent.hooks.answer import Verdict, hook_input, verdict
from runtime.daemon.config import ServeConfig, hook_config, parse_serve_config
from runtime.daemon.config_file import ConfigError


def exited(status: int, stdout: str = "", stderr: str = "") -> HooksRunResult:
    return HooksRunResult("exited", status, None, stdout, stderr)


@pytest.mark.parametrize(("result", "expected"), [
    (exited(0), Verdict("allow")),
    (exited(0, "  \n"), Verdict("allow")),
    (exited(2, stderr="no rm -rf\n"), Verdict("deny", "no rm -rf")),
    (exited(2), Verdict("deny", "denied by a hook (exit status 2)")),
    (exited(0, '{"decision": "deny"}'), Verdict("deny", "denied by a hook")),
    (exited(0, '{"decision": "ask", "reason": "r"}'), Verdict("ask", "r")),
    (exited(0, '{"stopTurn": true}'), Verdict("allow", stop_turn="a hook stopped the turn")),
    (exited(0, '{"additionalContext": "c"}'), Verdict("allow", context="c")),
    (exited(1, stderr="boom"), Verdict("deny", "the hook failed: exit status 1: boom",
                                       failed=True)),
    (HooksRunResult("exited", None, "SIGKILL"),
     Verdict("deny", "the hook failed: it was killed by SIGKILL", failed=True)),
    (HooksRunResult("timeout"),
     Verdict("deny", "the hook failed: it did not finish within its 5 s time limit",
             failed=True)),
    (HooksRunResult("failed", error="no such file"),
     Verdict("deny", "the hook failed: no such file", failed=True)),
])
def test_verdicts(result: HooksRunResult, expected: Verdict) -> None:
    assert verdict("pre_tool_use", result, 5.0) == expected


@pytest.mark.parametrize("stdout", ['{"decison": "deny"}', "[1]", '{"decision": "maybe"}',
                                    "not json"])
def test_an_answer_that_is_not_one_fails_closed(stdout: str) -> None:
    answer = verdict("pre_tool_use", exited(0, stdout), 5.0)
    assert answer.decision == "deny" and answer.failed


def test_ask_after_the_call_fails_closed() -> None:
    answer = verdict("post_tool_use", exited(0, '{"decision": "ask"}'), 5.0)
    assert answer.decision == "deny" and answer.failed


def test_the_input_of_a_post_hook_has_the_result() -> None:
    given = json.loads(hook_input("post_tool_use", session_id="s", turn_id="t1",
                                  call_id="c", tool="Bash", args={"command": "ls"},
                                  workspace="/w", result=ok_result("out")))
    assert given["result"] == {"code": None, "isError": False, "content": "out"}


@pytest.mark.parametrize(("raw", "named"), [
    ({"hooks": {"pre_tool_use": [{"matcher": "Bash", "command": ["x"], "timout": 1}]}},
     "timout"),
    ({"hooks": {"pre_tool_use": [{"matcher": "Bash", "command": []}]}}, "command"),
    ({"hooks": {"pre_tool_use": [{"matcher": "Bash", "command": ["x"], "timeout": 0}]}},
     "timeout"),
    ({"hooks": {"on_stop": []}}, "on_stop"),
    ({"tools": {"timeouts": {"Grep": -1}}}, "timeouts"),
    ({"tools": {"limits": {}}}, "limits"),
])
def test_bad_hook_configuration_is_refused_by_name(raw: dict[str, object], named: str) -> None:
    with pytest.raises(ConfigError, match=named):
        parse_serve_config(None, raw)


def test_a_bad_matcher_is_refused_by_its_key() -> None:
    config = msgspec.convert({"hooks": {"post_tool_use": [
        {"matcher": "*", "command": ["x"]}, {"matcher": "Write(", "command": ["y"]}]}},
        ServeConfig)
    with pytest.raises(ConfigError, match=r"hooks\.post_tool_use\[1\]\.matcher"):
        hook_config(config, None)


def test_matchers_match_whole_tool_names() -> None:
    config = hook_config(msgspec.convert({"hooks": {"pre_tool_use": [
        {"matcher": "Bash", "command": ["a"]}, {"matcher": "Write|Edit", "command": ["b"]},
        {"matcher": "*", "command": ["c"]}]}, "tools": {"timeouts": {"Grep": 30}}},
        ServeConfig), None)
    assert [h.index for h in config.matching("pre_tool_use", "Bash")] == [0, 2]
    assert [h.index for h in config.matching("pre_tool_use", "BashX")] == [2]
    assert [h.index for h in config.matching("pre_tool_use", "Edit")] == [1, 2]
    assert config.matching("post_tool_use", "Edit") == []
    assert config.timeout_for("Grep") == 30 and config.timeout_for("Read") is None
    assert config.pre_tool_use[0].spec.timeout == 60.0  # the documented default
