"""The host's settings (``quiesce host --config``, the daemon's ``[host]`` table) and their
parser: pure data and validation, so the runtime checks a configuration file with the very
parser the host starts with, without importing the host.

What needs the machine is the caller's, handed to ``parse_config``: whether a network
namespace can be made (for the sandbox's ``proxy`` network), and the environment whose
``QUIESCE_PLUGIN_*`` variables change the plugin settings' defaults.
"""

from __future__ import annotations

import dataclasses
import logging
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import msgspec

from protocol import sandboxsettings
from protocol.sandboxsettings import SandboxSettings
from protocol.toolclass import ToolClass

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class HostToolConfig:
    """``[host.tools]``: what the built-in tools are given (``host.tools.context``)."""

    kill_grace: float = 2.0
    """Seconds between TERM and KILL when a process tree is stopped."""
    bash_default_timeout_ms: int = 120_000
    max_output_bytes: int = 64 * 1024
    """Bound of a process tool's streamed output and result output, and of Grep's output."""
    read_max_bytes: int = 256 * 1024
    """Bound of Read's result text."""
    image_output_dir: str = "images"
    """Workspace-relative folder GenerateImages writes into."""
    image_backend: list[str] | None = None
    """Command of the image backend; ``None`` runs ``python -m host.imaging.render``."""
    image_timeout_ms: int = 300_000


@dataclass(frozen=True)
class AdmissionLimits:
    """``[host.admission]``: concurrency bounds of the host's calls (``host.admission``)."""

    # Classes not named keep their default limit.
    per_class: Mapping[ToolClass, int] = field(default_factory=dict)
    per_session: int = 32
    per_session_searches: int = 4
    max_waiting: int = 256


@dataclass(frozen=True)
class EnvironmentPolicy:
    """The ``[environment]`` table of the daemon's configuration (handed to the host as
    ``environment`` in its ``--config``; applied by ``host.childenv``)."""

    include: tuple[str, ...] = ()
    """Patterns of names passed although a secret pattern or ``exclude`` matches them."""
    exclude: tuple[str, ...] = ()
    """Patterns of names dropped besides ``SECRET_PATTERNS``."""
    set: dict[str, str] = field(default_factory=dict)
    """Variables set in every child (after the filtering)."""
    hidden: tuple[str, ...] = ()
    """Exact names never passed, ``include`` notwithstanding: the daemon's provider keys."""


@dataclass(frozen=True)
class CallLimits:
    """``[host.limits]``: a tool call's bounds (0: none; enforced by ``host.limits``)."""

    max_processes: int = 1024
    """Processes (and threads: the kernel counts tasks) one call's tree may have at once."""
    max_memory_mb: int = 4096
    """MiB of memory: one call's whole tree (cgroup), or each of its processes' address
    space (rlimit)."""


@dataclass(frozen=True)
class PluginSettings:
    """``[host.plugins]``: how the host waits for its MCP servers (``host.plugins``)."""

    start_timeout: float = 30.0
    """Seconds a server has to start and answer MCP ``initialize`` (default: the
    environment's ``QUIESCE_PLUGIN_START_TIMEOUT``, else 30)."""
    quiet_window: float = 1.0
    """After a stop, how long a server must stay silent about the call, from its answer to
    the ping that shows it read the cancel, before the stop settles (``ABORTED``, marked
    unconfirmed; see ``host.plugins.connection``; default: the environment's
    ``QUIESCE_PLUGIN_QUIET_WINDOW``, else 1)."""


# The plugin settings an operator may change through the environment ``quiesce serve``
# runs in (its host inherits it), where the configuration does not set them.
PLUGIN_ENVIRONMENT = {"start_timeout": "QUIESCE_PLUGIN_START_TIMEOUT",
                      "quiet_window": "QUIESCE_PLUGIN_QUIET_WINDOW"}


def _environment_defaults(environ: Mapping[str, str]) -> dict[str, float]:
    """The plugin settings ``environ`` sets (a value that is not a number is ignored,
    with a warning)."""
    found: dict[str, float] = {}
    for key, name in PLUGIN_ENVIRONMENT.items():
        if name not in environ:
            continue
        try:
            found[key] = float(environ[name])
        except ValueError:
            log.warning("ignoring %s=%r: not a number of seconds", name, environ[name])
    return found


@dataclass(frozen=True)
class HostConfig:
    """The host's configuration: tool settings, permission and stop timeouts, tombstones,
    admission limits, plugin settings, the environment policy of child processes and the
    sandbox."""

    tools: HostToolConfig = field(default_factory=HostToolConfig)
    permission_timeout: float = 120.0
    stop_timeout: float = 5.0
    """When every call is stopped (EOF, shutdown, signal): seconds beyond the kill grace
    to wait for them before forcing what is left, so the host can exit."""
    tombstone_ttl: float = 60.0
    tombstone_capacity: int = 10_000
    admission: AdmissionLimits = field(default_factory=AdmissionLimits)
    plugins: PluginSettings = field(default_factory=PluginSettings)
    environment: EnvironmentPolicy = field(default_factory=EnvironmentPolicy)
    """What every child process's environment leaves out and adds (``host/childenv.py``)."""
    sandbox: SandboxSettings = field(default_factory=SandboxSettings)
    """The daemon's ``[sandbox]`` table (docs/sandbox.md)."""
    limits: CallLimits = field(default_factory=CallLimits)
    """Per call: processes and memory (``host.limits``)."""


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
    """A bad or unknown key of the host's settings, named in the message."""


def parse_config(text: str | None, *, environ: Mapping[str, str],
                 why_no_private_network: Callable[[], str | None]) -> HostConfig:
    """The host's settings from JSON; ``ConfigError`` names a bad or unknown key.
    ``environ``: the environment the host runs in (``PLUGIN_ENVIRONMENT``);
    ``why_no_private_network``: why this machine cannot make a network namespace per
    session, or ``None`` if it can (``runtime.proc.netns.unavailable_reason``), asked only
    when the sandbox's settings need one."""
    defaults = _environment_defaults(environ)
    if not text:
        # No file: the defaults, the environment's among them, taken as they are (the
        # ranges are a file's to keep; a host without one never refused to start).
        return msgspec.convert({"plugins": defaults} if defaults else {}, HostConfig)
    try:
        raw: object = msgspec.json.decode(text)
    except msgspec.DecodeError as exc:
        raise ConfigError(f"not valid JSON: {exc}") from None
    if not isinstance(raw, dict):
        raise ConfigError("must be a JSON object")
    _refuse_unknown_keys(raw, HostConfig, "")
    if defaults:
        plugins = raw.setdefault("plugins", {})
        if isinstance(plugins, dict):  # else msgspec names it below
            raw["plugins"] = {**defaults, **plugins}
    try:
        config = msgspec.convert(raw, HostConfig)
    except msgspec.ValidationError as exc:  # its message names the key: "at `$.tools.x`"
        raise ConfigError(str(exc)) from None
    _check_ranges(config, "")
    _check_sandbox(config.sandbox, why_no_private_network)
    return config


def _check_sandbox(settings: SandboxSettings,
                   why_no_private_network: Callable[[], str | None]) -> None:
    """The proxy where no network namespace can be made, and such: refused by name."""
    if settings.network != "proxy" and not settings.allow_domains:
        return
    why = why_no_private_network()
    try:
        sandboxsettings.check(settings, why is None, why or "")
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
