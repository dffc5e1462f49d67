"""The ``quiesce`` command: ``serve`` (the runtime daemon), ``acp`` (the same daemon speaking
the Agent Client Protocol), ``chat`` (a terminal client), ``host``, ``ops``, ``demo``."""

# Start-up of ``serve`` is two Python processes importing (the runtime's modules, and the
# host's, each ~0.3-0.4 s). ``serve`` spawns its host before anything heavy is imported, so
# the two import side by side, and the daemon adopts it: the imports here are light, the
# heavy ones are in the functions that need them.

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from typing import TYPE_CHECKING

from runtime.daemon.cli_options import (
    PROVIDER_METAVAR,
    add_trust_options,
    apply_config_file,
    daemon_from_args,
    host_command,
)
from runtime.daemon.config_file import positive_float, positive_int

if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    import trio

    from runtime.daemon.daemon import Daemon
    from runtime.daemon.socketlink.listener import ServeLink
    from runtime.supervision.popen_process import PopenProcess


def _spawn_host(command: list[str]) -> subprocess.Popen[bytes]:
    """The host, as the daemon's host link would spawn it: the same command, environment,
    pipes and fds (its stderr is ours; ``close_fds``: nothing else is inherited, the
    client's stdin and stdout included, which become its pipes)."""
    from runtime.agent import logfaults  # noqa: F401 -- takes its test-only variable out of our env
    from runtime.proc.secretenv import host_environment

    return subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            env=host_environment(command))


def _run_host(argv: list[str]) -> int:
    """``quiesce host``: this process becomes the host program, as ``python -m host``
    would run it (same pid, command line, environment and stdio; its exit status is
    ours). The runtime runs the program by name and imports none of the host's modules."""
    import runpy

    sys.argv[1:] = argv
    runpy.run_module("host", run_name="__main__")
    return 0  # not reached: the host's __main__ exits with its status


LOG_FILE_HELP = ("append the log (this process's and its host's: all of stderr) to this "
                 "file instead of stderr")


def _log_to(path: str) -> str | None:
    """Make ``path`` (appended, created 0600) this process's stderr, before the host is
    spawned so it inherits it; why not, if it cannot be opened."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        return f"cannot open the log file {os.path.abspath(path)}: {exc.strerror}"
    os.dup2(fd, 2)  # dup2 clears close-on-exec on fd 2: children inherit it
    os.close(fd)
    return None


# How long a killed early host may take to exit here. A daemon that adopted it has already
# stopped it (and given a host that cannot exit ``KILL_EXIT_TIMEOUT``): short.
_KILL_EXIT_TIMEOUT = 1.0


def _reap(popen: subprocess.Popen[bytes]) -> None:
    """Kill the early host unless it is already reaped (a daemon that adopted it stops
    and reaps it itself): never left running, whatever ended ``serve``. One that cannot
    exit (a thread stuck in the kernel) is not waited for: the runtime exits all the same."""
    if popen.poll() is None:
        popen.kill()
        try:
            popen.wait(_KILL_EXIT_TIMEOUT)
        except subprocess.TimeoutExpired:
            import logging

            logging.getLogger(__name__).error(
                "host %d was killed but cannot exit: the runtime exits without reaping it",
                popen.pid)
    for pipe in (popen.stdin, popen.stdout):  # closed already if it was adopted
        if pipe is not None:
            pipe.close()


def _run_serve(args: argparse.Namespace, host: subprocess.Popen[bytes]) -> int:
    import trio

    from protocol.framing import DEFAULT_MAX_FRAME_SIZE
    from runtime.link.logs import setup_logging
    from runtime.supervision.popen_process import adopt_or_kill

    setup_logging("runtime")
    if args.max_frame_size is None:
        args.max_frame_size = DEFAULT_MAX_FRAME_SIZE
    trio.run(_serve, args, adopt_or_kill(host))
    return 0


async def _serve(args: argparse.Namespace, first_host: PopenProcess | None) -> None:
    from runtime.link.stdio import take_stdio
    from runtime.proc.orphans import become_subreaper

    daemon = daemon_from_args(args, first_host)
    # Orphans of a crashed host are re-parented to us and killed by their marker.
    become_subreaper(sweep_orphans=True)
    receive, send = take_stdio()
    if args.listen is None:
        await daemon.serve(receive, send)
        return
    await _serve_listening(args, daemon, send)


async def _serve_listening(args: argparse.Namespace, daemon: Daemon,
                           out: trio.abc.SendStream) -> None:
    """``--listen``: the socket link instead of stdio; where it listens is one JSON line
    on stdout (docs/renderers.md)."""
    from runtime.daemon.socketlink.listener import Listening, SocketListener, parse_listen

    spec = parse_listen(args.listen)

    def listen(serve_link: ServeLink) -> Callable[..., Any]:
        return SocketListener(spec, serve_link, max_frame_size=args.max_frame_size,
                              token_dir=daemon.data_dir, origins=tuple(args.allow_origin),
                              allow_remote=args.allow_remote, web=args.web).run

    async def announce(listening: Listening) -> None:
        await out.send_all(listening.line().encode() + b"\n")

    await daemon.serve_listening(listen, announce)


def _check_listen(serve: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    from runtime.daemon.socketlink.guard import UnsafeAddress
    from runtime.daemon.socketlink.listener import check_listen

    try:
        check_listen(args.listen, allow_remote=args.allow_remote)
    except (ValueError, UnsafeAddress, OSError) as exc:
        serve.error(f"--listen: {exc}")
    if args.web and not args.listen.startswith("ws://"):
        serve.error("--web needs --listen ws://HOST:PORT")


DESCRIPTION = ("quiesce: an agent runtime in which a stop means stopped. Commands: serve "
               "(the runtime daemon), acp (the same daemon speaking the Agent Client "
               "Protocol), chat (a terminal client), ops (operators' tools), demo; host is "
               "started by serve.")


class _Version(argparse.Action):
    """``--version``: the installed package's version, looked up only when asked."""

    def __init__(self, option_strings: list[str], dest: str = argparse.SUPPRESS,
                 default: str = argparse.SUPPRESS, help: str | None = None) -> None:
        super().__init__(option_strings, dest, nargs=0, default=default, help=help)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: object, option_string: str | None = None) -> None:
        from importlib.metadata import PackageNotFoundError, version

        try:
            found = version("quiesce")
        except PackageNotFoundError:  # run from a checkout that was never installed
            found = "unknown (not installed)"
        print(f"quiesce {found}")
        parser.exit()


def _is_help(rest: list[str]) -> bool:
    return any(arg in ("-h", "--help") for arg in rest)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="quiesce", description=DESCRIPTION)
    parser.add_argument("--version", action=_Version, help="print the version and exit")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run the runtime daemon on stdin/stdout (JSON-RPC)")
    frame_env = os.environ.get("QUIESCE_MAX_FRAME")  # its default is looked up after the spawn
    serve.add_argument("--max-frame-size", type=positive_int, default=frame_env,
                       help="largest accepted message in bytes (env QUIESCE_MAX_FRAME)")
    serve.add_argument("--config", help="configuration file (TOML; env QUIESCE_CONFIG; "
                       "default $XDG_CONFIG_HOME/quiesce/config.toml if it exists): "
                       "docs/configuration.md")
    serve.add_argument("--data-dir", default=os.environ.get("QUIESCE_DATA_DIR") or None,
                       help="where session logs live (env QUIESCE_DATA_DIR; "
                       "default $XDG_DATA_HOME/quiesce)")
    serve.add_argument("--provider", default=os.environ.get("QUIESCE_PROVIDER") or None,
                       metavar=PROVIDER_METAVAR,
                       help="default model provider: scripted:FILE, openai or anthropic "
                            "(env QUIESCE_PROVIDER)")
    serve.add_argument("--process-grace", type=positive_float,
                       help="seconds a stopped Bash/GenerateImages call may take to return "
                            "its output (default 10)")
    serve.add_argument("--ping-interval", type=positive_float,
                       help="seconds between liveness pings of the host (default 2)")
    serve.add_argument("--liveness-timeout", type=positive_float,
                       help="a host that does not answer a ping within this is killed and "
                            "replaced (default 10)")
    serve.add_argument("--stuck-after", type=positive_float,
                       help="a stop still unsettled after this many seconds is flagged "
                            "stuck in ops and logged (default 30)")
    serve.add_argument("--log-file", help=LOG_FILE_HELP)
    serve.add_argument("--max-steps", type=positive_int,
                       help="model steps a turn may take before it ends max_steps (default 100)")
    add_trust_options(serve)
    serve.add_argument("--listen", metavar="ADDRESS",
                       help="serve the client link on ws://HOST:PORT (PORT 0 picks one) or "
                            "unix:PATH instead of stdio; prints where as a JSON line "
                            "(docs/renderers.md)")
    serve.add_argument("--allow-origin", action="append", default=[], metavar="ORIGIN",
                       help="a browser origin allowed on the WebSocket beside our own "
                            "(repeatable)")
    serve.add_argument("--allow-remote", action="store_true",
                       help="allow --listen on a non-loopback address")
    serve.add_argument("--web", action="store_true",
                       help="with --listen ws://...: serve the browser client too")
    sub.add_parser("web", add_help=False,
                   help="serve --listen ws://127.0.0.1:0 --web: the daemon with its browser "
                        "client; open the printed URL (other serve options apply)")
    sub.add_parser("host", help="run a host process on stdin/stdout (started by serve)")
    sub.add_parser("ops", add_help=False,
                   help="find running daemons and act on their sessions (quiesce ops --help)")
    sub.add_parser("acp", add_help=False,
                   help="run the daemon on stdin/stdout speaking the Agent Client Protocol "
                        "(quiesce acp --help)")
    sub.add_parser("chat", add_help=False,
                   help="talk to the agent in this terminal (quiesce chat --help)")
    demo = sub.add_parser("demo", help="run the demonstration in a temporary workspace")
    demo.add_argument("--keep", action="store_true", help="keep the workspace afterwards")
    args, rest = parser.parse_known_args(argv)

    if args.command == "web":
        return main(["serve", "--listen", "ws://127.0.0.1:0", "--web", *rest])
    if args.command == "host":
        return _run_host(rest)
    if args.command == "ops":
        from runtime.clients.ops.cli import main as ops_main

        return ops_main(rest)
    if args.command in ("serve", "acp", "chat"):
        # They hold the user's provider keys in their environment: not readable by the
        # tools of the same user they run (docs/configuration.md).
        from runtime.proc.secretenv import keep_environ_private

        keep_environ_private()
    if args.command == "acp":
        if _is_help(rest):  # help only: no configuration read, no host started
            from runtime.clients.acp.cli import parser as acp_parser

            acp_parser().parse_args(rest)
        from runtime.daemon.config_file import (
            ConfigError,
            daemon_paths,
            host_config_json,
            read_config_file,
        )

        # As for serve: the configuration file is read for the host's command, and the host
        # imports beside the ACP agent.
        early = argparse.ArgumentParser(add_help=False)
        early.add_argument("--config")
        early.add_argument("--log-file")
        early.add_argument("--data-dir", default=os.environ.get("QUIESCE_DATA_DIR") or None)
        known = early.parse_known_args(rest)[0]
        if known.log_file is not None and (why := _log_to(known.log_file)) is not None:
            print(f"quiesce acp: error: {why}", file=sys.stderr)
            return 2
        try:
            config = read_config_file(known.config)
            protected = daemon_paths(config[0], known.data_dir, config[1])
            acp_host = host_command(host_config_json(config[1], protected=protected))
        except ConfigError as exc:
            print(f"quiesce acp: error: {exc}", file=sys.stderr)
            return 2
        host = _spawn_host(acp_host)
        try:
            from runtime.clients.acp.cli import main as acp_main

            return acp_main(rest, early_host=host, config=config, host_command=acp_host)
        finally:
            _reap(host)
    if args.command == "chat":
        from runtime.clients.chat.cli import main as chat_main

        return chat_main(rest)
    if args.command == "serve":
        from runtime.daemon.config_file import (
            ConfigError,
            daemon_paths,
            host_config_json,
            read_config_file,
        )

        if args.log_file is not None and (why := _log_to(args.log_file)) is not None:
            serve.error(why)
        try:
            config_path, config_raw = read_config_file(args.config)
            protected = daemon_paths(config_path, args.data_dir, config_raw)
            args.host_command = host_command(host_config_json(config_raw, protected=protected))
        except ConfigError as exc:
            serve.error(str(exc))
        if args.listen is not None:  # refused before a host is started
            _check_listen(serve, args)
        # First, before any heavy import: the host's imports then run beside ours.
        host = _spawn_host(args.host_command)
        try:
            if rest:
                parser.error(f"unrecognized arguments: {' '.join(rest)}")
            apply_config_file(serve, args, config_path, config_raw)
            return _run_serve(args, host)
        finally:
            _reap(host)
    if rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    from runtime.clients.demo import run_demo

    return run_demo(keep=args.keep)


if __name__ == "__main__":
    sys.exit(main())
