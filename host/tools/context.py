"""What a tool body is given, what describes a tool, and the one mapping of input errors.

A tool is ``async def run(args, ctx) -> ToolResult``. Expected failures (bad
input, a missing file, a path outside the workspace, a non-unique edit) are
raised as ``ToolInputError`` and turned into an error result by ``ToolSpec``;
anything else propagates to the call manager, which maps it to ``TOOL_FAILED``.
"""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import trio

from host.sandbox import SessionSandbox
from host.tools.readers import READERS
from host.workspace import ToolInputError, Workspace
from protocol.hostconfig import HostToolConfig
from protocol.toolclass import ToolClass
from protocol.tools import ToolResult, error_result

__all__ = [
    "HostToolConfig",
    "ToolContext",
    "ToolInputError",
    "ToolSpec",
    "confined",
    "run_abandonable",
]

T = TypeVar("T")


@dataclass
class ToolContext:
    workspace: Workspace
    config: HostToolConfig
    stop: trio.Event
    """Set by the call manager when ``tools.abort`` arrives for this call."""
    emit_output: Callable[[str, str], None]
    """``(stream, text)``: non-blocking, ordered progress output of the call."""
    env_marker: dict[str, str] = field(default_factory=dict)
    """Environment variables set on every spawned process (attribution marker)."""
    on_stop: Callable[[Callable[[], None]], None] = lambda hook: None
    """Register a hook the call's first stop runs as it arrives, before any task wakes
    (``Call.stop_hooks``): a process tool TERMs its tree there. It must not raise."""
    cgroup_name_of: Callable[[], str | None] = lambda: None
    """The name of the call's cgroup (``runtime.proc.cgroups.call_cgroup_name``), where there are
    cgroups: the runtime can find it by the same name. Computed when a tool asks for it (a
    digest: most calls spawn nothing)."""

    sandbox: SessionSandbox | None = None
    """The session's sandbox (``host.sandbox``): what the processes a tool starts run in."""

    @property
    def cgroup_name(self) -> str | None:
        return self.cgroup_name_of()

    @property
    def marker(self) -> tuple[str, str] | None:
        """The first marker variable, the one process trees are attributed by."""
        for key, value in self.env_marker.items():
            return (key, value)
        return None


async def confined(ctx: ToolContext) -> tuple[Callable[[], Any] | None, dict[str, str]]:
    """How a process tool's tree is confined (``spawn``'s ``confine``) and what its
    environment gains (the session's temporary directory and caches, its proxy once it
    listens): nothing in mode
    ``off``."""
    sandbox = ctx.sandbox
    if sandbox is None or sandbox.off:
        return None, {}
    await sandbox.network_ready()
    return sandbox.confine_tool, sandbox.env()


ToolBody = Callable[[Any, ToolContext], Awaitable[ToolResult]]
InlineBody = Callable[[Any, ToolContext], "ToolResult | None"]


@dataclass(frozen=True)
class ToolSpec:
    """A tool: its name, argument type, stop class and body.

    ``run`` is the body with ``ToolInputError`` mapped to an error result.
    """

    name: str
    args_type: type[Any]
    tool_class: ToolClass
    body: ToolBody
    search: bool = False
    """A search (a ripgrep process over a tree): admitted under the session's search bound
    too (``AdmissionLimits.per_session_searches``)."""
    inline: InlineBody | None = None
    """The body's answer at once, on the event loop, for the inputs it can answer without
    blocking (a small local file for Read), else ``None``; the host then answers the call
    without a task of its own (``Executor.execute_now``)."""

    async def run(self, args: Any, ctx: ToolContext) -> ToolResult:
        try:
            return await self.body(args, ctx)
        except ToolInputError as exc:
            return error_result(exc.code, exc.message, body_invoked=True)

    def run_inline(self, args: Any, ctx: ToolContext) -> ToolResult | None:
        assert self.inline is not None
        try:
            return self.inline(args, ctx)
        except ToolInputError as exc:
            return error_result(exc.code, exc.message, body_invoked=True)


async def run_abandonable(work: Callable[[threading.Event], T]) -> T:
    """Run blocking read-only ``work`` on a reader thread (``host.tools.readers``) that a
    cancel abandons at once.

    The worker is handed an event that is set when the caller stops waiting
    (cancelled or done), so it can stop early instead of finishing a long scan
    nobody will read; it must not mutate anything.
    """
    return await READERS.run(work)
