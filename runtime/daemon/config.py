"""The daemon's configuration file: defaults for ``quiesce serve``'s options, and the
host's settings.

TOML, at ``--config FILE``, else ``$QUIESCE_CONFIG``, else
``$XDG_CONFIG_HOME/quiesce/config.toml`` when that file exists. Precedence, highest first:
a command-line option, its environment variable, the file, the built-in default. Top-level
keys are the long options in snake case; ``provider`` is an option string
(``"scripted:FILE"``, ``"openai"``, ``"anthropic"``) or a table shaped like
``session.new``'s provider; ``system_prompt`` (text) or ``system_prompt_file`` (a path,
relative to the file's folder) replaces the built-in system prompt; the ``[host]`` table
is handed to every host the daemon starts (``quiesce host --config``), which validates it;
``[[hooks.pre_tool_use]]``, ``[[hooks.post_tool_use]]`` and ``[tools.timeouts]`` are the
daemon's hooks and tool time limits (:mod:`runtime.agent.hooks.config`, docs/hooks.md). Relative
paths (``data_dir``, a scripted provider's file, a hook's program given as a path,
``system_prompt_file``) are read from the file's folder (:func:`_beside`).

Read in two passes because ``serve`` spawns its host before its heavy imports: the file
and its host table are read for that spawn (:mod:`runtime.daemon.config_file`, standard library
only); the rest is checked afterwards (:func:`parse_serve_config`).
"""

from __future__ import annotations

import pathlib
from typing import Annotated, Any

import msgspec

from protocol.messages.client import ProviderConfig, ScriptedProviderConfig
from runtime.agent.hooks.config import (
    HookConfig,
    HookConfigError,
    HookSpec,
    HooksTable,
    ToolsTable,
    compile_hooks,
)
from runtime.daemon.config_file import ConfigError

Positive = Annotated[float, msgspec.Meta(gt=0)]
PositiveInt = Annotated[int, msgspec.Meta(gt=0)]


class ServeConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    provider: str | ProviderConfig | None = None
    data_dir: str | None = None
    max_frame_size: PositiveInt | None = None
    process_grace: Positive | None = None
    ping_interval: Positive | None = None
    liveness_timeout: Positive | None = None
    stuck_after: Positive | None = None
    max_steps: PositiveInt | None = None
    system_prompt: str | None = None
    system_prompt_file: str | None = None
    host: dict[str, Any] = msgspec.field(default_factory=dict)
    trusted_workspaces: tuple[str, ...] = ()
    trust_timeout: Positive | None = None
    environment: dict[str, Any] = msgspec.field(default_factory=dict)
    """Checked by the host's parser, as its ``environment`` (``host/childenv.py``)."""
    sandbox: dict[str, Any] = msgspec.field(default_factory=dict)
    """Checked by the host (``protocol.sandboxsettings``), like ``host``."""
    hooks: HooksTable = HooksTable()
    tools: ToolsTable = ToolsTable()


def parse_serve_config(path: pathlib.Path | None, raw: dict[str, Any]) -> ServeConfig:
    try:
        config = msgspec.convert(raw, ServeConfig)
    except msgspec.ValidationError as exc:
        raise ConfigError(f"configuration file {str(path)!r}: {exc}") from exc
    if path is not None:
        config = _beside(config, path.absolute().parent)
    if config.system_prompt is not None and config.system_prompt_file is not None:
        raise ConfigError(f"configuration file {str(path)!r}: set system_prompt or "
                          "system_prompt_file, not both")
    return config


def _resolve(folder: pathlib.Path, value: str) -> str:
    """``value`` (``~`` expanded) as an absolute path, read from ``folder`` if relative."""
    found = pathlib.Path(value).expanduser()
    return str(found if found.is_absolute() else folder / found)


def _beside(config: ServeConfig, folder: pathlib.Path) -> ServeConfig:
    """The file's relative paths read from its own folder, not the daemon's working
    directory: ``data_dir``, a scripted provider's file, and a hook command's program when
    it is a path (has a ``/``; a bare name is looked up on ``PATH``). What then fails names
    the resolved path."""
    changes: dict[str, Any] = {}
    if config.data_dir is not None:
        changes["data_dir"] = _resolve(folder, config.data_dir)
    provider = config.provider
    if isinstance(provider, str) and provider.startswith("scripted:") and provider[9:]:
        changes["provider"] = "scripted:" + _resolve(folder, provider[9:])
    elif isinstance(provider, ScriptedProviderConfig) and provider.path is not None:
        changes["provider"] = msgspec.structs.replace(
            provider, path=_resolve(folder, provider.path))

    def program(spec: HookSpec) -> HookSpec:
        first, *rest = spec.command
        if "/" not in first:
            return spec
        return msgspec.structs.replace(spec, command=(_resolve(folder, first), *rest))

    hooks = config.hooks
    changes["hooks"] = HooksTable(tuple(map(program, hooks.pre_tool_use)),
                                  tuple(map(program, hooks.post_tool_use)))
    return msgspec.structs.replace(config, **changes)


def hook_config(config: ServeConfig, path: pathlib.Path | None) -> HookConfig:
    """The file's hooks and tool time limits, compiled (a bad matcher is a ConfigError)."""
    try:
        return compile_hooks(config.hooks, config.tools)
    except HookConfigError as exc:
        raise ConfigError(f"configuration file {str(path)!r}: {exc}") from exc


def system_prompt(config: ServeConfig, path: pathlib.Path | None) -> str | None:
    """The daemon's system prompt from the file, if it sets one (``system_prompt_file``
    relative to the configuration file's folder); a file that cannot be read, or an
    empty prompt, is a :class:`ConfigError`."""
    text = config.system_prompt
    if config.system_prompt_file is not None:
        prompt_path = pathlib.Path(config.system_prompt_file).expanduser()
        if path is not None and not prompt_path.is_absolute():
            prompt_path = path.parent / prompt_path
        try:
            text = prompt_path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"configuration file {str(path)!r}: system_prompt_file "
                              f"{str(prompt_path)!r}: {exc}") from exc
    if text is not None and not text.strip():
        raise ConfigError(f"configuration file {str(path)!r}: the system prompt is empty")
    return text.strip() if text is not None else None
