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

from runtime.cli_options import apply_config_file, daemon_from_args, host_command
from runtime.config_file import positive_float, positive_int

if TYPE_CHECKING:
    from runtime.popen_process import PopenProcess


def _spawn_host(command: list[str]) -> subprocess.Popen[bytes]:
    """The host, as the daemon's host link would spawn it: the same command, environment,
    pipes and fds (its stderr is ours; ``close_fds``: nothing else is inherited, the
    client's stdin and stdout included, which become its pipes)."""
    from runtime import logfaults  # noqa: F401 -- takes its test-only variable out of our env
    return subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE)


def _reap(popen: subprocess.Popen[bytes]) -> None:
    """Kill the early host unless it is already reaped (a daemon that adopted it stops
    and reaps it itself): never left running, whatever ended ``serve``."""
    if popen.poll() is None:
        popen.kill()
        popen.wait()
    for pipe in (popen.stdin, popen.stdout):  # closed already if it was adopted
        if pipe is not None:
            pipe.close()


def _run_serve(args: argparse.Namespace, host: subprocess.Popen[bytes]) -> int:
    import trio

    from protocol.framing import DEFAULT_MAX_FRAME_SIZE
    from runtime.popen_process import adopt_or_kill
    from runtime.shared.logs import setup_logging

    setup_logging("runtime")
    if args.max_frame_size is None:
        args.max_frame_size = DEFAULT_MAX_FRAME_SIZE
    trio.run(_serve, args, adopt_or_kill(host))
    return 0


async def _serve(args: argparse.Namespace, first_host: PopenProcess | None) -> None:
    from runtime.shared.hardening import harden
    from runtime.shared.orphans import become_subreaper
    from runtime.shared.stdio import take_stdio

    daemon = daemon_from_args(args, first_host)
    # Orphans of a crashed host are re-parented to us and killed by their marker.
    become_subreaper(sweep_orphans=True)
    harden(children_without_ptrace=False)  # no tool reaches the runtime through /proc
    receive, send = take_stdio()
    await daemon.serve(receive, send)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="quiesce", description=__doc__)
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
    serve.add_argument("--max-steps", type=positive_int,
                       help="model steps a turn may take before it ends max_steps (default 100)")
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

    if args.command == "host":
        from host.main import main as host_main

        return host_main(rest)
    if args.command == "ops":
        from runtime.ops.cli import main as ops_main

        return ops_main(rest)
    if args.command == "acp":
        from runtime.config_file import ConfigError, host_config_json, read_config_file

        # As for serve: the configuration file is read for the host's command, and the host
        # imports beside the ACP agent.
        early = argparse.ArgumentParser(add_help=False)
        early.add_argument("--config")
        try:
            config = read_config_file(early.parse_known_args(rest)[0].config)
            acp_host = host_command(host_config_json(config[1]))
        except ConfigError as exc:
            print(f"quiesce acp: error: {exc}", file=sys.stderr)
            return 2
        host = _spawn_host(acp_host)
        try:
            from runtime.acp.cli import main as acp_main

            return acp_main(rest, early_host=host, config=config, host_command=acp_host)
        finally:
            _reap(host)
    if args.command == "chat":
        from runtime.chat.cli import main as chat_main

        return chat_main(rest)
    if args.command == "serve":
        from runtime.config_file import ConfigError, host_config_json, read_config_file

        try:
            config_path, config_raw = read_config_file(args.config)
            args.host_command = host_command(host_config_json(config_raw))
        except ConfigError as exc:
            serve.error(str(exc))
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
    from runtime.demo import run_demo

    return run_demo(keep=args.keep)


if __name__ == "__main__":
    sys.exit(main())
