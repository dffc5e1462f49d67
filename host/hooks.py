"""Hooks in the host: one hook command of the daemon's configuration, run like Bash.

A hook is a side effect, so it runs here, never in the runtime: a process tree in the
session's workspace, in its own session and (where the host has them) its own cgroup,
carrying the host's marker, its input (one JSON object) on stdin from a sealed memory
file (no writer task, no pipe to fill), its stdout and stderr bounded (head and tail:
``HOOK_ANSWER_BYTES`` and ``HOOK_OUTPUT_BYTES``). It ends at the first of: it exits, its
``timeout``, or ``hooks.abort`` (a stop of its call). Then its whole tree is killed (TERM, the kill
grace, KILL), as every tool tree is, and ``hooks.run`` answers how it ended.

The host runs the command the runtime names: the runtime is trusted (it started this
host), and it takes hooks from its own configuration file only, never a workspace's.
What the hook's answer means (allow, deny, ask, stop) is the runtime's business
(``runtime.agent.hooks``): here it is only a process.
"""

from __future__ import annotations

import logging
import os
import subprocess

import trio

from host.sessions import HostSessions
from host.tools.output import BoundedOutput, TextSink
from host.tools.process import run_tree
from protocol.errors import ErrorCode, RpcError
from protocol.hostconfig import HostConfig
from protocol.messages.host import (
    HooksAbortParams,
    HooksAbortResult,
    HooksRunParams,
    HooksRunResult,
)
from runtime.proc.cgroups import call_cgroup_name
from runtime.proc.proctree import ENV_MARKER

log = logging.getLogger(__name__)

HOOK_OUTPUT_BYTES = 64 * 1024
"""Bound of a hook's stderr as ``hooks.run`` answers it (head and tail)."""
HOOK_ANSWER_BYTES = 1024 * 1024
"""A hook's stdout is its JSON answer, read only whole: it may be long (a linter's report
as ``additionalContext``), so it gets more room than stderr; past it the answer is cut
and the hook fails closed."""


class HookRunner:
    """The hooks running in this host, by (session, hook id)."""

    def __init__(self, config: HostConfig, sessions: HostSessions) -> None:
        self._config = config
        self._sessions = sessions
        self._running: dict[tuple[str, str], trio.Event] = {}

    @property
    def running(self) -> int:
        return len(self._running)

    async def run(self, params: HooksRunParams, *,
                  task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                  ) -> HooksRunResult:
        """Run one hook; ``task_status`` is started once it is registered, so a
        ``hooks.abort`` read after it finds it."""
        key = (params.session_id, params.hook_id)
        session = self._sessions.get(params.session_id)
        if session is None:
            raise RpcError(ErrorCode.NOT_FOUND, f"unknown session {params.session_id!r}")
        if key in self._running:
            raise RpcError(ErrorCode.INVALID_PARAMS,
                           f"hook {params.hook_id!r} is already running")
        if not params.command:
            raise RpcError(ErrorCode.INVALID_PARAMS, "a hook needs a command")
        stop = self._running[key] = trio.Event()
        task_status.started()
        try:
            return await self._run(params, str(session.workspace.root), stop)
        finally:
            del self._running[key]

    def abort(self, params: HooksAbortParams) -> HooksAbortResult:
        """Never waits: the hook's ``hooks.run`` answers once its tree is gone."""
        stop = self._running.get((params.session_id, params.hook_id))
        if stop is not None:
            stop.set()
        return HooksAbortResult(found=stop is not None)

    def stop_all(self) -> None:
        """The host is leaving: every hook's tree is killed (its ``hooks.run`` answers)."""
        for stop in self._running.values():
            stop.set()

    async def _run(self, params: HooksRunParams, cwd: str, stop: trio.Event) -> HooksRunResult:
        marker = self._sessions.marker_value
        stdin = _sealed_input(params.input.encode("utf-8", "surrogatepass"))
        out = BoundedOutput(HOOK_ANSWER_BYTES, None)
        err = BoundedOutput(HOOK_OUTPUT_BYTES, None)
        session = self._sessions.get(params.session_id)
        sandbox = session.sandbox if session is not None else None
        confined = (sandbox is not None and not sandbox.off and params.sandbox
                    and self._config.sandbox.hooks)
        if not confined and sandbox is not None and not sandbox.off:
            log.info("hook %s runs outside the sandbox", params.hook_id)
        if confined and sandbox is not None:
            await sandbox.network_ready()
        try:
            tree = await run_tree(
                list(params.command), cwd=cwd, stop=stop, limit=params.timeout,
                grace=self._config.tools.kill_grace,
                marker=(ENV_MARKER, f"{marker}:{params.session_id}:{params.hook_id}"),
                env_extra=sandbox.env() if confined and sandbox else {},
                stdout=TextSink("stdout", out), stderr=TextSink("stderr", err),
                cgroup_name=call_cgroup_name(marker, params.session_id, params.hook_id),
                stdin=stdin, confine=sandbox.confine_tool if confined and sandbox else None)
        # Not found, not executable, or an argument holding a NUL (ValueError).
        except (OSError, subprocess.SubprocessError, ValueError) as exc:
            log.warning("hook %s could not start: %s", params.hook_id, exc)
            return HooksRunResult("failed", error=f"the hook could not start: {exc}")
        finally:
            os.close(stdin)
        outcome = tree.outcome
        if outcome == "stopped" and tree.exit_status is not None:
            # It exited with a status, not by the kill's signal: it answered as the stop
            # landed (or on the TERM, by trapping it), and its answer stands (a denial
            # beats the stop).
            outcome = "exited"
        if tree.outcome != "exited":
            log.info("hook %s %s after %.3f s (%d processes killed, %d after the grace)",
                     params.hook_id, tree.outcome, tree.duration, tree.kill.found,
                     tree.kill.killed)
        return HooksRunResult(outcome, tree.exit_status, tree.signal, out.text(),
                              err.text(), round(tree.duration * 1000), tree.kill.killed)


def _sealed_input(data: bytes) -> int:
    """A memory file holding ``data``, read from its start: the hook's stdin. A file, not
    a pipe, so an input of any size needs no writer and a hook that never reads it
    cannot block anyone."""
    fd = os.memfd_create("quiesce-hook-input", os.MFD_CLOEXEC)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.lseek(fd, 0, os.SEEK_SET)
    except BaseException:
        os.close(fd)
        raise
    return fd
