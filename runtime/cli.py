"""The ``quiesce`` command: ``serve`` (the runtime daemon), ``host``, ``demo``."""

from __future__ import annotations

import argparse
import logging
import os
import sys

import trio

from protocol.framing import DEFAULT_MAX_FRAME_SIZE
from runtime.logs import setup_logging

log = logging.getLogger(__name__)


async def _serve(max_frame_size: int) -> None:
    from runtime.daemon import Daemon
    from runtime.stdio import take_stdio

    receive, send = take_stdio()
    await Daemon(max_frame_size=max_frame_size).serve(receive, send)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="quiesce", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run the runtime daemon on stdin/stdout (JSON-RPC)")
    serve.add_argument("--max-frame-size", type=int,
                       default=int(os.environ.get("QUIESCE_MAX_FRAME", DEFAULT_MAX_FRAME_SIZE)),
                       help="largest accepted message in bytes (env QUIESCE_MAX_FRAME)")
    sub.add_parser("host", help="run a host process on stdin/stdout (started by serve)")
    demo = sub.add_parser("demo", help="run the demonstration in a temporary workspace")
    demo.add_argument("--keep", action="store_true", help="keep the workspace afterwards")
    args, rest = parser.parse_known_args(argv)

    if args.command == "host":
        from host.main import main as host_main

        return host_main(rest)
    if rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    if args.command == "serve":
        setup_logging("runtime")
        trio.run(_serve, args.max_frame_size)
        return 0
    from runtime.demo import run_demo

    return run_demo(keep=args.keep)


if __name__ == "__main__":
    sys.exit(main())
