"""The host link's handshake and the host's configuration, against a real host process."""

from __future__ import annotations

import pathlib
import subprocess
from typing import Any

import pytest
import trio

from host.main import ConfigError, parse_config
from protocol.errors import ErrorCode
from protocol.toolclass import ToolClass
from protocol.version import PROTOCOL_VERSION
from tests.conftest import Marked
from tests.fuzz.stream import host_command, log_errors, spawned


def request(rid: str, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "method": method}
    if params is not None:
        message["params"] = params
    return message


def error_code(answer: dict[str, Any]) -> int | None:
    code: int | None = answer.get("error", {}).get("code")
    return code


async def test_every_method_waits_for_a_successful_initialize(tmp_path: pathlib.Path,
                                                              marked: Marked) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    call = {"sessionId": "s", "callId": "c1", "tool": "Write",
            "args": {"path": "x.txt", "content": "early"}}
    before = [
        request("stats", "host.stats"),
        request("open", "session.open", {"sessionId": "s", "workspace": str(workspace)}),
        request("exec", "tools.execute", call),
        request("abort", "tools.abort", {"sessionId": "s", "callId": "c1", "tool": "Bash"}),
        request("force", "tools.force", {"sessionId": "s", "callId": "c1", "tool": "Bash"}),
        request("plugins", "plugins.list", {"sessionId": "s"}),
        request("close", "session.close", {"sessionId": "s"}),
    ]
    log = str(tmp_path / "host.log")
    with trio.fail_after(20):
        async with spawned(host_command(), marked.env(), log) as host:
            for message in before:
                answer = await host.call(message)
                assert error_code(answer) == ErrorCode.NOT_INITIALIZED, (message, answer)
            mismatch = await host.call(request("v2", "initialize", {"protocolVersion": "2.0"}))
            assert error_code(mismatch) == ErrorCode.PROTOCOL_MISMATCH, mismatch
            assert mismatch["error"]["data"]["supported"] == PROTOCOL_VERSION
            # A failed initialize leaves the link uninitialized.
            still = await host.call(request("stats2", "host.stats"))
            assert error_code(still) == ErrorCode.NOT_INITIALIZED, still
            ok = await host.call(request("v1", "initialize", {"protocolVersion": "1.0"}))
            assert ok["result"]["protocolVersion"] == PROTOCOL_VERSION
            stats = await host.call(request("stats3", "host.stats"))
            assert stats["result"]["callsInFlight"] == 0
            # A later mismatched initialize does not undo the handshake.
            again = await host.call(request("v3", "initialize", {"protocolVersion": "9.0"}))
            assert error_code(again) == ErrorCode.PROTOCOL_MISMATCH
            assert "result" in await host.call(request("stats4", "host.stats"))
            await host.stdin.aclose()
            assert await host.process.wait() == 0
    assert not (workspace / "x.txt").exists()
    assert not log_errors(log), log_errors(log)[:3]


async def test_shutdown_is_answered_before_initialize(tmp_path: pathlib.Path,
                                                      marked: Marked) -> None:
    with trio.fail_after(20):
        async with spawned(host_command(), marked.env(), str(tmp_path / "host.log")) as host:
            answer = await host.call(request("bye", "shutdown"))
            assert answer.get("result") == {}, answer
            assert await host.process.wait() == 0


# -- configuration ----------------------------------------------------------------------

def test_a_valid_config_is_read_whole() -> None:
    config = parse_config('{"permission_timeout": 5, "stop_timeout": 0.5,'
                          ' "tools": {"kill_grace": 0.25},'
                          ' "admission": {"per_class": {"process": 2}, "max_waiting": 0},'
                          ' "plugins": {"quiet_window": 0}}')
    assert config.permission_timeout == 5 and config.stop_timeout == 0.5
    assert config.tools.kill_grace == 0.25
    assert config.admission.per_class == {ToolClass.PROCESS: 2}
    assert config.admission.max_waiting == 0 and config.plugins.quiet_window == 0
    assert parse_config(None) == parse_config("") == parse_config("{}")


@pytest.mark.parametrize(("text", "named"), [
    ('{"kill_grace": 1}', "'kill_grace'"),  # a nested key at the top level
    ('{"tools": {"kill_grase": 1}}', "'tools.kill_grase'"),
    ('{"admission": {"per_sesion": 1}}', "'admission.per_sesion'"),
    ('{"tombstone_ttl": 0}', "tombstone_ttl"),
    ('{"tombstone_capacity": 0}', "tombstone_capacity"),
    ('{"permission_timeout": -1}', "permission_timeout"),
    ('{"tools": {"kill_grace": -0.5}}', "tools.kill_grace"),
    ('{"admission": {"per_class": {"process": 0}}}', "admission.per_class"),
    ('{"admission": {"per_class": {"proc": 1}}}', "admission.per_class"),
    ('{"tools": {"kill_grace": "2"}}', "tools.kill_grace"),
    ('{"tools": {"image_backend": []}}', "tools.image_backend"),
    ('{"tools": "fast"}', "tools"),
    ('[]', "object"),
    ('{"tools": ', "JSON"),
])
def test_an_unknown_key_or_invalid_value_is_refused_by_name(text: str, named: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(text)
    assert named in str(info.value)


def test_the_environments_plugin_settings_are_checked_with_a_file_only(marked: Marked) -> None:
    """A host started without ``--config`` takes ``QUIESCE_PLUGIN_*`` as they are, as it
    always did; with a file, they are that file's defaults and checked with it."""
    env = {**marked.env(), "QUIESCE_PLUGIN_START_TIMEOUT": "0"}
    bare = subprocess.run(host_command(), stdin=subprocess.DEVNULL, capture_output=True,
                          timeout=20, env=env, check=False)
    assert bare.returncode == 0, bare.stderr
    filed = subprocess.run([*host_command(), "--config", "{}"], stdin=subprocess.DEVNULL,
                           capture_output=True, timeout=20, env=env, check=False)
    assert filed.returncode == 2
    assert b"plugins.start_timeout" in filed.stderr


def test_the_host_refuses_a_bad_config_at_start(marked: Marked) -> None:
    done = subprocess.run([*host_command(), "--config", '{"tools": {"kill_grase": 1}}'],
                          stdin=subprocess.DEVNULL, capture_output=True, timeout=20,
                          env=marked.env(), check=False)
    assert done.returncode == 2
    assert done.stdout == b""  # stdout is the protocol's
    assert b"tools.kill_grase" in done.stderr

