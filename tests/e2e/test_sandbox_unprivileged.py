"""Escape attempts from a sandboxed Bash call when the daemon runs as an ordinary user
(``nobody`` here), end to end. Root's case is ``test_sandbox.py``; here what matters is
what the same user could otherwise do to its own processes and files: signal or trace the
host and the runtime, read their ``/proc`` entries, write the user's other directories,
reach the network (no private namespace without root: Landlock's TCP rules)."""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import tempfile

import pytest
import trio

from protocol.messages.client import SessionNewParams, SessionNewResult
from runtime.clients.daemon_client import spawn_daemon
from tests.conftest import Marked
from tests.e2e.sandboxkit import listeners, needs_landlock, output, quote, sh
from tests.e2e.test_trust_attacks import NOBODY, python_for_nobody
from tests.kit.daemon import Agent, call, text
from tests.support import marked_env

pytestmark = [needs_landlock,
              pytest.mark.skipif(os.geteuid() != 0, reason="needs root to become nobody")]


def py(python: str, code: str) -> str:
    """A probe in ``python``: ``ESCAPED`` if ``code`` ran, else ``refused: <error>``."""
    wrapped = f"try:\n    {code}\n    print('ESCAPED')\nexcept OSError as e:\n" \
              f"    print('refused:', e)"
    return f"{python} -c {quote(wrapped)}"


async def test_escape_attempts_as_an_unprivileged_user_are_refused(marked: Marked) -> None:
    # Not under /tmp, which the default sandbox leaves writable (``strict_tmp``): the
    # user's home and other workspaces are elsewhere.
    if not os.path.isdir("/var/tmp"):
        pytest.skip("no /var/tmp for a directory outside /tmp")
    base = pathlib.Path(tempfile.mkdtemp(prefix="qnobody-sbx-", dir="/var/tmp"))
    try:
        for sub in ("data", "run", "ws", "home", "other-session"):
            (base / sub).mkdir()
        workspace, other = base / "ws", base / "other-session"
        secret = other / "secret"
        secret.write_text("other session's file\n")
        (workspace / "mine").write_text("mine\n")
        dotfile = base / "home" / ".bashrc"
        dotfile.write_text("# the user's\n")
        python, pythonpath = python_for_nobody()
        with listeners() as listen:
            # The runtime is the host's parent; the host is the call's (its shell's) parent.
            host, runtime = "$PPID", "$(awk '{print $4}' /proc/$PPID/stat)"
            victim = workspace / "victim.pid"
            probes = {
                "victim": f"sleep 30 & echo $! > {victim}; sleep 5; kill %1",
                "dotfile": sh(f"echo x >> {dotfile}"),
                "other-workspace": sh(f"echo x >> {secret}"),
                "rename-out": sh(f"mv mine {other}/mine"),
                "symlink-out": sh(f"ln -s {secret} link && echo x >> link"),
                "hardlink-in": sh(f"ln {secret} hard && echo x >> hard"),
                "proc-environ-host": sh(f"cat /proc/{host}/environ >/dev/null"),
                "proc-environ-runtime": sh(f"cat /proc/{runtime}/environ >/dev/null"),
                "proc-cwd-host": sh(f"ls /proc/{host}/cwd/ >/dev/null"),
                "kill-host": sh(f"kill -CONT {host}"),
                "kill-runtime": sh(f"kill -CONT {runtime}"),
                "ptrace-runtime": f"R={runtime} " + py(python, (
                    "import ctypes, os; libc = ctypes.CDLL(None, use_errno=True); "
                    "r = libc.ptrace(16, int(os.environ['R']), 0, 0); "
                    "e = ctypes.get_errno(); "
                    "(_ for _ in ()).throw(OSError(e, os.strerror(e))) if r else None")),
                "tcp-connect": py(python, "import socket; socket.create_connection("
                                          f"('127.0.0.1', {listen['port']}), timeout=3)"),
                "tcp-bind": py(python, "import socket; s = socket.socket(); "
                                       "s.bind(('127.0.0.1', 0)); s.listen()"),
                "abstract-socket": py(python, "import socket; "
                                              "s = socket.socket(socket.AF_UNIX); "
                                              f"s.connect('\\0{listen['abstract']}')"),
                "kill-other-call": (
                    f"for i in $(seq 200); do [ -s {victim} ] && break; sleep 0.02; done; "
                    + sh(f"kill -CONT $(cat {victim})")),
                "whoami": "id -u",
            }
            script = base / "script.json"
            script.write_text(json.dumps(
                [[call(name, "Bash", command=command) for name, command in probes.items()],
                 [text("done")]]))
            for path in (base, *base.rglob("*")):
                os.chown(path, NOBODY, NOBODY)
            env = marked_env(marked.mark, QUIESCE_DATA_DIR=str(base / "data"),
                             XDG_RUNTIME_DIR=str(base / "run"), HOME=str(base / "home"),
                             XDG_CONFIG_HOME=str(base / "home"), PYTHONPATH=pythonpath)
            command = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups",
                       python, "-m", "runtime", "serve", "--provider", f"scripted:{script}"]
            async with spawn_daemon(command, env=env) as daemon:
                await daemon.initialize()
                agent = Agent(daemon, base / "data", marked.mark)
                with trio.fail_after(60):
                    opened: SessionNewResult = await daemon.request(
                        "session.new", SessionNewParams(str(workspace), "auto"))
                    agent.session_id = opened.session_id
                    answer = await agent.prompt("go")
                results = agent.results(answer.turn_id or "")
        out = {name: output(result) for name, result in results.items()}
        assert out["whoami"].split()[0] == str(NOBODY), out["whoami"]
        for name in probes:
            if name in ("victim", "whoami"):
                continue
            assert "refused" in out[name] and "ESCAPED" not in out[name], (name, out[name])
        assert secret.read_text() == "other session's file\n"
        assert dotfile.read_text() == "# the user's\n"
        assert (workspace / "mine").exists()
    finally:
        shutil.rmtree(base, ignore_errors=True)
