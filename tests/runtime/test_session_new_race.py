"""session.close landing just as session.new finishes: the open is undone, not lost."""

from __future__ import annotations

import dataclasses
import pathlib
from typing import Any

import msgspec
import pytest
import trio

from protocol.errors import ErrorCode, RpcError
from protocol.messages.client import ScriptedProviderConfig, SessionNewParams
from protocol.messages.host import PluginsListParams, PluginsListResult, SessionOpenResult
from runtime.daemon.daemon import Daemon
from runtime.daemon.sessions.session import Session


class _Host:
    """A host whose plugins.list answer comes together with a session.close of the
    session: the cancel lands after the open's last checkpoint."""

    def __init__(self, daemon: Daemon) -> None:
        self.daemon = daemon
        self.told: list[str] = []
        self.session: Session | None = None

    async def request(self, method: str, params: msgspec.Struct) -> Any:
        await trio.lowlevel.checkpoint()
        if method == "session.open":
            return SessionOpenResult()
        assert isinstance(params, PluginsListParams)
        self.session = self.daemon.sessions.get(params.session_id)
        assert self.session.registration is not None  # registered, until undone
        opening = self.session.opening
        assert opening is not None
        opening.scope.cancel()  # what session.close does
        return PluginsListResult((), ())

    async def request_if_alive(self, method: str, params: msgspec.Struct) -> Any:
        self.told.append(method)


async def test_a_close_after_the_opens_last_checkpoint_undoes_it(
        tmp_path: pathlib.Path) -> None:
    daemon = Daemon(data_dir=tmp_path / "data")
    daemon.client_link.initialized = True
    host = _Host(daemon)
    daemon.requests.services = dataclasses.replace(
        daemon.requests.services, host=host)  # type: ignore[arg-type]
    workspace = tmp_path / "ws"
    workspace.mkdir()
    with pytest.raises(RpcError) as refused:
        await daemon.requests.session_new(SessionNewParams(
            str(workspace), "auto", ScriptedProviderConfig(script=[])))
    assert refused.value.code == ErrorCode.REQUEST_CANCELLED
    assert list(daemon.sessions.all()) == []
    assert host.told == ["session.close"]
    # Undone: a fresh host would not be told of it.
    assert host.session is not None and host.session.registration is None
    assert list(daemon.requests.registrations()) == []
