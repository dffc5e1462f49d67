"""quiesce ops: find this user's running daemons and act on their sessions.

Exit status: 0 done; 1 failed (no such daemon or session, an error from the daemon, a
call not forced); 2 bad usage; 3 no answer within --timeout (a stop that reached the
daemon stays requested).
"""

from __future__ import annotations

import argparse
import os
import pathlib
import sys
import time
from collections.abc import Callable, Coroutine
from typing import Any

import msgspec
import trio

from protocol.errors import RpcError
from protocol.messages.ops import OpsEventParams, OpsUnreadableLog
from runtime.clients.ops import render
from runtime.clients.ops.client import Discovery, RunningDaemon, connect, daemon_client, discover
from runtime.clients.ops.targets import TargetError, locate_session, parse_target, pick_daemon
from runtime.daemon.ops.rundir import UnsafeRunDir
from runtime.link import ConnectionClosed

EXIT_OK, EXIT_FAILED, EXIT_TIMEOUT = 0, 1, 3
DEFAULT_TIMEOUT = 30.0

Command = Callable[[argparse.Namespace, Discovery], Coroutine[Any, Any, int]]


def _emit(args: argparse.Namespace, human: str, data: Any) -> None:
    if args.json:
        sys.stdout.write(msgspec.json.encode(render.complete(data)).decode() + "\n")
    else:
        sys.stdout.write(human + "\n")
    sys.stdout.flush()


def _daemon_json(daemon: RunningDaemon) -> dict[str, Any]:
    out: dict[str, Any] = render.complete(daemon.info)
    return out


async def cmd_ls(args: argparse.Namespace, found: Discovery) -> int:
    listing, data, status = [], [], EXIT_OK
    broken: list[tuple[int, tuple[OpsUnreadableLog, ...]]] = []
    identities = []
    for daemon in found.daemons:
        entry = _daemon_json(daemon)
        entry["client"] = started_by = daemon_client(daemon.pid)
        identities.append(render.daemon_identity(daemon, started_by))
        try:
            with trio.fail_after(args.timeout):
                async with connect(daemon.socket) as client:
                    result = await client.sessions()
        except (trio.TooSlowError, ConnectionClosed, OSError, RpcError) as exc:
            why = "no answer" if isinstance(exc, trio.TooSlowError) else str(exc)
            _note(f"daemon {daemon.pid}: {why}")
            entry["error"] = why
            entry["sessions"] = entry["unreadableLogs"] = []  # every field, always
            status = EXIT_FAILED
        else:
            listing.append((daemon.pid, result.sessions))
            broken.append((daemon.pid, result.unreadable_logs))
            entry["sessions"] = render.complete(result.sessions)
            entry["unreadableLogs"] = render.complete(result.unreadable_logs)
        data.append(entry)
    if not found.daemons:
        human = f"no quiesce daemon is running (looked in {found.directory})"
    else:
        human = "\n".join(identities) + "\n\n" + render.sessions_table(listing)
        if problems := render.unreadable_logs(broken):
            human += "\n\n" + problems
    _emit(args, human, data)
    return status


async def cmd_show(args: argparse.Namespace, found: Discovery) -> int:
    target = parse_target(args.target)
    with trio.fail_after(args.timeout):
        if isinstance(target, str):
            daemon, session = await locate_session(found.daemons, target, found.directory)
            _emit(args, render.session_detail(daemon.pid, session),
                  {"pid": daemon.pid, "session": session})
            return EXIT_OK
        daemon = pick_daemon(found.daemons, target, found.directory)
        async with connect(daemon.socket) as client:
            result = await client.sessions()
    data = _daemon_json(daemon)
    data["sessions"] = render.complete(result.sessions)
    data["unreadableLogs"] = render.complete(result.unreadable_logs)
    _emit(args, render.daemon_detail(daemon, result.sessions, result.unreadable_logs), data)
    return EXIT_OK


async def cmd_abort(args: argparse.Namespace, found: Discovery) -> int:
    with trio.fail_after(args.timeout):
        daemon, _ = await locate_session(found.daemons, args.session, found.directory)
        async with connect(daemon.socket) as client:
            result = await client.abort(args.session)
    _emit(args, render.abort_text(args.session, result), result)
    return EXIT_OK


async def cmd_force(args: argparse.Namespace, found: Discovery) -> int:
    with trio.fail_after(args.timeout):
        daemon, session = await locate_session(found.daemons, args.session, found.directory)
        if args.call is not None:
            async with connect(daemon.socket) as client:
                result = await client.force(args.session, args.call)
            _emit(args, render.force_text(args.session, args.call, result), result)
            return EXIT_OK if result.forced else EXIT_FAILED
        # No call named: what the session's stop waits on, each named before it is forced.
        waited = render.waited_on(session)
        if not waited:
            _emit(args, render.nothing_to_force(session), {"forced": False, "calls": []})
            return EXIT_FAILED
        status = EXIT_OK
        for call in waited:
            if not args.json:
                _emit(args, render.forcing_text(session, call), None)
            async with connect(daemon.socket) as client:
                result = await client.force(args.session, call.call_id)
            _emit(args, render.force_text(args.session, call.call_id, result),
                  {"callId": call.call_id, "tool": call.tool, "class": call.tool_class,
                   "forced": result.forced, "detail": result.detail})
            if not result.forced:
                status = EXIT_FAILED
    return status


async def cmd_restart_host(args: argparse.Namespace, found: Discovery) -> int:
    daemon = pick_daemon(found.daemons, _pid(args.pid), found.directory)
    with trio.fail_after(args.timeout):
        async with connect(daemon.socket) as client:
            result = await client.restart_host()
    _emit(args, render.restart_text(daemon.pid, result), result)
    return EXIT_OK


async def cmd_stats(args: argparse.Namespace, found: Discovery) -> int:
    daemon = pick_daemon(found.daemons, _pid(args.pid), found.directory)
    with trio.fail_after(args.timeout):
        async with connect(daemon.socket) as client:
            result = await client.stats()
    _emit(args, render.stats_text(result), result)
    return EXIT_OK


async def cmd_tail(args: argparse.Namespace, found: Discovery) -> int:
    target = parse_target(args.target)
    session_id = target if isinstance(target, str) else None
    with trio.fail_after(args.timeout):
        if session_id is not None:
            daemon, _ = await locate_session(found.daemons, session_id, found.directory)
        else:
            daemon = pick_daemon(found.daemons, target if isinstance(target, int) else None,
                                 found.directory)
    seen = 0
    with trio.CancelScope() as scope:

        def on_event(params: OpsEventParams) -> None:
            nonlocal seen
            if args.json:
                line = msgspec.json.encode({"pid": daemon.pid, **render.complete(params)})
                sys.stdout.write(line.decode() + "\n")
            else:
                sys.stdout.write(render.event_line(daemon.pid, params, time.time()) + "\n")
            seen += 1
            if args.count is not None and seen >= args.count:
                scope.cancel()

        def on_event_safely(params: OpsEventParams) -> None:
            # Runs inline in the connection's reader: a closed stdout (`| head`) ends the
            # tail instead of crashing the reader.
            try:
                on_event(params)
                sys.stdout.flush()
            except BrokenPipeError:
                _stdout_gone()
                scope.cancel()

        async with connect(daemon.socket) as client:
            try:
                await client.tail(on_event_safely, session_id)
            except ConnectionClosed:
                _note(f"daemon {daemon.pid} closed the connection")
    return EXIT_OK


def _pid(text: str | None) -> int | None:
    if text is None:
        return None
    if not text.isdigit():
        raise TargetError(f"{text!r} is not a pid")
    return int(text)


def _stdout_gone() -> None:
    """Whoever read our output has gone: send the rest (and the final flush) nowhere."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def _note(message: str) -> None:
    sys.stderr.write(f"quiesce ops: {message}\n")
    sys.stderr.flush()


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--json", action="store_true", help="print JSON instead of tables")
    common.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT,
                        help=f"seconds to wait for an answer (default {DEFAULT_TIMEOUT:g})")
    common.add_argument("--dir", type=pathlib.Path, default=None,
                        help="run directory to look in (default $XDG_RUNTIME_DIR/quiesce, "
                             "else <tmp>/quiesce-<uid>)")
    parser = argparse.ArgumentParser(prog="quiesce ops", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)

    def add(name: str, func: Command, help: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, parents=[common], help=help, description=help)
        p.set_defaults(func=func, parser=p)  # a misuse is reported with its own usage
        return p

    add("ls", cmd_ls, "list running daemons of this user and their sessions")
    add("show", cmd_show, "one daemon's sessions and calls, or one session").add_argument(
        "target", nargs="?", metavar="PID|SESSION")
    add("abort", cmd_abort, "stop a session's turn (cause operator); waits until settled"
        ).add_argument("session", metavar="SESSION")
    force = add("force", cmd_force, "force a mutating or plugin call stuck after a stop: "
                "the host stops waiting for it; recorded ABORTED, forced")
    force.add_argument("session", metavar="SESSION")
    force.add_argument("call", metavar="CALL", nargs="?",
                       help="the call to force (default: each call the session's stop "
                            "waits on, named before it is forced)")
    add("restart-host", cmd_restart_host, "stop a daemon's host and start a new one"
        ).add_argument("pid", nargs="?", metavar="PID")
    tail = add("tail", cmd_tail, "print events as they happen (of a daemon or a session)")
    tail.add_argument("target", nargs="?", metavar="PID|SESSION")
    tail.add_argument("--count", type=int, default=None, help="stop after N events")
    add("stats", cmd_stats, "counters and stop latencies of a daemon").add_argument(
        "pid", nargs="?", metavar="PID")
    return parser


async def _run(args: argparse.Namespace) -> int:
    try:
        with trio.fail_after(args.timeout):
            found = await discover(args.dir)
        for pid, why in found.removed:
            _note(f"removed the stale files of daemon {pid} ({why})")
        command: Command = args.func
        return await command(args, found)
    except trio.TooSlowError:
        extra = (" (a stop that reached the daemon stays requested; see `quiesce ops show "
                 f"{args.session}`)") if args.command == "abort" else ""
        return _failed(args, f"no answer within {args.timeout:g} s{extra}", EXIT_TIMEOUT)
    except (UnsafeRunDir, TargetError) as exc:
        return _failed(args, str(exc))
    except RpcError as exc:
        return _failed(args, f"the daemon answered {exc.code.name}: {exc.message}")
    except ConnectionClosed:
        return _failed(args, "the daemon closed the connection")
    except BrokenPipeError:
        _stdout_gone()
    except OSError as exc:
        return _failed(args, f"cannot reach the daemon: {exc}")
    return EXIT_FAILED


def _failed(args: argparse.Namespace, message: str, status: int = EXIT_FAILED) -> int:
    """Said on stderr; with --json, stdout still gets JSON: the error and the status."""
    _note(message)
    if args.json:
        sys.stdout.write(msgspec.json.encode({"error": message, "exit": status}).decode()
                         + "\n")
        sys.stdout.flush()
    return status


HINTS = {"ls": " (ls lists every daemon; `quiesce ops show PID` shows one)",
         "abort": " (abort takes one SESSION)", "stats": " (stats takes at most one PID)"}


def main(argv: list[str] | None = None) -> int:
    args, extra = build_parser().parse_known_args(argv)
    if extra:  # the subcommand's usage, not the top level's
        args.parser.error(f"unrecognized arguments: {' '.join(extra)}"
                          + HINTS.get(args.command, ""))
    try:
        return trio.run(_run, args)
    except KeyboardInterrupt:
        return 130
    except BaseExceptionGroup as group:
        _, rest = group.split(KeyboardInterrupt)
        if rest is None:
            return 130
        raise
