"""``quiesce host`` / ``python -m host``: the host process on stdin/stdout.

Its settings come as one JSON object in ``--config`` (see ``HostConfig``); an
unknown key or an invalid value is refused at start with a message naming it.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

import trio

from host import childenv, limits
from host.sandbox import guarantees
from host.sandbox.session import remove_base
from host.server import HostServer
from protocol import hostconfig
from protocol.hostconfig import ConfigError, HostConfig
from runtime.link.logs import setup_logging
from runtime.link.stdio import take_stdio
from runtime.proc import cgroups, netns
from runtime.proc.hardening import harden
from runtime.proc.orphans import become_subreaper

__all__ = ["ConfigError", "main", "parse_config"]

log = logging.getLogger(__name__)


def parse_config(text: str | None) -> HostConfig:
    """The host's settings from JSON; ``ConfigError`` names a bad or unknown key (the
    parser the runtime checks a configuration file with, given this process's
    environment and this machine's answer to whether a network namespace can be made)."""
    return hostconfig.parse_config(text, environ=os.environ,
                                   why_no_private_network=netns.unavailable_reason)


async def _serve(config: HostConfig) -> None:
    receive, send = take_stdio()
    await HostServer(config, receive, send).serve()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="quiesce host")
    parser.add_argument("--config", help="host configuration as a JSON object")
    args = parser.parse_args(argv)
    try:
        config = parse_config(args.config)
    except ConfigError as exc:
        parser.error(f"--config: {exc}")  # exits 2, on stderr: stdout is the protocol's
    setup_logging("host")
    childenv.configure(config.environment)
    # Abandoned read-only workers (a Grep's regex) hold the GIL in long slices; a short
    # switch interval keeps the event loop, and so tools.abort, answering promptly.
    sys.setswitchinterval(0.0005)
    become_subreaper(sweep_orphans=True)
    harden(children_without_ptrace=True)  # no tool reaches the host through /proc
    guarantees.log_at_start(config.sandbox)
    made = cgroups.setup_host()
    limits.setup(config.limits, made.path if made is not None else None)
    try:
        trio.run(_serve, config)
    finally:
        cgroups.teardown_host()  # every tree is dead by now: only empty cgroups are left
        remove_base()  # the sessions' temporary directories
    log.info("host exiting")
    return 0
