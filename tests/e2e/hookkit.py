"""Hooks for end-to-end tests: small shell scripts in the test's tmp_path, and a daemon
whose configuration file names them."""

from __future__ import annotations

import pathlib
import stat
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from protocol.messages.events import HookDecisionEvent
from tests.conftest import Marked
from tests.kit.daemon import Agent, Answer, agent_daemon, never
from tests.kit.waiters import wait_file
from tests.support import alive


def script(tmp_path: pathlib.Path, name: str, body: str) -> str:
    """An executable ``/bin/sh`` script ``name`` under ``tmp_path/hooks``; its path."""
    folder = tmp_path / "hooks"
    folder.mkdir(exist_ok=True)
    path = folder / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def hook_table(event: str, matcher: str, command: str, *, timeout: float | None = None) -> str:
    line = f'[[hooks.{event}]]\nmatcher = "{matcher}"\ncommand = ["{command}"]\n'
    return line + (f"timeout = {timeout}\n" if timeout is not None else "")


@asynccontextmanager
async def hooked(marked: Marked, tmp_path: pathlib.Path, toml: str, *,
                 answer: Answer = never, extra_args: tuple[str, ...] = ()
                 ) -> AsyncIterator[Agent]:
    """A daemon started with ``--config`` holding ``toml``; a workspace at ``tmp_path/ws``."""
    config = tmp_path / "config.toml"
    config.write_text(toml)
    (tmp_path / "ws").mkdir(exist_ok=True)
    async with agent_daemon(marked, answer=answer,
                            extra_args=("--config", str(config), *extra_args)) as agent:
        yield agent


def decisions(agent: Agent) -> list[HookDecisionEvent]:
    return [e for e in agent.log() if isinstance(e, HookDecisionEvent)]


async def wait_for_file(path: pathlib.Path, within: float = 10.0) -> str:
    """The text of ``path`` once a hook wrote it, stripped."""
    return await wait_file(path, within, strip=True)


def gone(pid: int) -> bool:
    return not alive(pid)


def pid_file_script(tmp_path: pathlib.Path, name: str, then: str) -> tuple[str, pathlib.Path]:
    """A hook that writes its pid to ``<name>.pid`` (atomically), then runs ``then``."""
    pid_file = tmp_path / f"{name}.pid"
    body = (f'echo $$ > "{pid_file}.tmp" && mv "{pid_file}.tmp" "{pid_file}"\n{then}\n')
    return script(tmp_path, name, body), pid_file
