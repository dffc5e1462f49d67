"""Running one process tree for a process-class tool, and what a stop does to it.

``run_tree`` spawns ``argv`` in a new session, feeds its stdout and stderr to
sinks as they arrive, and waits for the first of: the root exits, ``stop`` is
set, ``limit`` seconds pass (the tool's timeout). Then the whole tree is
killed (on a normal exit, the leftovers: background jobs never outlive the
call), the root is reaped, and
the pipes are drained for what was written before termination. The kill is
owned by ``proctree`` in a shielded block with its own deadline, so a
cancelled caller still leaves no process behind.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, Protocol

import trio

from host import limits, spawn
from runtime.proc.proctree import KillReport

DRAIN_TIMEOUT = 1.0
"""How long to wait for EOF on the pipes once the tree is dead."""

Outcome = Literal["exited", "stopped", "timeout"]


class Sink(Protocol):
    def feed(self, data: bytes) -> None: ...
    def end(self) -> None: ...


@dataclass(frozen=True)
class TreeResult:
    outcome: Outcome
    returncode: int | None
    kill: KillReport
    duration: float
    drained: bool
    """Both pipes reached EOF (false: something we could not kill holds them)."""
    limit_hit: str | None = None
    """The per-call limit its cgroup ran into, in words (``host.limits.hit``)."""

    @property
    def exit_status(self) -> int | None:
        return self.returncode if self.returncode is not None and self.returncode >= 0 else None

    @property
    def signal(self) -> str | None:
        if self.returncode is None or self.returncode >= 0:
            return None
        try:
            return signal.Signals(-self.returncode).name
        except ValueError:
            return f"signal {-self.returncode}"

    def details(self) -> dict[str, object]:
        return {
            "exitStatus": self.exit_status,
            "signal": self.signal,
            "durationMs": round(self.duration * 1000),
            "processesKilled": self.kill.found,
            "killedAfterGrace": self.kill.killed,
            "killMs": round(self.kill.elapsed * 1000),
            "survivors": list(self.kill.survivors),
            **({"limitHit": self.limit_hit} if self.limit_hit else {}),
        }


async def _pump(stream: trio.lowlevel.FdStream, sink: Sink) -> None:
    while chunk := await stream.receive_some(65536):
        sink.feed(chunk)
    sink.end()


async def _first_event(child: spawn.Child, stop: trio.Event, limit: float) -> Outcome:
    outcome: Outcome = "timeout"

    async def exited(scope: trio.CancelScope) -> None:
        nonlocal outcome
        await child.wait_exited()
        # A root that exits once the stop is set may have died of it: the stop's TERM goes
        # out as the abort arrives (``on_stop``), and both waiters can wake in one
        # scheduler pass, in either order. Stopped, then, not exited.
        outcome = "stopped" if stop.is_set() else "exited"
        scope.cancel()

    async def stopped(scope: trio.CancelScope) -> None:
        nonlocal outcome
        await stop.wait()
        outcome = "stopped"
        scope.cancel()

    with trio.move_on_after(limit):
        async with trio.open_nursery() as race:
            race.start_soon(exited, race.cancel_scope)
            race.start_soon(stopped, race.cancel_scope)
    return outcome


async def run_tree(argv: list[str], *, cwd: str | os.PathLike[str], stop: trio.Event,
                   limit: float, grace: float, marker: tuple[str, str] | None,
                   env_extra: dict[str, str], stdout: Sink, stderr: Sink,
                   cgroup_name: str | None = None, stdin: int | None = None,
                   on_stop: Callable[[Callable[[], None]], None] = lambda hook: None,
                   confine: spawn.Confine | None = None) -> TreeResult:
    """``on_stop`` registers the tree's TERM to run as the stop arrives
    (``ToolContext.on_stop``)."""
    started = trio.current_time()
    async with spawn.spawned(limits.wrap(argv, cwd), cwd=cwd, marker=marker, grace=grace,
                             env_extra=env_extra, cgroup_name=cgroup_name,
                             stdin=stdin, confine=confine) as child:
        on_stop(child.term_now)
        pumps_done = trio.Event()

        async def pump_both() -> None:
            async with trio.open_nursery() as pumps:
                pumps.start_soon(_pump, child.stdout, stdout)
                pumps.start_soon(_pump, child.stderr, stderr)
            pumps_done.set()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(pump_both)
            outcome = await _first_event(child, stop, limit)
            hit = limits.hit(child.cgroup.path if child.cgroup is not None else None)
            report = await child.finish(grace)
            with trio.move_on_after(DRAIN_TIMEOUT):
                await pumps_done.wait()
            nursery.cancel_scope.cancel()
    return TreeResult(outcome, child.returncode, report, trio.current_time() - started,
                      pumps_done.is_set(), hit)
