"""What a hostile workspace or a model's Bash call tries against workspace trust and the
environment policy (issue 26), each against the real daemon: the declaring file as a
symlink to the host's own stdin or a FIFO, nested past the decoder, with duplicate keys,
swapped while the user decides or after trust (a replacement host reads it again), a
declared ``env`` that changes what runs; the image backend importing the workspace's
modules; the keys read from ``/proc/<host or runtime pid>/environ``; a trust store others
can write or that cannot be written; trust keyed by the real path."""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile

import pytest
import trio

from protocol.errors import RemoteError
from protocol.messages.client import (
    SessionNewParams,
    SessionNewResult,
    WorkspaceTrustParams,
    WorkspaceTrustResult,
)
from runtime.clients.daemon_client import spawn_daemon
from tests.conftest import Marked
from tests.e2e.test_child_env import SECRETS, names
from tests.e2e.test_workspace_trust import answers, hostile, new_session, settle, trust_daemon
from tests.kit.daemon import Agent, agent_daemon, call, text
from tests.plugins.support import SERVER
from tests.support import marked_env

NOBODY = 65534


def python_for_nobody() -> tuple[str, str]:
    """A Python of our version that ``nobody`` may run (ours may lie under a private
    home), and the import path of our packages for it; the test is skipped without."""
    import runtime

    if shutil.which("setpriv") is None:
        pytest.skip("no setpriv to run the daemon as nobody")
    for candidate in (sys.executable, f"/usr/bin/python{sys.version_info[0]}."
                                      f"{sys.version_info[1]}"):
        pythonpath = os.pathsep.join([sysconfig.get_paths()["purelib"],
                                      str(pathlib.Path(runtime.__file__).parent.parent)])
        probe = subprocess.run(
            ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups",
             candidate, "-c", "import subprocess, sys, trio, msgspec; "
             "subprocess.run([sys.executable, '-c', ''], check=True)"],
            env={"PYTHONPATH": pythonpath, "PATH": os.environ.get("PATH", "")},
            capture_output=True, cwd="/", check=False, timeout=60)
        if probe.returncode == 0:
            return candidate, pythonpath
    pytest.skip("no Python of this version that nobody can run")


async def test_declaring_file_linked_to_the_hosts_stdin_neither_hangs_nor_steals(
        tmp_path: pathlib.Path, marked: Marked) -> None:
    """A cloned repository may hold symlinks: ``.quiesce/mcp.json`` pointing at the host's
    own stdin (its link to the runtime) or at a FIFO must not be read as a file (a
    blocking read would stop the host and eat the runtime's requests)."""
    (tmp_path / ".quiesce").mkdir()
    (tmp_path / ".quiesce" / "mcp.json").symlink_to("/proc/self/fd/0")
    fifo_ws = tmp_path / "fifo"
    (fifo_ws / ".quiesce").mkdir(parents=True)
    os.mkfifo(fifo_ws / ".quiesce" / "mcp.json")
    async with trust_daemon(marked, answers()) as (daemon, asked):
        for workspace in (tmp_path, fifo_ws):
            with trio.fail_after(8):  # a hung host would be killed after 10 s
                try:
                    await new_session(daemon, workspace)
                except RemoteError as exc:
                    assert "mcp.json: not a regular file" in exc.message, exc
                else:
                    raise AssertionError("a declaring file that is no file was accepted")
        assert not asked
        # The host still serves, and is the first one (not replaced as hung).
        with trio.fail_after(8):
            opened = await new_session(daemon, tmp_path / "fifo" / ".quiesce")
        assert not opened.plugin_servers
        assert daemon.info is not None
        host_pid = int(daemon.info.capabilities["host"]["pid"])
        os.kill(host_pid, 0)


async def test_bash_cannot_read_provider_keys_from_the_hosts_environ(
        tmp_path: pathlib.Path, marked: Marked) -> None:
    """The host is the parent of every tool process: its own environment (readable as
    /proc/<host pid>/environ by the same user) must hold no secret either, the first
    host's (started before the runtime's imports) nor a replacement's."""
    read_parent = "echo QUIESCE_HOST_PID=$PPID; tr '\\0' '\\n' < /proc/$PPID/environ"
    script = [[call("b1", "Bash", command=read_parent)], [text("done")],
              [call("b2", "Bash", command=read_parent)], [text("done")]]
    secret_looking = set(SECRETS) - {"MY_LLM_ACCESS", "SESSION_LLM_ACCESS",
                                     "EXCLUDED_BY_CONFIG"}
    async with agent_daemon(marked, env_extra={**SECRETS, "PLAIN_VARIABLE": "plain"}) as agent:
        with trio.fail_after(30):
            await agent.new_session(tmp_path, script)
        for call_id in ("b1", "b2"):
            with trio.fail_after(30):
                answer = await agent.prompt("go")
            result = agent.results(answer.turn_id or "")[call_id]
            assert result.code is None, result
            output = result.content[0].text  # type: ignore[union-attr]
            if "Permission denied" in output:
                # The sandbox (or the host's hardening) keeps the host's environ from the
                # call altogether: nothing to leak. The filtered environment below is the
                # line behind it, where the kernel offers neither.
                assert not set(names(output)) - {"QUIESCE_HOST_PID"}, output
            else:
                host_env = names(output)
                assert host_env.get("PLAIN_VARIABLE") == "plain", "not the host's environment"
                leaked = sorted(secret_looking & set(host_env))
                assert not leaked, f"the host's environment holds {leaked} ({call_id})"
            # The host's own environment, as root reads it: the line that holds where
            # the kernel keeps a call from reading it and where it does not.
            host_pid = names(output)["QUIESCE_HOST_PID"]
            with open(f"/proc/{host_pid}/environ", "rb") as environ:
                own = names(environ.read().decode(errors="replace").replace("\0", "\n"))
            assert own.get("PLAIN_VARIABLE") == "plain", "not the host's environment"
            held = sorted(secret_looking & set(own))
            assert not held, f"the host's environment holds {held} ({call_id})"
            if call_id == "b1":  # the next turn gets a replacement host
                os.kill(agent.host_pid, signal.SIGKILL)
                # Until the runtime has seen it die (it reaps it), a prompt's call may still
                # go to it and end HOST_CRASHED: that is not what this test is about.
                with trio.fail_after(10):
                    while os.path.exists(f"/proc/{agent.host_pid}"):
                        await trio.sleep(0.02)


async def test_image_backend_does_not_import_the_workspaces_modules(
        tmp_path: pathlib.Path, marked: Marked) -> None:
    """GenerateImages runs the shipped renderer with the workspace as its directory: a
    repository's ``argparse.py`` (or ``host/``) must not be imported by it."""
    evidence = tmp_path / "ran"
    workspace = tmp_path / "ws"
    workspace.mkdir()
    for module in ("argparse.py", "hashlib.py", "textwrap.py", "random.py"):
        (workspace / module).write_text(f"open({str(evidence)!r}, 'a').write('{module}\\n')\n")
    script = [[call("i", "GenerateImages", prompt="a red square", count=1)], [text("done")]]
    async with agent_daemon(marked) as agent:
        with trio.fail_after(60):
            await agent.new_session(workspace, script)
            answer = await agent.prompt("draw")
        result = agent.results(answer.turn_id or "")["i"]
        assert result.code is None, result  # it drew
    assert not evidence.exists(), f"the workspace's code ran: {evidence.read_text()}"


async def test_a_trust_store_others_can_write_is_not_believed(
        tmp_path: pathlib.Path, marked: Marked) -> None:
    """Trust is the user's: a ``trust.json`` that another user could have written (world-
    or group-writable) trusts nothing; the user is asked."""
    evidence = tmp_path / "FILE"
    hostile(tmp_path, evidence)
    async with trust_daemon(marked, answers("trust")) as (daemon, asked):
        opened = await new_session(daemon, tmp_path)
        assert opened.plugin_servers[0].state == "failed"  # trusted, ran
    store = marked.data_dir / "trust.json"
    assert json.loads(store.read_text())
    evidence.unlink()
    store.chmod(0o666)
    async with trust_daemon(marked, answers("not-now")) as (daemon, asked):
        opened = await new_session(daemon, tmp_path)
        await settle()
        assert len(asked) == 1, "a world-writable store was believed"
        assert opened.plugin_servers[0].state == "untrusted"
    assert not evidence.exists()


async def test_a_file_changed_after_trust_is_not_started_by_a_replacement_host(
        tmp_path: pathlib.Path, marked: Marked) -> None:
    """Trusted content runs; the file changed afterwards and the host crashed: the
    replacement host reads the new content, whose digest is not the trusted one, and
    starts nothing of it (a call to its tool is refused)."""
    evidence = tmp_path / "changed-ran"
    declare = tmp_path / ".quiesce" / "mcp.json"
    declare.parent.mkdir()
    declare.write_text(json.dumps({"mcpServers": {"ref": {
        "command": sys.executable, "args": [str(SERVER)]}}}))
    async with trust_daemon(marked, answers("trust")) as (daemon, _):
        opened = await new_session(daemon, tmp_path)
        assert opened.plugin_servers[0].state == "running"
    script = [[call("e1", "mcp__ref__echo", text="one")], [text("ok")],
              [call("e2", "mcp__ref__echo", text="two")], [text("ok")]]
    async with agent_daemon(marked) as agent:  # trusted from the store: not asked
        with trio.fail_after(30):
            await agent.new_session(tmp_path, script)
            first = await agent.prompt("one")
        assert agent.results(first.turn_id or "")["e1"].code is None
        declare.write_text(json.dumps({"mcpServers": {"ref": {
            "command": "sh", "args": ["-c", f'echo changed > {evidence}; exec "$0" "$1"',
                                      sys.executable, str(SERVER)]}}}))
        os.kill(agent.host_pid, signal.SIGKILL)
        with trio.fail_after(30):
            second = await agent.prompt("two")
        await settle()
        assert agent.results(second.turn_id or "")["e2"].code is not None
    assert not evidence.exists(), "the replacement host started the changed content"


async def test_the_question_shows_the_environment_a_declaration_sets(
        tmp_path: pathlib.Path, marked: Marked) -> None:
    """A declaration's ``env`` changes what runs (here ``PATH`` makes ``npx`` the
    repository's own): the user is shown it, in the question and in ``session.new``."""
    evidence = tmp_path / "FILE"
    (tmp_path / ".bin").mkdir()
    npx = tmp_path / ".bin" / "npx"
    npx.write_text(f"#!/bin/sh\necho ran > {evidence}\n")
    npx.chmod(0o755)
    env = {"PATH": f"{tmp_path}/.bin:/usr/bin:/bin"}
    (tmp_path / ".quiesce").mkdir()
    (tmp_path / ".quiesce" / "mcp.json").write_text(json.dumps({"mcpServers": {"github": {
        "command": "npx", "args": ["-y", "@modelcontextprotocol/server-github"],
        "env": env}}}))
    async with trust_daemon(marked, answers("not-now")) as (daemon, asked):
        opened = await new_session(daemon, tmp_path)
        await settle()
    (question,) = asked
    assert [(s.command, s.env) for s in question.servers] == [("npx", env)]
    assert question.servers[0].shell_line() == (
        f"PATH={tmp_path}/.bin:/usr/bin:/bin npx -y @modelcontextprotocol/server-github")
    assert opened.plugin_servers[0].env == env
    assert not evidence.exists()


async def test_a_deeply_nested_declaring_file_is_refused_as_malformed(
        tmp_path: pathlib.Path, marked: Marked) -> None:
    """Under the size limit, nesting deep enough to exhaust the decoder's recursion is a
    malformed file like any other (named in the refusal), not a failure of the host."""
    (tmp_path / ".quiesce").mkdir()
    (tmp_path / ".quiesce" / "mcp.json").write_bytes(
        b'{"mcpServers": ' + b"[" * 400_000 + b"]" * 400_000 + b"}")
    async with trust_daemon(marked, answers()) as (daemon, asked):
        with trio.fail_after(20):
            try:
                await new_session(daemon, tmp_path)
            except RemoteError as exc:
                assert ".quiesce/mcp.json: not a JSON object: nesting too deep" in exc.message, exc
            else:
                raise AssertionError("a malformed declaring file was accepted")
        assert not asked


async def test_a_file_swapped_while_the_user_decides_is_not_started(
        tmp_path: pathlib.Path, marked: Marked) -> None:
    """The repository swaps the file between the question and the answer: the trust
    given is for the content shown, and the host starts only what it reads with that
    digest, so the swapped content does not run (and is listed untrusted)."""
    shown = tmp_path / "shown-ran"
    swapped = tmp_path / "swapped-ran"
    hostile(tmp_path, shown)

    async def swap_then_trust(params: WorkspaceTrustParams) -> WorkspaceTrustResult:
        hostile(tmp_path, swapped)
        return WorkspaceTrustResult("trust")

    async with trust_daemon(marked, swap_then_trust) as (daemon, asked):
        opened = await new_session(daemon, tmp_path)
        await settle()
        assert len(asked) == 1
        assert opened.plugin_servers[0].state == "untrusted"
    assert not swapped.exists() and not shown.exists()


async def test_a_store_that_cannot_be_written_still_answers_the_session(
        tmp_path: pathlib.Path, marked: Marked) -> None:
    """``trust.json`` cannot be replaced (here it is a folder): the answer holds for the
    session that asked, is not kept (asked again next time), and no temporary file is
    left in the data directory."""
    evidence = tmp_path / "FILE"
    hostile(tmp_path, evidence)
    (marked.data_dir / "trust.json").mkdir(parents=True)
    async with trust_daemon(marked, answers("trust", "not-now")) as (daemon, asked):
        opened = await new_session(daemon, tmp_path)
        assert opened.plugin_servers[0].state == "failed"  # trusted: it ran
        assert evidence.read_text().splitlines() == ["ran"]
        evidence.unlink()
        opened = await new_session(daemon, tmp_path)
        await settle()
        assert len(asked) == 2 and opened.plugin_servers[0].state == "untrusted"
    assert not evidence.exists()
    left = [p.name for p in marked.data_dir.iterdir() if p.name.startswith(".trust")]
    assert not left, f"temporary files left: {left}"


async def test_a_duplicate_key_shows_the_declaration_that_runs(
        tmp_path: pathlib.Path, marked: Marked) -> None:
    """JSON with a server named twice: what the user is shown is what would run (the
    last, as the file is decoded once, by the host, for both)."""
    evidence = tmp_path / "FILE"
    (tmp_path / ".quiesce").mkdir()
    (tmp_path / ".quiesce" / "mcp.json").write_text(
        '{"mcpServers": {"x": {"command": "true"}, '
        f'"x": {{"command": "sh", "args": ["-c", "echo ran > {evidence}"]}}}}}}')
    async with trust_daemon(marked, answers("not-now")) as (daemon, asked):
        opened = await new_session(daemon, tmp_path)
    (question,) = asked
    assert [(s.command, s.args) for s in question.servers] == [
        ("sh", ("-c", f"echo ran > {evidence}"))]
    assert [s.command for s in opened.plugin_servers] == ["sh"]


async def test_trust_is_keyed_by_the_real_path(tmp_path: pathlib.Path, marked: Marked) -> None:
    """Trusted through a symlink, the workspace is trusted under its real path: opened
    as ``sub/../ws`` it is not asked about again; the question names the real path."""
    workspace = tmp_path / "ws"
    (workspace / "sub").mkdir(parents=True)
    evidence = tmp_path / "FILE"
    hostile(workspace, evidence)
    (tmp_path / "link").symlink_to(workspace)
    async with trust_daemon(marked, answers("trust")) as (daemon, asked):
        await new_session(daemon, tmp_path / "link")
        opened = await new_session(daemon, workspace / "sub" / "..")
    assert [q.workspace for q in asked] == [str(workspace)]
    assert opened.plugin_servers[0].state == "failed"  # trusted: started (no MCP server)
    assert list(json.loads((marked.data_dir / "trust.json").read_text())) == [str(workspace)]


async def test_a_bash_call_of_the_same_user_cannot_read_the_runtimes_environ(
        marked: Marked) -> None:
    """The runtime needs the provider keys in its environment; a Bash call running as the
    same (non-root) user must not read them from ``/proc/<runtime pid>/environ`` (the
    host's parent). The daemon runs as ``nobody`` here: root may read anything."""
    base = pathlib.Path(tempfile.mkdtemp(prefix="qnobody-"))
    try:
        for sub in ("data", "run", "ws"):
            (base / sub).mkdir()
        script = base / "script.json"
        probe = ("r=$(awk '{print $4}' /proc/$PPID/stat); tr '\\0' ' ' < /proc/$r/cmdline; "
                 "echo; tr '\\0' '\\n' < /proc/$r/environ 2>&1")
        script.write_text(json.dumps([[call("b", "Bash", command=probe)], [text("done")]]))
        for path in (base, *base.rglob("*")):
            os.chown(path, NOBODY, NOBODY)
        env = marked_env(marked.mark, QUIESCE_DATA_DIR=str(base / "data"),
                         XDG_RUNTIME_DIR=str(base / "run"), HOME=str(base),
                         XDG_CONFIG_HOME=str(base), OPENAI_API_KEY="sk-the-users-key")
        python, pythonpath = python_for_nobody()
        env["PYTHONPATH"] = pythonpath
        command = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups",
                   python, "-m", "runtime", "serve", "--provider", f"scripted:{script}"]
        async with spawn_daemon(command, env=env) as daemon:
            await daemon.initialize()
            agent = Agent(daemon, base / "data", marked.mark)
            with trio.fail_after(30):
                opened: SessionNewResult = await daemon.request(
                    "session.new", SessionNewParams(str(base / "ws"), "auto"))
                agent.session_id = opened.session_id
                answer = await agent.prompt("go")
            result = agent.results(answer.turn_id or "")["b"]
            output = result.content[0].text  # type: ignore[union-attr]
        assert "runtime serve" in output, output  # it did look at the runtime
        assert "sk-the-users-key" not in output, output
        assert "Permission denied" in output, output
    finally:
        shutil.rmtree(base, ignore_errors=True)


async def test_a_corrupt_trust_store_trusts_nothing_and_is_replaced(
        tmp_path: pathlib.Path, marked: Marked) -> None:
    evidence = tmp_path / "FILE"
    hostile(tmp_path, evidence)
    store = marked.data_dir / "trust.json"
    store.write_bytes(b'{"' + str(tmp_path).encode() + b'": {"sha256:\xff')  # cut short
    store.chmod(0o600)
    async with trust_daemon(marked, answers("trust")) as (daemon, asked):
        opened = await new_session(daemon, tmp_path)
    assert len(asked) == 1 and opened.plugin_servers[0].state == "failed"  # asked, ran
    assert json.loads(store.read_text()) == {str(tmp_path): {asked[0].digest: "trust"}}


async def test_a_symlinked_declaration_is_trusted_per_workspace(
        tmp_path: pathlib.Path, marked: Marked) -> None:
    """``.quiesce`` a symlink to a folder elsewhere whose content one workspace trusted:
    another workspace linking the same content is asked about itself (trust is for the
    pair of workspace and content), and runs nothing until it answers."""
    evidence = tmp_path / "FILE"
    shared = tmp_path / "shared"
    shared.mkdir()
    hostile(shared, evidence)
    first, second = tmp_path / "first", tmp_path / "second"
    for workspace in (first, second):
        workspace.mkdir()
        (workspace / ".quiesce").symlink_to(shared / ".quiesce")
    async with trust_daemon(marked, answers("trust", "not-now")) as (daemon, asked):
        opened = await new_session(daemon, first)
        assert opened.plugin_servers[0].state == "failed"  # trusted: ran
        evidence.unlink()
        opened = await new_session(daemon, second)
        await settle()
    assert [q.workspace for q in asked] == [str(first), str(second)]
    assert asked[0].digest == asked[1].digest
    assert opened.plugin_servers[0].state == "untrusted" and not evidence.exists()
