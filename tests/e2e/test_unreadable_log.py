"""A session log the daemon cannot read is listed, with the reason, never dropped: by
``session.list`` and by ``quiesce ops``."""

from __future__ import annotations

import json
import pathlib
import sys

import msgspec
import pytest
import trio

from protocol.errors import ErrorCode, RemoteError
from protocol.messages.client import SessionLoadParams
from protocol.messages.common import Empty
from protocol.messages.events import SessionMeta, TurnStart
from tests.conftest import Marked
from tests.kit.daemon import agent_daemon

SESSION = "s-0123456789ab"


def broken_log(data_dir: pathlib.Path, workspace: pathlib.Path) -> pathlib.Path:
    """What the old writer left after a short write on a full disk: a torn record in the
    middle, the next record appended onto the same line."""
    path = data_dir / "sessions" / f"{SESSION}.jsonl"
    path.parent.mkdir(parents=True, mode=0o700)
    meta = msgspec.json.encode(SessionMeta(0, "", SESSION, str(workspace), "auto", 1.5))
    start = msgspec.json.encode(TurnStart(1, "t1"))
    path.write_bytes(meta + b"\n" + start + b'\n{"kind":"tool/result","seq":2,"tu'
                     + msgspec.json.encode(TurnStart(3, "t2")) + b"\n")
    return path


async def ops_json(marked: Marked, *args: str) -> object:
    command = [sys.executable, "-m", "runtime", "ops", *args, "--json", "--timeout", "15"]
    with trio.fail_after(30):
        done = await trio.run_process(command, env=marked.env(), capture_stdout=True,
                                      capture_stderr=True, check=False)
    assert done.returncode == 0, done.stderr.decode()
    return json.loads(done.stdout.decode().strip().splitlines()[-1])


async def ops_text(marked: Marked, *args: str) -> str:
    command = [sys.executable, "-m", "runtime", "ops", *args, "--timeout", "15"]
    with trio.fail_after(30):
        done = await trio.run_process(command, env=marked.env(), capture_stdout=True,
                                      capture_stderr=True, check=False)
    assert done.returncode == 0, done.stderr.decode()
    return done.stdout.decode()


async def test_an_unreadable_log_is_listed_with_its_reason(tmp_path: pathlib.Path,
                                                           marked: Marked) -> None:
    path = broken_log(marked.data_dir, tmp_path)
    async with agent_daemon(marked) as agent:
        await agent.new_session(tmp_path, [])  # a readable one beside it
        listed = await agent.daemon.request("session.list", Empty())
        by_id = {s.session_id: s for s in listed.sessions}
        assert set(by_id) == {SESSION, agent.session_id}
        broken = by_id[SESSION]
        assert not broken.loaded and broken.error is not None
        assert f"{path}:3: unreadable event" in broken.error  # the line to look at
        assert broken.workspace == str(tmp_path) and broken.created_at == 1.5
        assert by_id[agent.session_id].error is None
        with pytest.raises(RemoteError) as refused:
            await agent.daemon.request("session.load", SessionLoadParams(SESSION))
        assert refused.value.code == ErrorCode.INTERNAL
        assert refused.value.data == {"path": str(path)}

        listing = await ops_json(marked, "ls")
        assert isinstance(listing, list)
        (daemon,) = listing
        (entry,) = daemon["unreadableLogs"]
        assert entry["sessionId"] == SESSION and entry["path"] == str(path)
        assert ":3: unreadable event" in entry["error"]
        assert entry["workspace"] == str(tmp_path)
        human = await ops_text(marked, "ls")
        assert f"UNREADABLE  daemon {agent.daemon.process.pid}  {SESSION}" in human
        assert "docs/operations.md" in human

        # Repaired as docs/operations.md says (keep the whole records before the bad
        # line), it lists and loads again; its open turn is closed as interrupted.
        lines = path.read_bytes().split(b"\n")
        path.write_bytes(b"\n".join(lines[:2]) + b"\n")
        listed = await agent.daemon.request("session.list", Empty())
        repaired = {s.session_id: s for s in listed.sessions}[SESSION]
        assert repaired.error is None and repaired.interrupted
        loaded = await agent.daemon.request("session.load", SessionLoadParams(SESSION))
        assert loaded.recovered
        assert not (await ops_json(marked, "ls"))[0]["unreadableLogs"]  # type: ignore[index]


async def test_a_log_whose_first_line_is_unreadable_too(tmp_path: pathlib.Path,
                                                        marked: Marked) -> None:
    path = marked.data_dir / "sessions" / f"{SESSION}.jsonl"
    path.parent.mkdir(parents=True, mode=0o700)
    path.write_bytes(b"\x00\x00garbage\n")
    async with agent_daemon(marked) as agent:
        listed = await agent.daemon.request("session.list", Empty())
        (info,) = listed.sessions
        assert info.session_id == SESSION and info.error and info.workspace == ""
        assert info.permission_mode is None  # unknown, not a made-up "ask"
        assert info.created_at == pytest.approx(path.stat().st_mtime)
