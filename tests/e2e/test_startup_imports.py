"""Start-up imports only what the first answer needs (issue 20): the real ``quiesce serve``
path, up to the moment ``initialize`` is answered, loads none of the session side (the
agent, the registry, the providers, the session store, the ops view), none of the other
commands (acp, chat, ops' client, the demo), and no library only they use (httpx, rich,
prompt_toolkit). A session request then loads the session side, and works."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.conftest import Marked

# Runs ``quiesce serve`` in-process, as the console script does, and writes the modules
# loaded when ``initialize`` is answered (its handler's return) to stderr, one JSON line.
SERVE = """
import json, sys
import runtime.daemon.daemon as daemon

answer = daemon.Daemon.initialize

async def initialize(self, params):
    result = await answer(self, params)
    sys.stderr.write("MODULES " + json.dumps(sorted(sys.modules)) + "\\n")
    return result

daemon.Daemon.initialize = initialize
from runtime.cli import main
sys.exit(main(["serve"]))
"""

# Modules (or packages: any module beneath them too) the first answer must not need.
HEAVY = (
    "runtime.agent", "runtime.daemon.sessions",
    "runtime.daemon.ops_backend",
    "runtime.clients",
    "httpx", "rich", "prompt_toolkit",
)


# What the daemon's configuration needs of the agent's package: light, and loaded at start.
LIGHT = ("runtime.agent", "runtime.agent.hooks", "runtime.agent.hooks.config",
         "runtime.agent.hooks.matcher", "runtime.agent.sessionlog", "runtime.agent.logfaults")


def _heavy(modules: list[str]) -> list[str]:
    return [m for m in modules
            if m not in LIGHT and any(m == h or m.startswith(h + ".") for h in HEAVY)]


def _request(rid: int, method: str, params: dict[str, object]) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": rid, "method": method,
                       "params": params}).encode() + b"\n"


def test_serve_answers_initialize_without_the_heavy_modules(marked: Marked) -> None:
    init = _request(1, "initialize", {"protocolVersion": "1.0",
                                      "clientInfo": {"name": "t", "version": "1"}})
    listing = _request(2, "session.list", {})
    done = subprocess.run([sys.executable, "-c", SERVE], input=init + listing,
                          capture_output=True, env=marked.env(), timeout=60)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    answers = [json.loads(line) for line in done.stdout.splitlines()]
    assert [a.get("id") for a in answers] == [1, 2], answers
    assert "result" in answers[0] and "result" in answers[1], answers
    seen = [line for line in done.stderr.decode().splitlines() if line.startswith("MODULES ")]
    assert len(seen) == 1, done.stderr.decode()[-2000:]
    modules = json.loads(seen[0].removeprefix("MODULES "))
    assert "runtime.daemon.daemon" in modules and "runtime.supervision.supervisor" in modules
    assert _heavy(modules) == []
