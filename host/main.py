"""``quiesce host`` / ``python -m host``: the host process on stdin/stdout.

Its settings come as one JSON object in ``--config`` (see ``HostConfig``); an
unknown key or an invalid value is refused at start with a message naming it.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import sys
import typing
from collections.abc import Mapping
from typing import Any

import msgspec
import trio

from host import childenv, limits
from host.manager import HostConfig
from host.sandbox import guarantees
from host.sandbox.session import remove_base
from host.server import HostServer
from protocol import sandboxsettings as sandbox_settings
from protocol.sandboxsettings import SandboxSettings
from runtime.link.logs import setup_logging
from runtime.link.stdio import take_stdio
from runtime.proc import cgroups, netns
from runtime.proc.hardening import harden
from runtime.proc.orphans import become_subreaper

log = logging.getLogger(__name__)

# Settings that must be above zero (a count of at least 1, a positive time); every other
# number must not be negative.
POSITIVE = frozenset({
    "permission_timeout", "tombstone_ttl", "tombstone_capacity",
    "admission.per_class", "admission.per_session", "admission.per_session_searches",
    "plugins.start_timeout",
    "tools.bash_default_timeout_ms", "tools.max_output_bytes", "tools.read_max_bytes",
    "tools.image_timeout_ms",
})


# Lists that may be empty (every other string or list must not be).
MAY_BE_EMPTY = frozenset({"environment.include", "environment.exclude", "environment.hidden"})


class ConfigError(ValueError):
    pass


def parse_config(text: str | None) -> HostConfig:
    """The host's settings from JSON; ``ConfigError`` names a bad or unknown key."""
    if not text:
        return HostConfig()
    try:
        raw = msgspec.json.decode(text)
    except msgspec.DecodeError as exc:
        raise ConfigError(f"not valid JSON: {exc}") from None
    if not isinstance(raw, dict):
        raise ConfigError("must be a JSON object")
    _refuse_unknown_keys(raw, HostConfig, "")
    try:
        config = msgspec.convert(raw, HostConfig)
    except msgspec.ValidationError as exc:  # its message names the key: "at `$.tools.x`"
        raise ConfigError(str(exc)) from None
    _check_ranges(config, "")
    _check_sandbox(config.sandbox)
    return config


def _check_sandbox(settings: SandboxSettings) -> None:
    """The proxy where no network namespace can be made, and such: refused by name."""
    if settings.network != "proxy" and not settings.allow_domains:
        return
    why = netns.unavailable_reason()
    try:
        sandbox_settings.check(settings, why is None, why or "")
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def _refuse_unknown_keys(raw: Mapping[str, Any], cls: type, prefix: str) -> None:
    hints = typing.get_type_hints(cls)
    known = [f.name for f in dataclasses.fields(cls)]
    for key, value in raw.items():
        if key not in known:
            raise ConfigError(f"unknown key {prefix + key!r} (known: {', '.join(known)})")
        nested = hints[key]
        if dataclasses.is_dataclass(nested) and isinstance(value, dict):
            _refuse_unknown_keys(value, typing.cast(type, nested), f"{prefix}{key}.")


def _check_ranges(settings: object, prefix: str) -> None:
    for f in dataclasses.fields(settings):  # type: ignore[arg-type]
        key, value = prefix + f.name, getattr(settings, f.name)
        if dataclasses.is_dataclass(value):
            _check_ranges(value, key + ".")
            continue
        if isinstance(value, str | list | tuple) and not value and key not in MAY_BE_EMPTY:
            raise ConfigError(f"{key} must not be empty")
        values = value.values() if isinstance(value, Mapping) else (value,)
        for number in values:
            if isinstance(number, bool) or not isinstance(number, int | float):
                continue
            if number < 0 or (number == 0 and key in POSITIVE):
                bound = "above 0" if key in POSITIVE else "0 or more"
                raise ConfigError(f"{key} must be {bound}, not {number}")


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
