#!/usr/bin/env python3
"""Capture docs/protocol-example.jsonl: a real exchange with ``quiesce serve``, as a client
sees it on the wire.

The client here speaks raw JSON lines (no library): ``initialize``, ``session.new`` (a
scripted provider, permission mode ``ask``), ``agent.prompt``; it answers the
``permission.request`` of the turn's Bash call with ``allow-once``, waits for the call's
first output, sends ``agent.abort`` while the command still runs, and reads until both
requests are answered. Ids, paths, pids and timings are then replaced by fixed values, so
the file changes only when the protocol does. ``docs/protocol.md`` shows it
(``scripts/gen_protocol_docs.py``); ``tests/e2e/test_protocol_example.py`` captures it
again and compares, so it cannot drift. ``--check``: fail if the file is stale.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import re
import subprocess
import sys
import tempfile
from typing import Any

import trio

REPO = pathlib.Path(__file__).resolve().parent.parent
TARGET = REPO / "docs" / "protocol-example.jsonl"
TIMEOUT = 30.0

# ``exec``: the sleep replaces the shell, so the tree the stop kills is one process
# whatever the shell (bash 5.2 does so by itself for a last command; older ones do not).
# The usage chunk: the step's tokens as a provider reports them (without it the example
# would show an estimate, which moves with every change to the tools' descriptions).
SCRIPT: list[Any] = [
    [{"text": "Running the build."},
     {"toolCall": {"id": "bash-1", "name": "Bash",
                   "args": {"command": "echo 'build: starting'; exec sleep 30"}}},
     {"usage": {"input": 3120, "output": 38, "cachedInput": 2048}}],
    [{"text": "The build finished."}],
]

# What varies from run to run, and the fixed value the example shows instead.
FIXED_NUMBERS = {"createdAt": 1767225600.0, "settledMs": 41.7, "killMs": 12,
                 "durationMs": 318, "pid": 4242, "since": 1767225661.2}
SESSION_ID = re.compile(r"s-[0-9a-f]{12}")


def normalize(line: dict[str, Any], workspace: str, data_dir: str) -> dict[str, Any]:
    def fix(value: Any, key: str = "") -> Any:
        if isinstance(value, dict):
            return {k: fix(v, k) for k, v in value.items()}
        if isinstance(value, list):
            return [fix(v) for v in value]
        if key in FIXED_NUMBERS and isinstance(value, int | float):
            return FIXED_NUMBERS[key]
        if isinstance(value, str):
            value = value.replace(workspace, "/home/me/widget")
            value = value.replace(data_dir, "/home/me/.local/share/quiesce")
            value = SESSION_ID.sub("s-5f3c9a1e2b7d", value)
            if key in ("socket", "pidFile"):
                value = re.sub(r"^.*/(\d+)\.", "/run/user/1000/quiesce/4241.", value)
        return value

    return fix(line)  # type: ignore[no-any-return]


def run_capture() -> list[tuple[str, dict[str, Any]]]:
    """The exchange, as (direction, message): ``->`` client to runtime, ``<-`` back."""
    with tempfile.TemporaryDirectory(prefix="quiesce-example-") as tmp:
        workspace = os.path.realpath(os.path.join(tmp, "widget"))
        data_dir = os.path.join(tmp, "data")
        os.mkdir(workspace)
        wire = trio.run(capture, tmp, workspace, data_dir)
        return [(d, normalize(m, workspace, data_dir)) for d, m in wire]


async def capture(tmp: str, workspace: str, data_dir: str
                  ) -> list[tuple[str, dict[str, Any]]]:
    env = {**os.environ, "QUIESCE_DATA_DIR": data_dir, "QUIESCE_LOG_LEVEL": "WARNING",
           "XDG_RUNTIME_DIR": tmp}
    wire: list[tuple[str, dict[str, Any]]] = []
    process = await trio.lowlevel.open_process(
        [sys.executable, "-m", "runtime", "serve"], stdin=subprocess.PIPE,
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
    assert process.stdin is not None and process.stdout is not None
    stdin, stdout = process.stdin, process.stdout
    changed = trio.Event()
    answered: dict[int, dict[str, Any]] = {}

    async def send(message: dict[str, Any]) -> None:
        wire.append(("->", message))
        await stdin.send_all(json.dumps(message, separators=(",", ":")).encode() + b"\n")

    async def read() -> None:
        nonlocal changed
        buffer = b""
        async for chunk in stdout:
            buffer += chunk
            while b"\n" in buffer:
                line, buffer = buffer.split(b"\n", 1)
                message = json.loads(line)
                wire.append(("<-", message))
                if "id" in message and "method" not in message:
                    answered[message["id"]] = message
                changed.set()
                changed = trio.Event()

    async def until(check: Any) -> dict[str, Any]:
        while True:
            for _, message in wire:
                if check(message):
                    return message
            await changed.wait()

    def event(kind: str) -> Any:
        return lambda m: (m.get("method") == "session.event"
                          and m["params"]["event"]["kind"] == kind)

    with trio.fail_after(TIMEOUT):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(read)
            await send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "1.0", "clientInfo": {"name": "my-editor",
                                                         "version": "0.1"}}})
            await until(lambda m: m.get("id") == 1 and "result" in m)
            await send({"jsonrpc": "2.0", "id": 2, "method": "session.new", "params": {
                "workspace": workspace, "permissionMode": "ask",
                "provider": {"kind": "scripted", "script": SCRIPT}}})
            created = await until(lambda m: m.get("id") == 2 and "method" not in m)
            session_id = created["result"]["sessionId"]
            await send({"jsonrpc": "2.0", "id": 3, "method": "agent.prompt", "params": {
                "sessionId": session_id, "text": "build the project"}})
            asked = await until(lambda m: m.get("method") == "permission.request")
            await send({"jsonrpc": "2.0", "id": asked["id"],
                        "result": {"decision": "allow-once"}})
            await until(event("tool/progress"))
            await send({"jsonrpc": "2.0", "id": 4, "method": "agent.abort", "params": {
                "sessionId": session_id}})
            await until(lambda m: 3 in answered and 4 in answered)
            await stdin.aclose()
            await process.wait()
            nursery.cancel_scope.cancel()
    return wire


def as_lines(wire: list[tuple[str, dict[str, Any]]]) -> str:
    return "".join(f"{d} {json.dumps(m, separators=(',', ':'))}\n" for d, m in wire)


def comparable(text: str) -> list[str]:
    """The lines, the two final answers (agent.prompt's, agent.abort's) in a fixed order:
    both come once the turn's end is durable, in either order."""
    lines = text.splitlines()
    return lines[:-2] + sorted(lines[-2:])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()
    text = as_lines(run_capture())
    if args.check:
        if not TARGET.exists() or comparable(TARGET.read_text()) != comparable(text):
            print(f"{TARGET} is stale: run scripts/capture_protocol_example.py",
                  file=sys.stderr)
            return 1
        return 0
    TARGET.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
