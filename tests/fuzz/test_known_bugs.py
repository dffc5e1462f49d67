"""Regressions for bugs the fuzz found outside ``protocol/`` (now fixed).

The bulk fuzz (``tests/fuzz/stream.py``) sends these inputs too, every run.
"""

from __future__ import annotations

import pathlib

import pytest
import trio

from protocol.errors import ErrorCode, RpcError
from protocol.version import check_compatible
from runtime.daemon.sessions.store import SessionStore
from tests.conftest import Marked
from tests.fuzz.stream import host_command, spawned
from tests.fuzz.test_stray import request


def test_a_version_with_superscript_digits_is_a_mismatch() -> None:
    # On the wire: initialize {"protocolVersion": "1.²"} is answered -32603 Internal error.
    with pytest.raises(RpcError) as info:
        check_compatible("1.²")
    assert info.value.code == ErrorCode.PROTOCOL_MISMATCH


def test_a_session_id_with_a_trailing_newline_is_malformed(tmp_path: pathlib.Path) -> None:
    # On the wire: session.load {"sessionId": "s-0123456789ab\n"} is answered NOT_FOUND
    # (the id was accepted and a file name with a newline looked up), not INVALID_PARAMS.
    with pytest.raises(RpcError) as info:
        SessionStore(tmp_path).path_of("s-0123456789ab\n")
    assert info.value.code == ErrorCode.INVALID_PARAMS


async def test_host_session_open_with_a_nul_in_the_workspace_is_invalid_params(
        marked: Marked, tmp_path: pathlib.Path) -> None:
    with trio.fail_after(20):
        async with spawned(host_command(), marked.env(), str(tmp_path / "host.log")) as host:
            hello = await host.call(request("init", "initialize", {"protocolVersion": "1.0"}))
            assert "result" in hello, hello
            answer = await host.call(request("open", "session.open", {
                "sessionId": "s-nul", "workspace": f"{tmp_path}/a\u0000b"}))
            still = await host.call(request("stats", "host.stats"))
    assert "result" in still
    assert answer.get("error", {}).get("code") == ErrorCode.INVALID_PARAMS, answer
