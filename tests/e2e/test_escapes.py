"""Two one-line escapes from a Bash tree, against the real daemon and host, with cgroups
and with them forced off (``QUIESCE_CGROUPS=off``: the fallback):

- a forged marker: ``( ( env QUIESCE_HOST_CALL=<host pid>:x:y setsid sleep 300 & ) & )``
  (it names this host, but no call of it);
- a look-alike host: a ``setsid``'d ``python -m host`` without the marker, started from a
  directory holding a ``host.py`` with the host's exact command line;
- a process that leaves its call's cgroup: a root process may write itself into any
  ``cgroup.procs``; this one moves to the cgroup the host itself is made under, clears the
  marker and leaves its session. The sandbox refuses that write (tests/e2e/test_sandbox.py),
  so this case runs with ``[sandbox] mode = "off"``: what happens where it is off.

Neither survives the call's stop, its normal completion, the daemon's EOF, ``kill -9``
of the runtime, or ``kill -9`` of the host.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import signal
import sys

import pytest
import trio

from protocol.messages.events import ToolProgressEvent
from runtime.link import ConnectionClosed
from runtime.proc import cgroups
from tests.conftest import Marked
from tests.kit.daemon import Agent, agent_daemon, call, text
from tests.kit.waiters import wait_file
from tests.support import alive

FORGED = ("( ( env QUIESCE_HOST_CALL=${{QUIESCE_HOST_CALL%%:*}}:x:y setsid sleep 300 & "
          "echo $! > {pid_file} ) & )")
# The host's own command line, exactly (read from /proc), in a new session, no marker.
COPY_HOST = ("import os, sys; "
             "argv = open('/proc/' + sys.argv[1] + '/cmdline', 'rb').read().split(bytes(1))[:-1]; "
             "os.setsid(); os.execvp(argv[0], argv)")
LOOK_ALIKE = ('( ( cd {fake} && exec env -u QUIESCE_HOST_CALL {python} -c "{code}" '
              '${{QUIESCE_HOST_CALL%%:*}} ) & echo $! > {pid_file} )')
# Writes itself into the cgroup of the test (the daemon's, where the host's directory is).
LEFT_CGROUP = ("( env -u QUIESCE_HOST_CALL setsid sh -c 'echo $$ > {procs} && "
               "echo $$ > {pid_file} && exec sleep 300' & )")
ENDINGS = ["stop", "completion", "eof", "kill-runtime", "kill-host"]


def _escape(kind: str, tmp_path: pathlib.Path) -> tuple[str, pathlib.Path]:
    pid_file = tmp_path / "escapee.pid"
    if kind == "forged":
        return FORGED.format(pid_file=pid_file), pid_file
    if kind == "left-cgroup":
        procs = os.path.join(cgroups.own_cgroup_dir() or "/nonexistent", "cgroup.procs")
        return LEFT_CGROUP.format(procs=procs, pid_file=pid_file), pid_file
    fake = tmp_path / "fake"
    fake.mkdir()
    (fake / "host.py").write_text(f"open({str(fake / 'ran')!r}, 'w').close()\n"
                                  "import time\ntime.sleep(300)\n")
    return LOOK_ALIKE.format(fake=fake, python=sys.executable, code=COPY_HOST,
                             pid_file=pid_file), pid_file


async def _escapee(pid_file: pathlib.Path) -> int:
    return int(await wait_file(pid_file, 10, strip=True))


async def _gone_within(proc: int, seconds: float) -> bool:
    with trio.move_on_after(seconds):
        while alive(proc):
            await trio.sleep(0.02)
    return not alive(proc)


async def _prompt(agent: Agent) -> None:
    try:
        await agent.prompt("go")
    except ConnectionClosed:  # the runtime was killed under it
        pass


def _host_pid(agent: Agent) -> int:
    assert agent.daemon.info is not None
    return int(agent.daemon.info.capabilities["host"]["pid"])


@pytest.mark.parametrize("ending", ENDINGS)
@pytest.mark.parametrize("kind", ["forged", "look-alike", "left-cgroup"])
@pytest.mark.parametrize("mechanism", ["cgroup", "process-tree"])
async def test_an_escapee_does_not_survive(tmp_path: pathlib.Path, marked: Marked,
                                           mechanism: str, kind: str, ending: str) -> None:
    escape, pid_file = _escape(kind, tmp_path)
    # A completion waits until the escape is done (its pid written), or the call would end
    # before it, and kill it still in its tree.
    # It says whether the escapee was alive then (as the stop endings assert it is).
    tail = (f"while [ ! -s {pid_file} ]; do sleep 0.01; done; sleep 0.1; "
            f"kill -0 $(cat {pid_file}) && echo escapee-alive; echo done"
            if ending == "completion" else "echo up; sleep 60")
    script = [[call("b1", "Bash", command=f"{escape}; {tail}")], [text("after")]]
    env = {"QUIESCE_CGROUPS": "off"} if mechanism == "process-tree" else {}
    args: tuple[str, ...] = ()
    if kind == "left-cgroup":  # the sandbox would refuse the move
        config = tmp_path / "sandbox-off.toml"
        config.write_text('[sandbox]\nmode = "off"\n')
        args = ("--config", str(config))
    escapee: int | None = None
    try:
        async with agent_daemon(marked, env_extra=env, extra_args=args) as agent:
            await agent.new_session(tmp_path, script)
            host_pid = _host_pid(agent)
            uses_cgroups = os.path.isdir(cgroups.host_dir(host_pid) or "/nonexistent")
            assert uses_cgroups == (mechanism == "cgroup")
            if ending == "completion":
                with trio.fail_after(20):
                    await agent.prompt("go")
                escapee = await _escapee(pid_file)
                result = agent.results("t1")["b1"]
                assert "escapee-alive" in str(result.details.get("output")), result
                assert not alive(escapee), "the escapee outlived its call's result"
                return
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_prompt, agent)
                await agent.wait_for(lambda e: isinstance(e, ToolProgressEvent))
                escapee = await _escapee(pid_file)
                if kind == "look-alike":  # it runs the look-alike, not the host
                    with trio.fail_after(10):
                        while not (tmp_path / "fake" / "ran").exists():
                            await trio.sleep(0.02)
                assert alive(escapee)
                if kind == "left-cgroup":  # it is out of every cgroup of the host
                    assert cgroups.own_cgroup_dir(escapee) == cgroups.own_cgroup_dir()
                if ending == "stop":
                    await agent.stop_and_check()
                    assert not alive(escapee), "the escapee outlived the stop's answer"
                elif ending == "kill-host":
                    os.kill(host_pid, signal.SIGKILL)
                elif ending == "kill-runtime":
                    os.kill(agent.daemon.process.pid, signal.SIGKILL)
                    # The host reads EOF and stops every call.
                    assert await _gone_within(escapee, 10), "survived the runtime's death"
                    nursery.cancel_scope.cancel()
                else:  # eof: the client goes away mid-call
                    nursery.cancel_scope.cancel()
            if ending == "kill-host":
                # The crashed turn answered: the host's leftovers are gone by now.
                assert not alive(escapee), "survived its host's death"
        assert escapee is not None
        if ending == "eof":
            assert not alive(escapee), "the escapee outlived the daemon"
    finally:  # never left behind by a failure
        if escapee is not None and alive(escapee):
            os.kill(escapee, signal.SIGKILL)


@pytest.mark.parametrize("mechanism", ["cgroup", "process-tree"])
async def test_a_frozen_host_never_leaves_a_stopped_calls_processes_alive(
        tmp_path: pathlib.Path, marked: Marked, mechanism: str) -> None:
    # The host freezes (SIGSTOP) with a Bash tree running; the stop's grace window runs out
    # with no answer: the runtime ends the tree itself (its cgroup, or, without cgroups,
    # the host) before it answers.
    escape, pid_file = _escape("forged", tmp_path)
    command = f"{escape}; sleep 300 & setsid sleep 300 & echo up; sleep 300"
    script = [[call("b1", "Bash", command=command)], [text("after")]]
    env = {"QUIESCE_CGROUPS": "off"} if mechanism == "process-tree" else {}
    escapee: int | None = None
    host_pid = 0
    try:
        async with agent_daemon(marked, env_extra=env,
                                extra_args=("--process-grace", "0.5")) as agent:
            await agent.new_session(tmp_path, script)
            host_pid = _host_pid(agent)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_prompt, agent)
                await agent.wait_for(lambda e: isinstance(e, ToolProgressEvent))
                escapee = await _escapee(pid_file)
                os.kill(host_pid, signal.SIGSTOP)
                aborted = await agent.stop_and_check(within=10)  # nothing left at the answer
                with contextlib.suppress(ProcessLookupError):  # killed, without cgroups
                    os.kill(host_pid, signal.SIGCONT)
            result = agent.results(aborted.turn_id or "")["b1"]
            assert result.code == "ABORTED" and result.details["unconfirmed"] is True
            assert result.details["processesEnded"] == (
                "cgroup-killed" if mechanism == "cgroup" else "host-killed")
            assert not alive(escapee)
    finally:
        if host_pid and alive(host_pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(host_pid, signal.SIGCONT)
        if escapee is not None and alive(escapee):
            os.kill(escapee, signal.SIGKILL)
