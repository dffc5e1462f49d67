"""``quiesce acp``: the runtime daemon on stdin/stdout, speaking ACP v1.

The native daemon runs in this process, linked to the ACP server by a socket pair: the
ACP server is an ordinary native client of it (same turns, host and stop policy), one
process fewer than spawning ``quiesce serve``, and nothing but the ACP writer ever
touches stdout. When the editor closes stdin, running turns are stopped (native
``agent.abort``, cause ``disposed``) and, once settled, the daemon is shut down as on EOF
(the host and its process trees go). When the daemon stops by itself (SIGTERM, SIGINT,
SIGHUP: its own orderly shutdown) we stop reading the editor and exit.
"""

from __future__ import annotations

import argparse
import logging
import os
import pathlib
import socket
import subprocess
from typing import Any, get_args

import trio

from protocol.framing import DEFAULT_MAX_FRAME_SIZE
from protocol.messages.client import PermissionMode
from protocol.messages.common import InitializeParams, PeerInfo
from protocol.methods import CLIENT_TO_RUNTIME, RUNTIME_TO_CLIENT
from protocol.version import PROTOCOL_VERSION
from runtime.clients.acp.messages import AGENT_TO_CLIENT, CLIENT_TO_AGENT
from runtime.clients.acp.server import VERSION, AcpServer
from runtime.clients.acp.taps import ReceiveTap
from runtime.daemon.cli_options import (
    PROVIDER_METAVAR,
    add_trust_options,
    apply_config_file,
    daemon_from_args,
)
from runtime.daemon.config_file import positive_float, positive_int
from runtime.link import Endpoint
from runtime.link.logs import setup_logging
from runtime.supervision.popen_process import PopenProcess, adopt_or_kill

log = logging.getLogger(__name__)

DESCRIPTION = ("The runtime daemon on stdin/stdout, speaking the Agent Client Protocol (ACP "
               "v1) to an editor: the same turns, host and stop policy as quiesce serve. "
               "When the editor closes stdin, running turns are stopped and the daemon "
               "shuts down. See docs/editors.md.")
DISPOSE_GRACE = 15.0  # as the daemon's: a turn stuck in a mutating call must not hold us


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="quiesce acp", description=DESCRIPTION)
    p.add_argument("--provider", default=os.environ.get("QUIESCE_PROVIDER") or None,
                   metavar=PROVIDER_METAVAR,
                   help="model provider: scripted:FILE, openai or anthropic "
                        "(env QUIESCE_PROVIDER)")
    p.add_argument("--config", help="configuration file, as serve's (TOML; env "
                   "QUIESCE_CONFIG; default $XDG_CONFIG_HOME/quiesce/config.toml if it "
                   "exists): docs/configuration.md")
    p.add_argument("--data-dir", default=os.environ.get("QUIESCE_DATA_DIR") or None,
                   help="where session logs live (env QUIESCE_DATA_DIR; "
                   "default $XDG_DATA_HOME/quiesce)")
    p.add_argument("--permission-mode", choices=get_args(PermissionMode), default="ask",
                   help="of new sessions: ask (the editor is asked before writes and "
                        "commands; default), accept-edits, auto")
    p.add_argument("--max-frame-size", type=positive_int,
                   default=os.environ.get("QUIESCE_MAX_FRAME") or None,
                   help="largest accepted message in bytes (env QUIESCE_MAX_FRAME; default "
                        f"{DEFAULT_MAX_FRAME_SIZE})")
    p.add_argument("--process-grace", type=positive_float,
                   help="seconds a stopped Bash/GenerateImages call may take to return its "
                        "output (default 10)")
    p.add_argument("--ping-interval", type=positive_float,
                   help="seconds between liveness pings of the host (default 2)")
    p.add_argument("--liveness-timeout", type=positive_float,
                   help="a host silent this long is replaced (default 10)")
    p.add_argument("--stuck-after", type=positive_float,
                   help="a stop unsettled this long is flagged stuck in ops (default 30)")
    p.add_argument("--log-file", help="append the log (this process's and its host's) to "
                   "this file instead of stderr")
    p.add_argument("--max-steps", type=positive_int,
                   help="model steps a turn may take before it ends max_turn_requests")
    add_trust_options(p)
    return p


async def run(args: argparse.Namespace, first_host: PopenProcess | None = None) -> None:
    from runtime.link.stdio import take_stdio
    from runtime.proc.orphans import become_subreaper

    daemon = daemon_from_args(args, first_host)
    # Orphans of a crashed host are re-parented to us and killed.
    become_subreaper(sweep_orphans=True)
    stdin, stdout = take_stdio()
    ours, theirs = (trio.SocketStream(trio.socket.from_stdlib_socket(s))
                    for s in socket.socketpair())
    server = AcpServer(permission_mode=args.permission_mode)
    native = Endpoint("daemon", ours, ours, incoming=RUNTIME_TO_CLIENT,
                      outgoing=CLIENT_TO_RUNTIME, handlers=server.native_handlers,
                      notification_handlers=server.native_notification_handlers,
                      max_frame_size=args.max_frame_size)
    acp = Endpoint("acp", ReceiveTap(stdin, CLIENT_TO_AGENT, server.on_request_seen,
                                     args.max_frame_size),
                   stdout,
                   incoming=CLIENT_TO_AGENT, outgoing=AGENT_TO_CLIENT,
                   handlers=server.acp_handlers,
                   notification_handlers=server.acp_notification_handlers,
                   max_frame_size=args.max_frame_size)
    server.attach(acp, native)

    async def serve_daemon() -> None:
        try:
            await daemon.serve(theirs, theirs)
        finally:
            with trio.CancelScope(shield=True):
                await theirs.aclose()  # our native reader sees EOF

    async with trio.open_nursery() as nursery:
        nursery.start_soon(serve_daemon)
        await nursery.start(native.run)
        await native.request("initialize", InitializeParams(
            PROTOCOL_VERSION, PeerInfo("quiesce-acp", VERSION)))
        async with trio.open_nursery() as link:
            server.tasks = link
            link.start_soon(acp.run)
            link.start_soon(_stop_reading_when_closed, native, acp)
            await acp.closed.wait()
            if not native.closed.is_set():  # the editor left (not the daemon: a signal)
                log.info("the editor closed the link: shutting down")
                with trio.move_on_after(DISPOSE_GRACE):  # then the daemon's own shutdown
                    await server.dispose()
                # As on a native client's EOF: what still runs stops (cause disposed), the
                # host goes, the daemon ends and closes its side.
                try:
                    await ours.send_eof()
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    log.info("the daemon had already stopped")
        await native.closed.wait()


async def _stop_reading_when_closed(native: Endpoint, acp: Endpoint) -> None:
    await native.closed.wait()
    acp.stop_reading()


def main(argv: list[str], early_host: subprocess.Popen[bytes] | None = None, *,
         config: tuple[pathlib.Path | None, dict[str, Any]] = (None, {}),
         host_command: list[str] | None = None) -> int:
    """``early_host``: the host ``quiesce`` spawned before importing this module (with
    ``host_command``, which names the configuration file's ``[host]`` table), adopted by
    the daemon (the caller kills and reaps it if it was not). ``config``: the
    configuration file, read (its path and raw table) for that spawn."""
    p = parser()
    args = p.parse_args(argv)
    apply_config_file(p, args, *config)  # as serve: option, environment, file, default
    if args.max_frame_size is None:
        args.max_frame_size = DEFAULT_MAX_FRAME_SIZE
    args.host_command = host_command
    setup_logging("runtime")
    trio.run(run, args, adopt_or_kill(early_host) if early_host is not None else None)
    return 0
