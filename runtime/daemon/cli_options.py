"""What ``quiesce serve`` and ``quiesce acp`` share of their command line: the host's
command (for the early spawn and every replacement), and the configuration file applied to
the options not given. Both dispatchers import it; it imports neither (no import circle).
Light at module level: it runs before the host is spawned."""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from protocol.messages.client import ProviderConfig
    from runtime.daemon.daemon import Daemon
    from runtime.supervision.popen_process import PopenProcess


PROVIDER_METAVAR = "{scripted:FILE,openai,anthropic}"
"""``--provider``'s name in usage lines: every form it takes (``OPTION_FORMS`` of
``runtime.daemon.provider_option``)."""


def host_command(host_config: str | None) -> list[str]:
    """How the daemon starts a host (``runtime.supervision.link.default_host_command()`` plus the
    configuration file's ``[host]`` table): the early one and every replacement alike."""
    command = [sys.executable, "-m", "host"]
    return command if host_config is None else [*command, "--config", host_config]


def _provider_option(parser: argparse.ArgumentParser, value: str) -> ProviderConfig:
    """``--provider``, checked after the host is spawned; a bad one is reported as
    argparse reports a bad option value."""
    from runtime.daemon.provider_option import ProviderOptionError, parse_provider_option

    try:
        return parse_provider_option(value)
    except ProviderOptionError as exc:
        parser.error(f"argument --provider: {exc}")


# ``serve``'s options that the configuration file may also set, with their built-in default.
SERVE_DEFAULTS: dict[str, float | int | None] = {
    "max_frame_size": None, "process_grace": 10.0, "ping_interval": 2.0,
    "liveness_timeout": 10.0, "stuck_after": 30.0, "max_steps": None,
    "trust_timeout": 60.0,
}


def add_trust_options(parser: argparse.ArgumentParser) -> None:
    """Workspace trust's options, ``serve``'s and ``acp``'s alike (docs/plugins.md)."""
    from runtime.daemon.config_file import positive_float

    parser.add_argument("--trust-workspace", action="append", dest="trusted_workspaces",
                        metavar="DIR", default=None,
                        help="run what this workspace declares (.quiesce/mcp.json) without "
                             "asking, whatever its content (repeatable; for operators and CI)")
    parser.add_argument("--trust-timeout", type=positive_float,
                        help="seconds the client has to answer workspace.trust; then the "
                             "session opens without the workspace's servers (default 60)")


def apply_config_file(parser: argparse.ArgumentParser, args: argparse.Namespace,
                       path: pathlib.Path | None, raw: dict[str, Any]) -> None:
    """Fill every option not given (on the command line or in its environment variable)
    from the configuration file, then from the built-in default; check the host table.
    ``serve``'s and ``acp``'s (``--provider`` still the option's string)."""
    from runtime.daemon.config import hook_config, parse_serve_config, system_prompt
    from runtime.daemon.config_file import ConfigError

    try:
        config = parse_serve_config(path, raw)
        args.system_prompt = system_prompt(config, path)
        args.hooks = hook_config(config, path)
    except ConfigError as exc:
        parser.error(str(exc))
    for name, default in SERVE_DEFAULTS.items():
        if getattr(args, name) is None:
            from_file = getattr(config, name)
            setattr(args, name, from_file if from_file is not None else default)
    if args.data_dir is None:
        args.data_dir = config.data_dir
    args.trusted_workspaces = tuple(
        [str(pathlib.Path(w).expanduser()) for w in (args.trusted_workspaces or ())]
        + [str(_relative_to(path, w)) for w in config.trusted_workspaces])
    if args.provider is not None:
        args.provider = _provider_option(parser, args.provider)
    elif isinstance(config.provider, str):
        args.provider = _provider_option(parser, config.provider)
    else:
        args.provider = config.provider
    from runtime.daemon.config_file import host_config_json

    try:
        host_json = host_config_json(raw)
    except ConfigError as exc:
        parser.error(f"configuration file {str(path)!r}: {exc}")
    if host_json is not None:
        from protocol.hostconfig import parse_config
        from runtime.proc.netns import unavailable_reason

        # The host checks them too; here a mistake is reported before anything runs.
        checks = [("[host]", host_json)]
        if isinstance(raw.get("environment"), dict):
            checks.insert(0, ("[environment]", json.dumps({"environment": raw["environment"]})))
        for table, text in checks:
            try:
                parse_config(text, environ=os.environ, why_no_private_network=unavailable_reason)
            except ValueError as exc:
                parser.error(f"configuration file {str(path)!r}: {table}: {exc}")


def _relative_to(config_path: pathlib.Path | None, folder: str) -> pathlib.Path:
    """A folder the configuration file names, relative to the file's own folder."""
    named = pathlib.Path(folder).expanduser()
    if config_path is None or named.is_absolute():
        return named
    return config_path.parent / named


def daemon_from_args(args: argparse.Namespace, first_host: PopenProcess | None) -> Daemon:
    """The daemon ``serve`` and ``acp`` run, from their options (the configuration file
    applied): one place, so neither drops a setting the other passes."""
    from runtime.daemon.daemon import Daemon

    return Daemon(
        host_command=args.host_command,
        max_frame_size=args.max_frame_size,
        data_dir=pathlib.Path(args.data_dir) if args.data_dir else None,
        default_provider=args.provider,
        process_grace=args.process_grace,
        ping_interval=args.ping_interval,
        liveness_timeout=args.liveness_timeout,
        stuck_after=args.stuck_after,
        max_steps=args.max_steps,
        system_prompt=getattr(args, "system_prompt", None),
        hooks=getattr(args, "hooks", None),
        first_host=first_host,
        trusted_workspaces=getattr(args, "trusted_workspaces", ()) or (),
        trust_timeout=getattr(args, "trust_timeout", None),
    )
