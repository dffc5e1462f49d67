"""The sandbox, end to end: escape attempts as real Bash calls of a scripted model against
the real daemon and host (root here), each expecting its refusal; real work inside
``workspace-write`` (git, a venv with pip, npm). The policy tests: test_sandbox_policy.py.

A probe prints ``ESCAPED`` when its attempt worked and ``refused`` (with the error) when it
did not: every probe must say ``refused``, except the pathname UNIX socket, which Landlock
only confines from ABI 9 (pinned as the documented degradation).
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import shutil
import sys

import pytest
import trio

from runtime.proc import cgroups
from tests.conftest import Marked
from tests.e2e.sandboxkit import (
    PY,
    as_root,
    config,
    landlock_abi,
    listeners,
    needs_landlock,
    output,
    py,
    quote,
    run_calls,
    sh,
)
from tests.kit.daemon import agent_daemon

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only")


@needs_landlock
@as_root
async def test_escape_attempts_from_a_sandboxed_bash_are_refused(
        tmp_path: pathlib.Path, marked: Marked) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    other = tmp_path / "other-session"  # another session's workspace
    other.mkdir()
    secret = other / "secret"
    secret.write_text("other session's file\n")
    (workspace / "mine").write_text("mine\n")
    home_probe = pathlib.Path.home() / ".quiesce-sandbox-probe"
    etc_probe = pathlib.Path("/etc/quiesce-sandbox-probe")
    cgroup_root = "/sys/fs/cgroup/unified" if os.path.isdir(
        "/sys/fs/cgroup/unified") else "/sys/fs/cgroup"
    args = config(tmp_path, '[sandbox]\nstrict_tmp = true\n')
    # Landlock's TCP rules, not the private network namespace (its own test, below).
    with listeners() as listen:
        async with agent_daemon(marked, extra_args=args,
                                env_extra={"QUIESCE_SANDBOX_NETNS": "off"}) as agent:
            assert agent.daemon.info is not None
            host = int(agent.daemon.info.capabilities["host"]["pid"])
            runtime = agent.daemon.process.pid
            victim = workspace / "victim.pid"
            own_cgroup = os.path.join(cgroups.own_cgroup_dir() or cgroup_root, "cgroup.procs")
            probes = {
                # First: another call's tree, alive while the last probe tries to signal it.
                "victim": f"sleep 30 & echo $! > {victim}; sleep 5; kill %1",
                "dotfile": sh(f"echo x >> {home_probe}"),
                "etc": sh(f"touch {etc_probe}"),
                "other-workspace": sh(f"echo x >> {secret}"),
                "rename-out": sh(f"mv mine {other}/mine"),
                "symlink-out": sh(f"ln -s {secret} link && echo x >> link"),
                "hardlink-in": sh(f"ln {secret} hard && echo x >> hard"),
                "mknod": sh("mknod null2 c 1 3"),
                "proc-root": sh(f"ls /proc/{host}/root/ >/dev/null"),
                "proc-cwd": sh(f"ls /proc/{host}/cwd/ >/dev/null"),
                "proc-environ": sh(f"cat /proc/{host}/environ >/dev/null"),
                "cgroup-root": sh(f"echo $$ > {cgroup_root}/cgroup.procs"),
                "cgroup-own": sh(f"echo $$ > {own_cgroup}"),
                "kill-host": sh(f"kill -CONT {host}"),
                "kill-runtime": sh(f"kill -CONT {runtime}"),
                "ptrace-host": sh(f"strace -qq -p {host} -e trace=none -o /dev/null "
                                   "& sleep 0.5; kill %1 2>/dev/null; wait %1"),
                "ptrace-runtime": py(
                    "import ctypes; libc = ctypes.CDLL(None, use_errno=True); "
                    f"r = libc.ptrace(16, {runtime}, 0, 0); "
                    "import os; e = ctypes.get_errno(); "
                    "(_ for _ in ()).throw(OSError(e, os.strerror(e))) if r else None"),
                "tcp-connect": py("import socket; socket.create_connection("
                                   f"('127.0.0.1', {listen['port']}), timeout=3)"),
                "tcp-bind": py("import socket; s = socket.socket(); "
                                "s.bind(('127.0.0.1', 0)); s.listen()"),
                "abstract-socket": py("import socket; s = socket.socket(socket.AF_UNIX); "
                                       f"s.connect('\\0{listen['abstract']}')"),
                "pathname-socket": py("import socket; s = socket.socket(socket.AF_UNIX); "
                                       f"s.connect({listen['path']!r})"),
                "mount": sh("mkdir -p m && mount -t tmpfs none m"),
                "unshare": sh("unshare -m true"),
                "chroot": sh("chroot / true"),
                "module": py("import ctypes, os; libc = ctypes.CDLL(None, use_errno=True); "
                              "r = libc.syscall(176, b'quiesce_no_such_module', 0); "
                              "e = ctypes.get_errno(); "
                              "(_ for _ in ()).throw(OSError(e, os.strerror(e))) "
                              # EPERM: refused (ENOSYS: a kernel without modules; ENOENT:
                              # it could have unloaded one)
                              "if e in (1, 38) else None"),
                "capabilities": "grep -E '^Cap(Prm|Eff|Bnd|Amb)' /proc/self/status",
                "hostname": py("import socket; socket.sethostname(socket.gethostname())"),
                "fds": f"{PY} -c " + quote(
                    "import os\nfor fd in range(3, 4096):\n    try: os.fstat(fd)\n"
                    "    except OSError: continue\n    print('inherited', fd)\n"
                    "print('fds checked')"),
                "kill-other-call": (
                    f"for i in $(seq 200); do [ -s {victim} ] && break; sleep 0.02; done; "
                    + sh(f"kill -CONT $(cat {victim})")),
            }
            try:
                results = await run_calls(agent, workspace, probes)
            finally:  # what an escape would have left (none is expected)
                for probe in (home_probe, etc_probe):
                    with contextlib.suppress(FileNotFoundError):
                        probe.unlink()
                if os.path.ismount(workspace / "m"):
                    await trio.run_process(["umount", str(workspace / "m")], check=False)
    out = {name: output(result) for name, result in results.items()}
    pinned = {"pathname-socket"}  # reachable below Landlock ABI 9 (docs/sandbox.md)
    for name in probes:
        if name in ("fds", "victim", "capabilities", *pinned):
            continue
        assert "refused" in out[name] and "ESCAPED" not in out[name], (name, out[name])
    if landlock_abi() < 9:
        assert "ESCAPED" in out["pathname-socket"], out["pathname-socket"]
    assert secret.read_text() == "other session's file\n"
    assert (workspace / "mine").exists() and not (workspace / "null2").exists()
    caps = out["capabilities"].split()
    assert len(caps) == 8 and set(caps[1::2]) == {"0000000000000000"}, out["capabilities"]
    assert "fds checked" in out["fds"] and "inherited" not in out["fds"], out["fds"]


@needs_landlock
async def test_real_work_succeeds_inside_workspace_write(
        tmp_path: pathlib.Path, marked: Marked) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    wheel = _tiny_wheel(tmp_path / "wheels")
    args = config(tmp_path, '[sandbox]\nstrict_tmp = true\n')
    git = ("git init -q . && git -c user.email=a@b -c user.name=a add -A && "
           "git -c user.email=a@b -c user.name=a commit -qm first && "
           "git log --oneline | wc -l && echo tmp=$TMPDIR")
    venv = (f"{PY} -m venv v && v/bin/pip install -q --no-index {wheel} && "
            "v/bin/python -c 'import quiesce_tiny; print(quiesce_tiny.VALUE)'")
    calls = {"git": git, "venv": venv}
    if shutil.which("npm") and shutil.which("node"):  # npm's cache in $TMPDIR, offline
        calls["npm"] = (
            "mkdir pkg && cd pkg && printf '{\"name\":\"quiesce-tiny\",\"version\":"
            "\"1.0.0\",\"main\":\"index.js\"}' > package.json && "
            "echo 'module.exports = 42' > index.js && npm pack --silent && cd .. && "
            "npm install --offline --no-audit --no-fund --silent "
            "./pkg/quiesce-tiny-1.0.0.tgz && node -e 'console.log(require(\"quiesce-tiny\"))' "
            "&& ls $npm_config_cache >/dev/null && echo npm-ok")
    async with agent_daemon(marked, extra_args=args) as agent:
        (workspace / "a.txt").write_text("a\n")
        results = await run_calls(agent, workspace, calls)
    git_out, venv_out = output(results["git"]), output(results["venv"])
    assert results["git"].code is None and git_out.splitlines()[0].strip() == "1", git_out
    tmp_line = next(line for line in git_out.splitlines() if line.startswith("tmp="))
    assert "quiesce-sandbox-" in tmp_line, git_out  # the session's own temporary directory
    assert results["venv"].code is None and "tiny-42" in venv_out, venv_out
    if "npm" in calls:
        npm_out = output(results["npm"])
        assert results["npm"].code is None and "42\nnpm-ok" in npm_out, npm_out


def _tiny_wheel(folder: pathlib.Path) -> pathlib.Path:
    """A pure-Python wheel built by hand (no network, no build backend)."""
    import base64
    import hashlib
    import zipfile
    folder.mkdir()
    path = folder / "quiesce_tiny-1.0-py3-none-any.whl"
    files = {
        "quiesce_tiny/__init__.py": "VALUE = 'tiny-42'\n",
        "quiesce_tiny-1.0.dist-info/METADATA":
            "Metadata-Version: 2.1\nName: quiesce-tiny\nVersion: 1.0\n",
        "quiesce_tiny-1.0.dist-info/WHEEL":
            "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    with zipfile.ZipFile(path, "w") as whl:
        for name, body in files.items():
            data = body.encode()
            whl.writestr(name, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
            record.append(f"{name},sha256={digest.decode()},{len(data)}")
        record.append("quiesce_tiny-1.0.dist-info/RECORD,,")
        whl.writestr("quiesce_tiny-1.0.dist-info/RECORD", "\n".join(record) + "\n")
    return path


