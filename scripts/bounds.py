#!/usr/bin/env python3
"""Memory bounds of the runtime under hostile peers, through real `quiesce serve`s.

Each scenario starts its own daemon, samples the runtime's RSS every 50 ms while a hostile
peer does its worst, and checks the growth against the bound the code documents
(docs/operations.md, "Bounds"):

- client-unread: a client that never reads its answers sends session.load requests, each
  replaying a session of about 2 MiB of events (before the bounds: 450 kB of requests
  queued 757 MB). Bound: a quarter of MAX_QUEUED plus 32 MiB; once it reads, every one is answered.
- client-gone (full mode only): a client that reads nothing while a turn streams more than
  MAX_QUEUED; the daemon must take it as gone and exit 0, as at the end of input.
- ops-flood: connections to the ops socket, each sending 1 MiB without a newline (before the
  bounds: 200 took the runtime to 1.66 GB). Bound: 32 MiB.
- endless-arguments: a local model server streams one tool call's arguments without end
  (before the bounds: 400 MB of fragments, 435 MB). Bound: MAX_CALL_ARGUMENTS x 4 + 32 MiB; the turn
  must end `error` and the stream be closed.
- endless-text: a local model server streams text without end. Bound: MAX_RESPONSE_TEXT x 4
  + 32 MiB (the turn holds the text, its deltas are announced); the turn must end `error`
  and the stream be closed.

Prints a table; --json writes every figure. Exit status 1 if a check fails. --short is the
suite's mode (tests/test_bounds_smoke.py): smaller floods, no client-gone.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import msgspec
import psutil
import trio
from benchlib import sseserver
from benchlib.harness import MARK_VAR, kill_all, marked

from runtime.agent.providers.bounds import MAX_CALL_ARGUMENTS, MAX_RESPONSE_TEXT
from runtime.clients.daemon_client import serve_command
from runtime.link.writer import MAX_QUEUED

MIB = 1024 * 1024
INIT = {"protocolVersion": "1.0", "clientInfo": {"name": "bounds"}}


@dataclass
class Outcome:
    name: str
    growth_mib: float = 0.0
    bound_mib: float = 0.0
    seconds: float = 0.0
    checks: dict[str, bool] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return self.growth_mib <= self.bound_mib and all(self.checks.values())


class Raw:
    """A byte-level client of one `quiesce serve` on pipes (it may stop reading)."""

    def __init__(self, process: trio.Process) -> None:
        assert process.stdin is not None and process.stdout is not None
        self.process = process
        self._buffer = b""
        self._ids = 0

    async def send(self, data: bytes) -> None:
        assert self.process.stdin is not None
        await self.process.stdin.send_all(data)

    async def receive(self, within: float = 60.0) -> Any:
        assert self.process.stdout is not None
        with trio.fail_after(within):
            while b"\n" not in self._buffer:
                chunk = await self.process.stdout.receive_some(1 << 16)
                if not chunk:
                    raise EOFError("the daemon closed its output")
                self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return msgspec.json.decode(line)

    async def call(self, method: str, params: Any) -> Any:
        self._ids += 1
        await self.send(frame(self._ids, method, params))
        while True:
            message = await self.receive()
            if message.get("id") == self._ids and "method" not in message:
                return message


def frame(request_id: int, method: str, params: Any) -> bytes:
    return msgspec.json.encode({"jsonrpc": "2.0", "id": request_id, "method": method,
                                "params": params}) + b"\n"


class Daemon:
    def __init__(self, workdir: pathlib.Path, mark: str, name: str) -> None:
        self.dir = workdir / name
        self.dir.mkdir()
        (self.dir / "data").mkdir()
        self.env = {**os.environ, MARK_VAR: mark, "QUIESCE_DATA_DIR": str(self.dir / "data")}
        self.raw: Raw | None = None
        self.ops_socket: str | None = None
        self.peak = 0
        self.base = 0

    async def __aenter__(self) -> Raw:
        log = os.open(self.dir / "daemon.log", os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            process = await trio.lowlevel.open_process(
                serve_command(), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log,
                env=self.env)
        finally:
            os.close(log)
        self.raw = Raw(process)
        answer = await self.raw.call("initialize", INIT)
        self.ops_socket = answer["result"]["capabilities"].get("ops", {}).get("socket")
        return self.raw

    async def __aexit__(self, *exc: object) -> None:
        assert self.raw is not None
        process = self.raw.process
        with trio.CancelScope(shield=True):
            if process.returncode is None:
                assert process.stdin is not None
                await process.stdin.aclose()
                with trio.move_on_after(20):
                    await process.wait()
                if process.returncode is None:
                    process.kill()
                    await process.wait()

    def rss(self) -> int:
        assert self.raw is not None
        try:
            return int(psutil.Process(self.raw.process.pid).memory_info().rss)
        except psutil.NoSuchProcess:
            return 0

    async def sample(self, seconds: float, until: Callable[[], bool] = lambda: False) -> None:
        """Sample the RSS for ``seconds`` (or until ``until()``), keeping the peak."""
        deadline = trio.current_time() + seconds
        while trio.current_time() < deadline and not until():
            self.peak = max(self.peak, self.rss())
            await trio.sleep(0.05)

    def growth_mib(self) -> float:
        return max(0, self.peak - self.base) / MIB


async def session_with(raw: Raw, workspace: pathlib.Path, script: Any,
                       provider: dict[str, Any] | None = None) -> str:
    _prepare(workspace, script if provider is None else None)
    if provider is None:
        path = workspace.parent / f"{workspace.name}-script.json"
        provider = {"kind": "scripted", "path": str(path)}
    opened = await raw.call("session.new", {"workspace": str(workspace),
                                            "permissionMode": "auto", "provider": provider})
    session_id: str = opened["result"]["sessionId"]
    return session_id


def _prepare(workspace: pathlib.Path, script: Any) -> None:
    workspace.mkdir(exist_ok=True)
    if script is not None:
        (workspace.parent / f"{workspace.name}-script.json").write_text(json.dumps(script))


async def client_unread(workdir: pathlib.Path, mark: str, short: bool) -> Outcome:
    loads = 40 if short else 400
    out = Outcome("client-unread", bound_mib=MAX_QUEUED / 4 / MIB + 32)
    daemon = Daemon(workdir, mark, "client-unread")
    async with daemon as raw:
        session = await session_with(raw, daemon.dir / "ws", [[{"text": "x" * MIB}]])
        answer = await raw.call("agent.prompt", {"sessionId": session, "text": "go"})
        out.checks["turn completed"] = answer.get("result", {}).get("stopReason") == "end_turn"
        daemon.base = daemon.peak = daemon.rss()
        started = time.monotonic()
        await raw.send(b"".join(frame(1000 + i, "session.load", {"sessionId": session})
                                for i in range(loads)))
        await daemon.sample(2.0 if short else 5.0)
        answered = 0
        with trio.move_on_after(120):
            while answered < loads:
                message = await raw.receive()
                if "result" in message and "method" not in message:
                    answered += 1
        out.seconds = time.monotonic() - started
        out.checks[f"all {loads} loads answered once read"] = answered == loads
        out.growth_mib = daemon.growth_mib()
        out.notes.append(f"{loads} session.load requests of a ~2 MiB session, unread for "
                         f"{2.0 if short else 5.0:g} s")
    return out


async def client_gone(workdir: pathlib.Path, mark: str, short: bool) -> Outcome:
    chunks = MAX_QUEUED // MIB + 16
    out = Outcome("client-gone", bound_mib=4 * chunks + MAX_QUEUED / MIB + 64)
    daemon = Daemon(workdir, mark, "client-gone")
    async with daemon as raw:
        session = await session_with(raw, daemon.dir / "ws",
                                     [[{"text": "y" * MIB} for _ in range(chunks)]])
        daemon.base = daemon.peak = daemon.rss()
        started = time.monotonic()
        await raw.send(frame(1, "agent.prompt", {"sessionId": session, "text": "go"}))
        await daemon.sample(90.0, until=lambda: raw.process.poll() is not None)
        out.seconds = time.monotonic() - started
        out.checks["the daemon took the client as gone and exited 0"] = (
            raw.process.poll() == 0)
        out.growth_mib = daemon.growth_mib()
        out.notes.append(f"a turn streams {chunks} MiB to a client that reads nothing (the "
                         "bound counts the turn's own copies: script, message, log)")
    return out


async def ops_flood(workdir: pathlib.Path, mark: str, short: bool) -> Outcome:
    connections = 50 if short else 200
    out = Outcome("ops-flood", bound_mib=32)
    daemon = Daemon(workdir, mark, "ops-flood")
    line = b'{"jsonrpc": "2.0", "id": 1, "method": "ops.stats", "params": {"x": "' + b"a" * MIB
    async with daemon:
        assert daemon.ops_socket is not None, "the daemon has no ops socket"
        socket = pathlib.Path(daemon.ops_socket)
        daemon.base = daemon.peak = daemon.rss()
        started = time.monotonic()
        streams: list[trio.SocketStream] = []

        async def one() -> None:
            try:
                stream = await trio.open_unix_socket(str(socket))
            except OSError:
                return
            streams.append(stream)
            with trio.move_on_after(10):
                try:
                    await stream.send_all(line)
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    pass

        async with trio.open_nursery() as nursery:
            nursery.start_soon(daemon.sample, 4.0)
            for _ in range(connections):
                nursery.start_soon(one)
        for stream in streams:
            await stream.aclose()
        out.seconds = time.monotonic() - started
        stats: Any = {}
        with trio.move_on_after(10):  # once the daemon saw the flood's connections close
            while "result" not in stats:
                try:
                    stats = await _ops_call(socket, "ops.stats")
                except (trio.BrokenResourceError, OSError):
                    await trio.sleep(0.1)
        out.checks["an operator is served after the flood"] = "result" in stats
        out.growth_mib = daemon.growth_mib()
        out.notes.append(f"{connections} connections, each 1 MiB without a newline")
    return out


async def endless_arguments(workdir: pathlib.Path, mark: str, short: bool) -> Outcome:
    out = Outcome("endless-arguments", bound_mib=4 * MAX_CALL_ARGUMENTS / MIB + 32)
    return await _endless(workdir, mark, out, sseserver.endless_call_arguments(),
                          "argument fragments")


async def endless_text(workdir: pathlib.Path, mark: str, short: bool) -> Outcome:
    out = Outcome("endless-text", bound_mib=4 * MAX_RESPONSE_TEXT / MIB + 32)
    return await _endless(workdir, mark, out, sseserver.endless_text(), "text")


async def _endless(workdir: pathlib.Path, mark: str, out: Outcome, body: Iterator[bytes],
                   what: str) -> Outcome:
    """A turn against a local model server that sends ``body`` without end."""
    daemon = Daemon(workdir, mark, out.name)
    server = sseserver.SSEServer()
    server.bodies.append(body)
    async with trio.open_nursery() as nursery:
        await server.start(nursery)
        async with daemon as raw:
            session = await session_with(raw, daemon.dir / "ws", None, provider={
                "kind": "openai", "baseUrl": server.base_url, "model": "bounds-local"})
            daemon.base = daemon.peak = daemon.rss()
            started = time.monotonic()
            answers: list[Any] = []

            async def prompt() -> None:
                answers.append(await raw.call("agent.prompt",
                                              {"sessionId": session, "text": "go"}))

            async with trio.open_nursery() as turn:
                turn.start_soon(prompt)
                await daemon.sample(60.0, until=lambda: bool(answers))
            out.seconds = time.monotonic() - started
            reason = answers[0].get("result", {}).get("stopReason") if answers else None
            out.checks["the turn ended error"] = reason == "error"
            with trio.move_on_after(5):
                await server.gone.wait()
            out.checks["the stream was closed"] = server.gone.is_set()
            out.growth_mib = daemon.growth_mib()
            out.notes.append(f"{server.sent / MIB:.0f} MiB of {what} sent before the runtime "
                             "closed the stream")
        nursery.cancel_scope.cancel()
    return out


async def _ops_call(socket: pathlib.Path, method: str) -> Any:
    stream = await trio.open_unix_socket(str(socket))
    async with stream:
        await stream.send_all(frame(1, "initialize", INIT) + frame(2, method, {}))
        data = b""
        with trio.fail_after(10):
            while data.count(b"\n") < 2:
                chunk = await stream.receive_some(1 << 16)
                if not chunk:
                    break
                data += chunk
        return msgspec.json.decode(data.split(b"\n")[1]) if data.count(b"\n") >= 2 else {}


Scenario = Callable[[pathlib.Path, str, bool], Awaitable[Outcome]]
SCENARIOS: dict[str, Scenario] = {
    "client-unread": client_unread, "client-gone": client_gone, "ops-flood": ops_flood,
    "endless-arguments": endless_arguments, "endless-text": endless_text,
}


async def run(args: argparse.Namespace, workdir: pathlib.Path) -> list[Outcome]:
    mark = uuid.uuid4().hex
    outcomes = []
    for name, scenario in SCENARIOS.items():
        if (args.short and name == "client-gone") or (args.only and name not in args.only):
            continue
        print(f"  {name} ...", file=sys.stderr, flush=True)
        outcomes.append(await scenario(workdir, mark, args.short))
    left = marked(mark)
    if left:
        kill_all(left)
        outcomes.append(Outcome("leftovers", checks={"no process left behind": False},
                                notes=[m.describe() for m in left]))
    return outcomes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/bounds", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--short", action="store_true", help="the suite's smaller run")
    parser.add_argument("--only", action="append", choices=sorted(SCENARIOS))
    parser.add_argument("--json", type=pathlib.Path, help="write every figure here")
    args = parser.parse_args(argv)
    workdir = pathlib.Path(tempfile.mkdtemp(prefix="quiesce-bounds-"))
    try:
        outcomes = trio.run(run, args, workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print(f"{'scenario':18} {'growth MiB':>10} {'bound MiB':>10} {'s':>6}  checks")
    for o in outcomes:
        failed = [k for k, v in o.checks.items() if not v]
        print(f"{o.name:18} {o.growth_mib:10.1f} {o.bound_mib:10.1f} {o.seconds:6.1f}  "
              f"{'ok' if o.passed else 'FAILED: ' + ', '.join(failed or ['over the bound'])}"
              + "".join(f"\n{'':20}{note}" for note in o.notes))
    passed = all(o.passed for o in outcomes)
    if args.json is not None:
        args.json.write_text(json.dumps({"passed": passed, "short": args.short, "outcomes": [
            {"name": o.name, "growthMiB": o.growth_mib, "boundMiB": o.bound_mib,
             "seconds": o.seconds, "checks": o.checks, "notes": o.notes, "passed": o.passed}
            for o in outcomes]}, indent=1))
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
