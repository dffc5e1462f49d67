"""``quiesce host`` / ``python -m host``: the host process on stdin/stdout."""

from __future__ import annotations

import argparse
import logging
import sys

import msgspec
import trio

from host.manager import HostConfig
from host.proctree import become_subreaper
from host.server import HostServer
from runtime.logs import setup_logging
from runtime.stdio import take_stdio

log = logging.getLogger(__name__)


def parse_config(text: str | None) -> HostConfig:
    if not text:
        return HostConfig()
    return msgspec.convert(msgspec.json.decode(text), HostConfig)


async def _serve(config: HostConfig) -> None:
    receive, send = take_stdio()
    await HostServer(config, receive, send).serve()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="quiesce host")
    parser.add_argument("--config", help="host configuration as JSON")
    args = parser.parse_args(argv)
    setup_logging("host")
    # Abandoned read-only workers (a Grep's regex) hold the GIL in long slices; a short
    # switch interval keeps the event loop, and so tools.abort, answering promptly.
    sys.setswitchinterval(0.0005)
    become_subreaper()
    trio.run(_serve, parse_config(args.config))
    log.info("host exiting")
    return 0
