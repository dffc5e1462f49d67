"""Helpers of the sandbox's end-to-end tests (``test_sandbox*.py``): probes that print
``ESCAPED`` or ``refused``, a daemon's configuration, scripted Bash calls, listeners."""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import socket
import sys
from collections.abc import Iterator
from typing import Any

import pytest
import trio

from tests.conftest import Marked
from tests.kit.daemon import Agent, call, text

PY = sys.executable


def landlock_abi() -> int:
    from host.sandbox.landlock import kernel_abi
    return kernel_abi()[0]


needs_landlock = pytest.mark.skipif(landlock_abi() < 6, reason="needs Landlock ABI 6")
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root")


def py(code: str) -> str:
    """A probe in Python: ``ESCAPED`` if ``code`` ran, else ``refused: <error>``."""
    wrapped = f"try:\n    {code}\n    print('ESCAPED')\nexcept OSError as e:\n" \
              f"    print('refused:', e)"
    return f"{PY} -c {quote(wrapped)}"


def sh(command: str) -> str:
    """A probe in the shell: ``ESCAPED`` if ``command`` succeeded, else ``refused``."""
    return f"if {command}; then echo ESCAPED; else echo refused; fi 2>&1"


def quote(s: str) -> str:
    return "'" + s.replace("'", "'\\''") + "'"


def config(tmp_path: pathlib.Path, body: str) -> tuple[str, ...]:
    path = tmp_path / "quiesce.toml"
    path.write_text(body)
    return ("--config", str(path))


async def run_calls(agent: Agent, workspace: pathlib.Path, commands: dict[str, str]
                     ) -> dict[str, Any]:
    script = [[call(name, "Bash", command=command) for name, command in commands.items()],
              [text("done")]]
    await agent.new_session(workspace, script)
    with trio.fail_after(120):
        await agent.prompt("go")
    return agent.results("t1")


def output(result: Any) -> str:
    return "".join(getattr(part, "text", "") for part in result.content)


@contextlib.contextmanager
def listeners() -> Iterator[dict[str, Any]]:
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



async def ops_stats(marked: Marked) -> dict[str, Any]:
    command = [PY, "-m", "runtime", "ops", "stats", "--json", "--timeout", "15"]
    with trio.fail_after(30):
        done = await trio.run_process(command, env=marked.env(), capture_stdout=True,
                                      capture_stderr=True, check=False)
    stats: dict[str, Any] = json.loads(done.stdout.decode().strip().splitlines()[-1])
    return stats


