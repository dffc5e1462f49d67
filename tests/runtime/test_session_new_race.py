"""session.close landing just as session.new finishes: the open is undone, not lost."""

from __future__ import annotations

import pathlib
from typing import Any

import msgspec
import pytest
import trio

from protocol.errors import ErrorCode, RpcError
from protocol.messages.client import ScriptedProviderConfig, SessionNewParams
from protocol.messages.host import PluginsListResult, SessionOpenParams
from runtime.daemon import Daemon


class _Host:
    """A host whose plugins.list answer comes together with a session.close of the
    session: the cancel lands after the open's last checkpoint."""

    def __init__(self, daemon: Daemon) -> None:
        self.daemon = daemon
        self.told: list[str] = []
        self.forgot: list[str] = []

    async def open_session(self, params: SessionOpenParams) -> None:
        await trio.lowlevel.checkpoint()

    async def request(self, method: str, params: msgspec.Struct) -> Any:
        await trio.lowlevel.checkpoint()
        session_id = params.session_id
        opening = self.daemon._lives[session_id].opening
        assert opening is not None
        opening.scope.cancel()  # what session.close does
        return PluginsListResult((), ())

    async def request_if_alive(self, method: str, params: msgspec.Struct) -> Any:
        self.told.append(method)

    def forget_session(self, session_id: str) -> None:
        self.forgot.append(session_id)


async def test_a_close_after_the_opens_last_checkpoint_undoes_it(
        tmp_path: pathlib.Path) -> None:
    daemon = Daemon(data_dir=tmp_path / "data")
    daemon._initialized = True
    host = _Host(daemon)
    daemon.host = host  # type: ignore[assignment]
    workspace = tmp_path / "ws"
    workspace.mkdir()
    with pytest.raises(RpcError) as refused:
        await daemon.session_new(SessionNewParams(
            str(workspace), "auto", ScriptedProviderConfig(script=[])))
    assert refused.value.code == ErrorCode.REQUEST_CANCELLED
    assert list(daemon.sessions.all()) == []
    assert host.told == ["session.close"] and len(host.forgot) == 1
    assert daemon._lives == {}
