"""Fixtures for the host tool tests: a workspace, a tool context, and a leak check.

Every test gets its own environment marker; after the test, any live process
carrying it, and any new child of the test process (live or zombie), fails
the test (and is killed, so one leak does not cascade).
"""

from __future__ import annotations

import os
import signal
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import psutil  # type: ignore[import-untyped, unused-ignore]
import pytest
import trio

from host.tools.context import HostToolConfig, ToolContext
from host.workspace import Workspace
from runtime.proc.orphans import become_subreaper
from runtime.proc.proctree import find_marked

MARKER_KEY = "QUIESCE_TEST_MARKER"
TEST_GRACE = 0.3


@pytest.fixture(scope="session", autouse=True)
def _subreaper() -> None:
    # As in the host process: orphans of a killed tree are adopted and reaped by us.
    become_subreaper()


@pytest.fixture
def marker() -> tuple[str, str]:
    return (MARKER_KEY, uuid.uuid4().hex)


def _children() -> dict[int, psutil.Process]:
    return {p.pid: p for p in psutil.Process().children(recursive=True)}


@pytest.fixture(autouse=True)
def no_process_left(marker: tuple[str, str]) -> Iterator[None]:
    before = set(_children())
    yield
    leaked = {p.pid: p for p in find_marked(*marker)}
    for pid, proc in _children().items():
        if pid not in before:
            leaked[pid] = proc
    if not leaked:
        return
    described = []
    for proc in leaked.values():
        try:
            described.append(f"{proc.pid} {proc.status()} {proc.cmdline()}")
            proc.send_signal(signal.SIGKILL)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    for proc in leaked.values():
        try:
            if proc.ppid() == os.getpid():
                os.waitpid(proc.pid, 0)
        except (psutil.NoSuchProcess, ChildProcessError):
            continue
    pytest.fail(f"processes left behind: {described}")


@dataclass
class Harness:
    """A workspace, a config and a recorder of streamed output; makes contexts."""

    root: Path
    marker: tuple[str, str]
    config: HostToolConfig
    outputs: list[tuple[str, str]] = field(default_factory=list)
    stop: trio.Event = field(default_factory=trio.Event)

    @property
    def workspace(self) -> Workspace:
        return Workspace(self.root)

    def ctx(self, **config: Any) -> ToolContext:
        return ToolContext(
            workspace=self.workspace,
            config=replace(self.config, **config),
            stop=self.stop,
            emit_output=lambda stream, text: self.outputs.append((stream, text)),
            env_marker={self.marker[0]: self.marker[1]},
        )

    def streamed(self, stream: str | None = None) -> str:
        return "".join(t for s, t in self.outputs if stream is None or s == stream)


@pytest.fixture
def harness(tmp_path: Path, marker: tuple[str, str]) -> Harness:
    root = tmp_path / "ws"
    root.mkdir()
    return Harness(root, marker, HostToolConfig(kill_grace=TEST_GRACE))
