"""Starting tool processes so they can be found and die with the host.

A tool process is started in a new session (its pid is its session and group id) with an
attribution marker in its environment, and, where the host has cgroups
(:mod:`runtime.proc.cgroups`), inside a fresh cgroup of its own, as a member before it
can fork: a tool process (stdin from /dev/null) through the gate (``start_gated``: vfork,
``setpriv --pdeathsig KILL``, a shell that waits on a pipe while the host moves it into its
cgroup), a plugin server by a ``preexec_fn`` that writes itself into ``cgroup.procs``
(``start_forked``). ``Child.finish`` then stops the tree by its cgroup and kills whatever left
it (``_kill_escapees``); without one, :mod:`runtime.proc.proctree` finds and kills its
tree.

``start_process`` starts every child from one spawner thread that lives as
long as the process, with a parent-death signal (KILL) armed before its
command runs: if the host dies, its direct children die with it. Linux sends
that signal when the *thread* that forked exits, so forking from trio's
short-lived worker threads would kill children early. Only direct children
get it; their descendants are left to the group and marker kill (the
runtime's sweep, after a host crash).
"""
from __future__ import annotations

import logging
import os
import queue
import subprocess
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import trio

from host import limits
from host.cgroupjoins import JOINS
from host.childenv import child_environment
from host.sandbox.confine import Confinement
from host.spawn_start import gate_tools, restore_priority, start_forked, start_gated
from runtime.proc import cgroups, escapes
from runtime.proc.orphans import (
    adopted_children,
    reap_members,
    started_pids,
)
from runtime.proc.proctree import KILL_TIMEOUT, KillReport, Marker, kill_tree

log = logging.getLogger(__name__)


class Child:
    """A spawned tree root: its output pipes, its exit, and the kill of its whole tree.

    The root is waited for *without* being reaped (a pidfd, or ``waitid`` with
    ``WNOWAIT``), so its pid, session and group id cannot be reused while its
    tree is being killed; ``finish`` kills the tree, then reaps the root.
    """

    def __init__(self, popen: subprocess.Popen[bytes], stdout: trio.lowlevel.FdStream,
                 stderr: trio.lowlevel.FdStream, marker: Marker | None,
                 cgroup: cgroups.Cgroup | None = None, *, sweep_escapes: bool = True,
                 niceness: int = 0) -> None:
        self.popen = popen
        self.pid = popen.pid
        self.stdout = stdout
        self.stderr = stderr
        self.marker = marker
        self.cgroup = cgroup
        """The tree's cgroup (``None``: the host has none; found by ``proctree``)."""
        self.sweep_escapes = sweep_escapes
        """Whether its stop looks for processes that left their cgroups (false only for a
        program of ours that never moves itself, ``rg``)."""
        self.lowered = niceness != 0
        """Whether it runs at a lowered priority its stop has not given back yet
        (``_unlower``)."""
        self.returncode: int | None = None
        self.kill_report: KillReport | None = None
        started_pids.add(self.pid)  # already, if the spawner started it
        self._pidfd: int | None = None
        try:
            self._pidfd = os.pidfd_open(self.pid)
        except (AttributeError, OSError):
            self._pidfd = None

    def term_now(self) -> None:
        """TERM the tree's members at once (a stop just arrived); ``finish`` goes on from
        there. Only with a cgroup: without one, finding the tree takes a process scan,
        which ``finish`` makes."""
        if self.cgroup is not None:
            self._unlower()
            self.cgroup.term()

    def _unlower(self) -> None:
        """Before the first TERM of a lowered tree still running: the host's priority back
        (``restore_priority``), so it dies as soon as one that was never lowered."""
        if self.lowered:
            self.lowered = False
            if not self.exited():
                restore_priority(self.pid)

    def exited(self) -> bool:
        """Whether the root has exited (it stays a zombie until ``finish``)."""
        if self.returncode is not None:
            return True
        try:
            info = os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return True
        return info is not None

    async def wait_exited(self) -> None:
        """Until the root exits; does not reap it."""
        while not self.exited():
            if self._pidfd is not None:
                await trio.lowlevel.wait_readable(self._pidfd)
            else:
                await trio.sleep(0.02)

    async def finish(self, grace: float) -> KillReport:
        """Kill whatever is left of the tree, reap the root, close the pidfd.

        Idempotent; shielded with its own deadline (see ``kill_tree``).
        """
        report = self.kill_report
        if report is None or self.returncode is None or not report.clean:
            self._unlower()
            if self.cgroup is not None:
                report = self.kill_report = await self._stop_cgroup(self.cgroup, grace)
            else:
                report = self.kill_report = await kill_tree(self.pid, grace=grace,
                                                            marker=self.marker)
        with trio.CancelScope(shield=True) as scope:
            scope.deadline = trio.current_time() + 2.0
            await self.wait_exited()
        if self.popen.poll() is not None:  # reaps the root, by its pid only
            self.returncode = self.popen.returncode
            started_pids.discard(self.pid)
        else:
            log.error("process %d did not exit after KILL", self.pid)
        self._close_pidfd()
        return report

    async def _stop_cgroup(self, cgroup: cgroups.Cgroup, grace: float) -> KillReport:
        """TERM, grace, ``cgroup.kill``, until ``populated 0``; members reaped, the cgroup
        removed once empty; then the processes that left their cgroups (``_ESCAPES``) are
        killed. Shielded, with its own deadline."""
        escaped: tuple[int, tuple[int, ...]] = (0, ())
        with trio.CancelScope(shield=True) as scope:
            scope.deadline = trio.current_time() + grace + 2 * KILL_TIMEOUT + 1.0
            stop = await cgroup.stop(grace, KILL_TIMEOUT)
            if not stop.survivors:
                # Removed on the thread that makes cgroups, and not waited for: an empty
                # cgroup holds nothing, and its rmdir (a thread's hop and the cgroup
                # lock, a millisecond or more) is no part of a stop. What is left when
                # the host exits goes with its own directory (``teardown_host``).
                _SPAWNER.submit(cgroup.remove)
            made = cgroups.host_cgroups()
            if self.sweep_escapes and made is not None:
                escaped = await _kill_escapees(made.path, self.pid, cgroup.path)
        reap_members(cgroup.seen - {self.pid})
        found, survivors = stop.found + escaped[0], stop.survivors + escaped[1]
        if stop.found:
            log.info("cgroup %s: %d processes, %d needed KILL, %.3f s", cgroup.path,
                     stop.found, stop.killed, stop.elapsed)
        return KillReport(found=found, terminated=stop.found - stop.killed,
                          killed=stop.killed + escaped[0], survivors=survivors,
                          elapsed=stop.elapsed)

    def _close_pidfd(self) -> None:
        if self._pidfd is not None:
            trio.lowlevel.notify_closing(self._pidfd)
            os.close(self._pidfd)
            self._pidfd = None

    async def aclose(self) -> None:
        """Close the pipes (after the tree is dead, or to give up on them)."""
        with trio.CancelScope(shield=True):
            await self.stdout.aclose()
            await self.stderr.aclose()


def _escapees(base: str, root: int) -> list[tuple[int, int]]:
    """Processes of a call whose cgroup is now empty that left it: a root process may write
    itself into any ``cgroup.procs`` (root passes every permission check). Such a process
    outlived every member of the call, so it is the call's root itself (a child of the
    spawner thread) or, with each of its ancestors in the call dead, an orphan the kernel
    reparented to us (a child of our main thread): only those are looked at, each outside
    the host's cgroups being killed with its subtree. One that moved into another live
    call's cgroup is found by ``_kill_escapees``."""
    started = set(started_pids)
    candidates = [pid for pid in adopted_children() if pid not in started]
    return escapes.escapees(base, [root, *candidates])


async def _kill_escapees(base: str, root: int, own: str) -> tuple[int, tuple[int, ...]]:
    """KILL ``_escapees``, and the processes of the call that joined another live call's
    cgroup (``own`` is its own; they are still this call's, by the session its root began:
    ``escapes.joined_elsewhere``), until none is left (one may fork while being killed):
    how many, and any still alive after ``KILL_TIMEOUT``."""
    killed = 0
    survivors: tuple[int, ...] = ()
    for _ in range(ESCAPE_ROUNDS):
        found = _escapees(base, root)
        listed = {pid for pid, _ in found}
        suspects = JOINS.suspects(own)  # cgroups someone wrote a process into
        if suspects is None or suspects:
            found += [(pid, parent) for pid, parent in
                      await escapes.joined_elsewhere(base, own, root, suspects)
                      if pid not in listed]
        if not found:
            break
        log.warning("killing %d processes that left their call's cgroup: %s", len(found),
                    [pid for pid, _ in found])
        signalled = escapes.kill_listed(found)
        killed += len(signalled)
        survivors = await escapes.wait_pidfds(signalled, KILL_TIMEOUT)
        reap_members([pid for pid, _ in signalled if pid != root])
    return killed, survivors


ESCAPE_ROUNDS = 8


class _Spawner:
    """The one thread every child is forked from: it lives as long as the process, so
    the parent-death signal fires only when the process dies (module docstring)."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[Callable[[], object]] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def submit(self, job: Callable[[], object]) -> None:
        """Run ``job`` on the spawner thread; ``job`` must not raise."""
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._serve, name="proctree-spawner",
                                                daemon=True)
                self._thread.start()
        self._jobs.put(job)

    def _serve(self) -> None:
        while True:
            self._jobs.get()()


_SPAWNER = _Spawner()


def new_cgroup(name: str | None) -> cgroups.Cgroup | None:
    """A fresh cgroup for a tree (``name``: a call's, ``cgroups.call_cgroup_name``), or
    ``None`` where the host has no cgroups."""
    made = cgroups.host_cgroups()
    if made is None:
        return None
    cgroup = made.new(name)
    limits.apply_to_cgroup(cgroup.path)  # before its first process
    return cgroup


Confine = Callable[[], Confinement | None]
"""Makes a child's confinement (``host.sandbox``) on the spawner thread, or ``None``."""


async def start_process(argv: list[str], *, cgroup: cgroups.Cgroup | None = None,
                        niceness: int = 0, confine: Confine | None = None,
                        **options: Any) -> subprocess.Popen[bytes]:
    """``subprocess.Popen(argv, **options)`` in a new session with ``close_fds``, forked by
    the spawner thread with a parent-death signal, inside ``cgroup`` if given, and
    registered as ours (never taken for an orphan); ``niceness`` lowers its CPU priority.
    With ``stdin=subprocess.DEVNULL`` (every tool process) it is started through the gate
    (``start_gated``: no fork of the host), else with a ``preexec_fn``.
    Shielded: the child it started must not be lost to a cancel."""
    popen, _ = await _start(argv, lambda: cgroup, False, niceness, options, confine)
    if cgroup is not None:
        JOINS.watch(cgroup.path)  # a foreign write into it from now on is seen
    return popen


async def _start(argv: list[str], cgroup_of: Callable[[], cgroups.Cgroup | None],
                 owned: bool, niceness: int, options: dict[str, Any],
                 confine: Confine | None = None
                 ) -> tuple[subprocess.Popen[bytes], cgroups.Cgroup | None]:
    """``start_process`` with the cgroup made by ``cgroup_of`` on the spawner thread (no
    file system work on the event loop); an ``owned`` one is removed if the start fails.
    A confined child (``confine`` gives a confinement) is forked: it confines itself
    between fork and exec."""
    token = trio.lowlevel.current_trio_token()
    done = trio.Event()
    outcome: list[tuple[subprocess.Popen[bytes], cgroups.Cgroup | None] | Exception] = []
    gated = options.get("stdin") == subprocess.DEVNULL and gate_tools() is not None

    def job() -> None:
        cgroup: cgroups.Cgroup | None = None
        confinement: Confinement | None = None
        try:
            confinement = confine() if confine is not None else None
            cgroup = cgroup_of()
            if confinement is not None:
                popen = start_forked(argv, cgroup, niceness, options, confinement)
            else:
                popen = (start_gated if gated else start_forked)(argv, cgroup, niceness, options)
            outcome.append((popen, cgroup))
        except Exception as exc:  # noqa: BLE001 -- raised again in the caller; it must not
            # end this thread (its children would get their parent-death signal)
            if owned and cgroup is not None:
                cgroup.remove()
            outcome.append(exc)
        finally:
            if confinement is not None:
                confinement.close()
        try:
            token.run_sync_soon(done.set)
        except trio.RunFinishedError:
            pass  # nobody waits; a child started dies with us (parent-death signal)

    _SPAWNER.submit(job)
    with trio.CancelScope(shield=True):
        await done.wait()
    (result,) = outcome
    if isinstance(result, Exception):
        raise result
    return result


async def spawn(argv: list[str], *, cwd: str | os.PathLike[str], marker: Marker | None,
                env_extra: dict[str, str] | None = None, cgroup_name: str | None = None,
                niceness: int = 0, stdin: int | None = None,
                sweep_escapes: bool = True, confine: Confine | None = None) -> Child:
    """Start ``argv`` in a new session (and cgroup, named ``cgroup_name`` if given) with
    piped stdout/stderr and stdin from /dev/null (or the descriptor ``stdin``, which the
    caller keeps and closes), confined as ``confine`` says (``host.sandbox``)."""
    env = child_environment(env_extra)  # the host's, without secrets (host/childenv.py)
    if marker is not None:
        env[marker[0]] = marker[1]
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    try:
        popen, cgroup = await _start(
            argv, lambda: new_cgroup(cgroup_name), True, niceness,
            {"cwd": cwd, "env": env,
             "stdin": subprocess.DEVNULL if stdin is None else stdin,  # own stdin: forked
             "stdout": out_w, "stderr": err_w}, confine)
    except BaseException:
        for fd in (out_r, err_r):
            os.close(fd)
        raise
    finally:
        os.close(out_w)
        os.close(err_w)
    if cgroup is not None:
        JOINS.watch(cgroup.path)  # a foreign write into it from now on is seen
    return Child(popen, trio.lowlevel.FdStream(out_r), trio.lowlevel.FdStream(err_r), marker,
                 cgroup, sweep_escapes=sweep_escapes, niceness=niceness)


@asynccontextmanager
async def spawned(argv: list[str], *, cwd: str | os.PathLike[str], marker: Marker | None,
                  grace: float, env_extra: dict[str, str] | None = None,
                  cgroup_name: str | None = None, niceness: int = 0,
                  stdin: int | None = None, sweep_escapes: bool = True,
                  confine: Confine | None = None) -> AsyncIterator[Child]:
    """``spawn``, with the tree killed and the root reaped however the block ends."""
    child = await spawn(argv, cwd=cwd, marker=marker, env_extra=env_extra,
                        cgroup_name=cgroup_name, niceness=niceness, stdin=stdin,
                        sweep_escapes=sweep_escapes, confine=confine)
    try:
        yield child
    finally:
        await child.finish(grace)
        await child.aclose()
