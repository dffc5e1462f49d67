"""Reading the daemon's configuration file (standard library only: ``serve`` reads it
before spawning its host, ahead of its heavy imports). What the file may hold, and the
precedence of its values, is in :mod:`runtime.daemon.config`."""

from __future__ import annotations

import argparse
import json
import os
import pathlib
from typing import Any


class ConfigError(Exception):
    """A configuration file that cannot be read or is invalid; the message names it."""


def default_config_path() -> pathlib.Path:
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return pathlib.Path(base) / "quiesce" / "config.toml"


def default_data_dir() -> pathlib.Path:
    """Where session logs live unless ``--data-dir`` or the file says (here, not in
    ``runtime.agent.sessionlog``: the daemon needs it at start-up, the log's decoders later)."""
    configured = os.environ.get("QUIESCE_DATA_DIR")
    if configured:
        return pathlib.Path(configured)
    base = os.environ.get("XDG_DATA_HOME") or os.path.expanduser("~/.local/share")
    return pathlib.Path(base) / "quiesce"


def read_config_file(option: str | None) -> tuple[pathlib.Path | None, dict[str, Any]]:
    """The file's path and its raw table: ``(None, {})`` when none is named and the default
    does not exist. A named file that is missing or is not TOML is a ``ConfigError``."""
    named = option or os.environ.get("QUIESCE_CONFIG") or None
    # Absolute: every message names the file as resolved, and its relative paths are read
    # from its folder (``runtime.daemon.config``).
    path = (pathlib.Path(named) if named else default_config_path()).absolute()
    try:
        file = open(path, "rb")
    except FileNotFoundError:
        if named:
            raise ConfigError(f"configuration file {str(path)!r} does not exist") from None
        return None, {}
    except OSError as exc:
        raise ConfigError(f"configuration file {str(path)!r}: {exc}") from exc
    import tomllib  # here: most starts have no file, and the host is spawned after this

    with file:
        try:
            return path, tomllib.load(file)
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise ConfigError(f"configuration file {str(path)!r}: {exc}") from exc


def daemon_paths(config_path: pathlib.Path | None, data_dir: str | None,
                 raw: dict[str, Any]) -> list[str]:
    """What no sandboxed call may write, even beneath its workspace (the user's home):
    the configuration file (hooks, some unsandboxed) and the default configuration
    directory, the data directories (the trust store, session logs) and the run
    directory (the ops socket)."""
    from runtime.daemon.ops.rundir import run_dir

    paths = [default_config_path().parent, default_data_dir(), run_dir()]
    if config_path is not None:
        paths.append(config_path)
        named = raw.get("data_dir")
        if isinstance(named, str) and named:
            paths.append(config_path.parent / os.path.expanduser(named))
    if data_dir:
        paths.append(pathlib.Path(data_dir))
    return sorted({os.path.abspath(path) for path in paths})


def host_config_json(raw: dict[str, Any], *, protected: list[str] | None = None
                     ) -> str | None:
    """The ``[host]`` table as the host's ``--config`` argument (``None`` when absent), with
    the ``[environment]`` table as its ``environment``, the key variable a ``provider``
    table names (``apiKeyEnv``) among the names no child process sees, and the ``[sandbox]``
    table as its ``sandbox`` (the host enforces it), ``protected`` added to its own."""
    table = raw.get("host")
    if table is not None and not isinstance(table, dict):
        raise ConfigError("'host' must be a table")
    table = dict(table or {})
    environment = raw.get("environment")
    if environment is not None:
        if not isinstance(environment, dict):
            raise ConfigError("'environment' must be a table")
        if "hidden" in environment:
            raise ConfigError("[environment]: unknown key 'hidden' (known: include, exclude, set)")
        table["environment"] = dict(environment)
    sandbox = raw.get("sandbox")
    if sandbox is not None and not isinstance(sandbox, dict):
        raise ConfigError("'sandbox' must be a table")
    if sandbox:
        table["sandbox"] = dict(sandbox)
    if protected:
        sandbox_table = table.setdefault("sandbox", {})
        own = sandbox_table.get("protected")
        sandbox_table["protected"] = [*(own if isinstance(own, list) else ()), *protected]
    provider = raw.get("provider")
    key_env = provider.get("apiKeyEnv") if isinstance(provider, dict) else None
    if isinstance(key_env, str) and key_env:
        environment = table.setdefault("environment", {})
        if isinstance(environment, dict):
            environment["hidden"] = [key_env]
    return json.dumps(table) if table else None


def positive_float(text: str) -> float:
    """An option's value that must be a number above 0 (``argparse`` names the option)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be above 0, not {text!r}")
    return value


def positive_int(text: str) -> int:
    """An option's value that must be a whole number above 0."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be above 0, not {text!r}")
    return value
