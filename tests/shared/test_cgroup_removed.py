"""A call's cgroup removed by its host while the runtime kills or waits on it.

The runtime kills a stuck process call's cgroup itself (``kill_call_cgroup``) while
the host, seeing it empty, removes it. A removed cgroup's open files answer ENODEV;
removal needs an empty cgroup, so that is "empty", never a failure of the call.
"""

from __future__ import annotations

import errno
import os
import subprocess

import pytest

from runtime.proc import cgroups, escapes


def test_populated_and_kill_of_a_removed_cgroup(scratch_cgroup: cgroups.HostCgroups,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    cgroup = scratch_cgroup.new("call-gone")
    events = os.open(os.path.join(cgroup.path, "cgroup.events"), os.O_RDONLY)
    kill = os.open(os.path.join(cgroup.path, "cgroup.kill"), os.O_WRONLY)
    try:
        assert cgroup.remove()
        assert cgroups._populated(events) is False  # ENODEV: removed, so empty
        cgroup.kill()  # removed before the open (ENOENT): nothing to kill, no error
        with pytest.raises(OSError) as raised:
            os.write(kill, b"1")  # opened before the removal: the write answers ENODEV
        assert raised.value.errno == errno.ENODEV
        # kill() must absorb that too: its write through the descriptor opened before.
        monkeypatch.setattr(cgroups, "_write", lambda path, data: os.write(kill, data))
        cgroup.kill()
    finally:
        os.close(events)
        os.close(kill)


def test_a_process_in_the_hosts_own_directory_is_an_escapee(
        scratch_cgroup: cgroups.HostCgroups) -> None:
    # Only a call's cgroup below the host's directory holds a process legitimately; one
    # that wrote itself into the directory itself left its call's cgroup all the same.
    proc = subprocess.Popen(["sleep", "30"])
    try:
        with open(os.path.join(scratch_cgroup.path, "cgroup.procs"), "w") as f:
            f.write(str(proc.pid))
        assert (proc.pid, os.getpid()) in escapes.escapees(scratch_cgroup.path, [proc.pid])
        call = scratch_cgroup.new("call-legit")
        with open(os.path.join(call.path, "cgroup.procs"), "w") as f:
            f.write(str(proc.pid))
        assert escapes.escapees(scratch_cgroup.path, [proc.pid]) == []
    finally:
        proc.kill()
        proc.wait()
