"""The ``quiesce`` command: ``serve`` (the runtime daemon), ``acp`` (the same daemon speaking
the Agent Client Protocol), ``chat`` (a terminal client), ``host``, ``ops``, ``demo``."""

from __future__ import annotations

import argparse
import logging
import os
import pathlib
import sys

import trio

from protocol.framing import DEFAULT_MAX_FRAME_SIZE
from protocol.messages.client import ProviderConfig
from runtime.logs import setup_logging
from runtime.providers.factory import ProviderConfigError, parse_provider_option

log = logging.getLogger(__name__)


async def _serve(args: argparse.Namespace) -> None:
    from host.proctree import become_subreaper
    from runtime.daemon import Daemon
    from runtime.stdio import take_stdio

    daemon = Daemon(
        max_frame_size=args.max_frame_size,
        data_dir=pathlib.Path(args.data_dir) if args.data_dir else None,
        default_provider=args.provider,
        process_grace=args.process_grace,
        ping_interval=args.ping_interval,
        liveness_timeout=args.liveness_timeout,
        stuck_after=args.stuck_after,
    )
    # Orphans of a crashed host are re-parented to us and killed by their marker.
    become_subreaper()
    receive, send = take_stdio()
    await daemon.serve(receive, send)


def _provider_option(value: str) -> ProviderConfig:
    try:
        return parse_provider_option(value)
    except ProviderConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="quiesce", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run the runtime daemon on stdin/stdout (JSON-RPC)")
    serve.add_argument("--max-frame-size", type=int,
                       default=int(os.environ.get("QUIESCE_MAX_FRAME", DEFAULT_MAX_FRAME_SIZE)),
                       help="largest accepted message in bytes (env QUIESCE_MAX_FRAME)")
    serve.add_argument("--data-dir", help="where session logs live (env QUIESCE_DATA_DIR; "
                       "default $XDG_DATA_HOME/quiesce)")
    serve.add_argument("--provider", type=_provider_option,
                       default=os.environ.get("QUIESCE_PROVIDER") or None,
                       help="default model provider: scripted:FILE or openai "
                            "(env QUIESCE_PROVIDER)")
    serve.add_argument("--process-grace", type=float, default=10.0,
                       help="seconds a stopped Bash/GenerateImages call may take to return "
                            "its output (default 10)")
    serve.add_argument("--ping-interval", type=float, default=2.0,
                       help="seconds between liveness pings of the host (default 2)")
    serve.add_argument("--liveness-timeout", type=float, default=10.0,
                       help="a host that does not answer a ping within this is killed and "
                            "replaced (default 10)")
    serve.add_argument("--stuck-after", type=float, default=30.0,
                       help="a stop still unsettled after this many seconds is flagged "
                            "stuck in ops and logged (default 30)")
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
        from runtime.acp.cli import main as acp_main

        return acp_main(rest)
    if args.command == "chat":
        from runtime.chat.cli import main as chat_main

        return chat_main(rest)
    if rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    if args.command == "serve":
        setup_logging("runtime")
        if isinstance(args.provider, str):
            args.provider = _provider_option(args.provider)
        trio.run(_serve, args)
        return 0
    from runtime.demo import run_demo

    return run_demo(keep=args.keep)


if __name__ == "__main__":
    sys.exit(main())
