"""What a tool process can reach of the processes that run it (issue 31, "a runtime that a
tool cannot stop"), against the real daemon and host, with cgroups and without:

- it holds no descriptor but its stdin (``/dev/null``), stdout and stderr: none of the
  runtime's or the host's (their links, logs, the spawner's pipes);
- it cannot open the runtime's or the host's descriptors, memory or environment through
  ``/proc/<pid>/fd`` or ``mem`` (both are not dumpable, and a tool process, even root's,
  lacks ``CAP_SYS_PTRACE``): so it cannot read the runtime's stdin (the client's
  requests) or the host's (the runtime's).
"""

from __future__ import annotations

import os
import pathlib

import pytest

from tests.conftest import Marked
from tests.kit.daemon import agent_daemon, call, text

PROBE = (
    # The shell's own descriptors, listed by a child (a glob would open the directory).
    "ls /proc/$$/fd > fds.txt; echo fds: $(cat fds.txt); "
    "readlink /proc/$$/fd/0 > stdin.txt; echo stdin: $(cat stdin.txt); "
    "for pid in {runtime} {host}; do "
    "  if readlink /proc/$pid/fd/0 >/dev/null 2>&1; then echo read $pid fd/0; "
    "  else echo refused $pid fd/0; fi; "
    "  for what in environ mem; do "
    "    if ( exec 9< /proc/$pid/$what ) 2>/dev/null; then echo read $pid $what; "
    "    else echo refused $pid $what; fi; "
    "  done; "
    "done"
)


@pytest.mark.parametrize("mechanism", ["cgroup", "process-tree"])
async def test_a_tool_reaches_nothing_of_the_runtime_or_the_host(
        tmp_path: pathlib.Path, marked: Marked, mechanism: str) -> None:
    env = {"QUIESCE_CGROUPS": "off"} if mechanism == "process-tree" else {}
    async with agent_daemon(marked, env_extra=env) as agent:
        runtime, host = agent.daemon.process.pid, agent.host_pid
        command = PROBE.format(runtime=runtime, host=host)
        await agent.new_session(tmp_path, [[call("b1", "Bash", command=command)],
                                           [text("done")]])
        await agent.prompt("go")
        result = agent.results("t1")["b1"]
    output = str(result.details.get("output"))
    assert "fds: 0 1 2\n" in output, output
    assert "stdin: /dev/null" in output, output
    for pid in (runtime, host):
        # Its stdin (a pipe of the client's or the runtime's requests) and its memory.
        # (``environ`` and ``maps`` are refused by Linux's rule for a process that is not
        # dumpable; the kernel of the machines this was written on lets root read them:
        # not asserted.)
        for what in ("fd/0", "mem"):
            assert f"refused {pid} {what}" in output, output
    assert os.getpid() not in (runtime, host)
