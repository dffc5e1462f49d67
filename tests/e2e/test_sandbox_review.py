"""The sandbox, attacked where test_sandbox.py does not look (issue 25's review): the
daemon's own control sockets, and the shared ``/tmp`` under the default configuration.

Each probe is a real confined Bash call of a scripted model against the real daemon; it
prints ``ESCAPED`` when the attempt worked and ``refused`` when it did not.
"""

from __future__ import annotations

import contextlib
import pathlib
import sys

import pytest

from tests.conftest import Marked
from tests.e2e.sandboxkit import PY, needs_landlock, output, quote, run_calls, sh
from tests.kit.daemon import agent_daemon, call, text

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only")


@needs_landlock
async def test_a_sandboxed_call_cannot_drive_the_ops_socket(
        tmp_path: pathlib.Path, marked: Marked) -> None:
    """The ops socket is a pathname UNIX socket (0600, the daemon's user), which Landlock
    cannot confine below ABI 9: a confined call, running as that user, must still not get
    to abort, force or restart anything through it."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    ops_dir = marked.run_dir / "quiesce"
    stats = f"{PY} -m runtime ops stats --json --timeout 10 --dir {ops_dir}"
    async with agent_daemon(marked) as agent:
        results = await run_calls(agent, workspace, {"ops": sh(f"{stats} >/dev/null")})
    out = output(results["ops"])
    assert "refused" in out and "ESCAPED" not in out, out


@needs_landlock
@pytest.mark.xfail(strict=True, reason="not fixed: strict_tmp defaults to false (/tmp "
                   "writable); flipping it breaks every test whose hook, plugin or Bash "
                   "call writes a marker beside its workspace in tmp_path")
async def test_the_default_sandbox_writes_nothing_shared_in_tmp(
        tmp_path: pathlib.Path, marked: Marked) -> None:
    """DESIGN 19: by default a confined call writes only in its workspace and its
    session's temporary directory. ``/tmp`` holds other sessions' temporary directories
    (the host's base directory), the daemon's run directory without XDG_RUNTIME_DIR, and
    other sessions' scratch workspaces: none may be written with the default settings."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    other = pathlib.Path(tmp_path.anchor, "tmp") / f"quiesce-review-{tmp_path.name}"
    probes = {
        # every session's $TMPDIR is beneath the host's base directory
        "sessions-base": sh('touch "$(dirname "$TMPDIR")/planted"'),
        "tmp": sh(f"mkdir {other}"),
    }
    try:
        async with agent_daemon(marked) as agent:
            results = await run_calls(agent, workspace, probes)
    finally:
        with contextlib.suppress(OSError):
            other.rmdir()
    for name in probes:
        out = output(results[name])
        assert "refused" in out and "ESCAPED" not in out, (name, out)


@needs_landlock
async def test_a_sandboxed_call_cannot_join_the_unix_client_link(
        tmp_path: pathlib.Path, marked: Marked) -> None:
    """The ``unix:`` client link needs no token (0700 directory, 0600 socket): a confined
    call that got in would be a client, able to answer its own session's permission
    prompts (``Bash {sandbox: "off"}`` included) and open sessions elsewhere."""
    import msgspec

    from protocol.messages.client import ScriptedProviderConfig, SessionNewParams
    from tests.kit.socketclient import INIT, listening_daemon, unix_connect

    workspace = tmp_path / "ws"
    workspace.mkdir()
    path = marked.run_dir / "link" / "q.sock"
    probe = (
        "import json, socket\ns = socket.socket(socket.AF_UNIX)\n"
        "try:\n"
        f"    s.connect({str(path)!r}); s.settimeout(10)\n"
        "    s.sendall(json.dumps({'jsonrpc': '2.0', 'id': 1, 'method': 'initialize', "
        f"'params': {INIT!r}}}).encode() + b'\\n')\n"
        "    answer = s.recv(65536)\n"
        "    print('ESCAPED' if b'result' in answer else 'refused: no answer')\n"
        "except OSError as e:\n    print('refused:', e)\n")
    script = [[call("link", "Bash", command=f"{PY} -c {quote(probe)} > probe.out")],
              [text("done")]]
    params = msgspec.to_builtins(SessionNewParams(
        str(workspace), "auto", ScriptedProviderConfig(script=script)))  # type: ignore[arg-type]
    async with listening_daemon(marked.env(), f"unix:{path}", tmp=tmp_path):
        client = await unix_connect(str(path))
        assert "result" in await client.call("initialize", INIT)
        sid = (await client.call("session.new", params))["result"]["sessionId"]
        answer = await client.call("agent.prompt", {"sessionId": sid, "text": "go"})
        assert "result" in answer, answer
        await client.aclose()
    out = (workspace / "probe.out").read_text()
    assert "refused" in out and "ESCAPED" not in out, out


@needs_landlock
async def test_a_workspace_holding_the_daemons_own_files_cannot_write_them(
        tmp_path: pathlib.Path, marked: Marked) -> None:
    """A workspace may be the user's home, which holds the daemon's configuration file
    (hooks, some unsandboxed), its data directory (the trust store, session logs) and
    its run directory: a confined call must not pre-trust a workspace, add a hook or
    rewrite a session's history, while the rest of the workspace stays writable."""
    home = tmp_path / "home"
    conf = home / ".config" / "quiesce" / "config.toml"
    data = home / ".local" / "share" / "quiesce"
    project = home / "project"
    for folder in (conf.parent, data, project):
        folder.mkdir(parents=True)
    conf.write_text("[sandbox]\nstrict_tmp = true\n")
    (home / ".notes").write_text("notes\n")
    probes = {
        "trust": sh(f"echo '{{}}' > {data}/trust.json"),
        "config": sh(f"echo '[[hooks.session_start]]' >> {conf}"),
        "config-dir": sh(f"touch {conf.parent}/other.toml"),
        "logs": sh(f"touch {data}/planted.jsonl"),
        # what the workspace held already stays writable, beneath and at its top
        "work": "echo more >> .notes && echo x > project/new && mkdir -p project/a/b && "
                "mv project/new project/a/b/ && echo work-ok",
    }
    args = ("--config", str(conf), "--data-dir", str(data))
    async with agent_daemon(marked, extra_args=args) as agent:
        agent.data_dir = data
        results = await run_calls(agent, home, probes)
    out = {name: output(result) for name, result in results.items()}
    for name in ("trust", "config", "config-dir", "logs"):
        assert "refused" in out[name] and "ESCAPED" not in out[name], (name, out[name])
    assert "work-ok" in out["work"], out["work"]
    assert (project / "a" / "b" / "new").read_text() == "x\n"
    assert (home / ".notes").read_text() == "notes\nmore\n"
    assert conf.read_text() == "[sandbox]\nstrict_tmp = true\n"


@needs_landlock
async def test_a_call_with_the_network_on_cannot_join_the_websocket_link(
        tmp_path: pathlib.Path, marked: Marked) -> None:
    """A call reads everywhere, the token file included; with the network on (a plugin
    server always has it) it can reach ``ws://127.0.0.1:PORT``. It must still not become
    a client of the daemon (able to answer its own permission prompts)."""
    import msgspec

    from protocol.messages.client import ScriptedProviderConfig, SessionNewParams
    from tests.kit.socketclient import listening_daemon, ws_connect

    workspace = tmp_path / "ws"
    workspace.mkdir()
    conf = tmp_path / "quiesce.toml"
    conf.write_text('[sandbox]\nnetwork = "on"\nstrict_tmp = true\n')
    async with listening_daemon(marked.env(), "ws://127.0.0.1:0", "--config", str(conf),
                                tmp=tmp_path) as daemon:
        probe = (
            "import socket\n"
            f"token = open({daemon.token_file!r}).read().strip()\n"
            "try:\n"
            f"    s = socket.create_connection(('127.0.0.1', {daemon.port}), timeout=10)\n"
            f"    s.sendall(('GET / HTTP/1.1\\r\\nHost: 127.0.0.1:{daemon.port}\\r\\n'\n"
            "               'Upgrade: websocket\\r\\nConnection: Upgrade\\r\\n'\n"
            "               'Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\\r\\n'\n"
            "               'Sec-WebSocket-Version: 13\\r\\n'\n"
            "               'Sec-WebSocket-Protocol: quiesce.v1\\r\\n'\n"
            "               'Authorization: Bearer ' + token + '\\r\\n\\r\\n').encode())\n"
            "    answer = s.recv(4096)\n"
            "    print('ESCAPED' if b' 101 ' in answer.split(b'\\r\\n')[0] + b' ' "
            "else 'refused:', answer[:40])\n"
            "except OSError as e:\n    print('refused:', e)\n")
        script = [[call("ws", "Bash", command=f"{PY} -c {quote(probe)} > probe.out")],
                  [text("done")]]
        params = msgspec.to_builtins(SessionNewParams(
            str(workspace), "auto", ScriptedProviderConfig(script=script)))  # type: ignore[arg-type]
        client = await ws_connect(daemon.port, token=daemon.token)
        assert "result" in await client.call("initialize", INIT_WS)
        sid = (await client.call("session.new", params))["result"]["sessionId"]
        answer = await client.call("agent.prompt", {"sessionId": sid, "text": "go"})
        assert "result" in answer, answer
        await client.aclose()
    out = (workspace / "probe.out").read_text()
    assert "refused" in out and "ESCAPED" not in out, out


INIT_WS = {"protocolVersion": "1.0", "clientInfo": {"name": "test"}}
