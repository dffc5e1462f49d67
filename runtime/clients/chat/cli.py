"""``quiesce chat``: talk to the agent in this terminal.

Starts ``quiesce serve`` as a subprocess (as an editor would) and is its client:
assistant messages, tool calls with live progress and codes, inline permission
prompts, and a Stop key (Esc) that shows what stopping did.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import pathlib
import sys

from protocol.messages.client import ProviderConfig, ScriptedProviderConfig
from runtime.clients.chat.commands import CHOOSE_MODEL
from runtime.clients.chat.controller import ChatError, ChatOptions
from runtime.daemon.cli_options import PROVIDER_METAVAR
from runtime.daemon.config import parse_serve_config
from runtime.daemon.config_file import ConfigError, default_data_dir, read_config_file
from runtime.daemon.provider_option import ProviderOptionError, parse_provider_option

LOG_NAME = "chat-serve.log"
DESCRIPTION = """\
Talk to the agent in this terminal. Starts `quiesce serve` as a subprocess (as an
editor would) and is its client, with the same --data-dir and --config; the daemon's
log goes to <data dir>/chat-serve.log."""
EPILOG = """\
keys:
  Enter       send the line (prompts typed while a turn runs are queued)
  Esc         stop the turn, and show what stopping did
  Ctrl-C      stop the turn; twice within a second: quit (after the stop settles)
  Ctrl-D      quit (on an empty line)
permission prompts: typing never answers one; a line of one letter and Enter does:
  y allow once, a allow for the session, n deny, d deny for the session
  (any other line is refused and kept in the input line; Esc stops the turn)
commands:
  /stop-keep  stop, but keep the queued prompts     /sessions   this workspace's sessions
  /load ID    replay a session and continue it      /sessions all   every workspace's
  /quit       quit"""

NO_PROVIDER = f"No model is configured, so prompts will fail. {CHOOSE_MODEL}"


def _provider(value: str) -> ProviderConfig:
    try:
        config = parse_provider_option(value)
    except ProviderOptionError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc
    if isinstance(config, ScriptedProviderConfig) and config.path is not None:
        path = pathlib.Path(config.path).expanduser().resolve()
        if not path.is_file():
            raise argparse.ArgumentTypeError(f"no script file at {path}")
        config = ScriptedProviderConfig(path=str(path))
    return config


def parse_args(argv: list[str]) -> ChatOptions:
    parser = argparse.ArgumentParser(
        prog="quiesce chat", description=DESCRIPTION, epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workspace", default=os.getcwd(),
                        help="the directory the agent works in (default: the current one)")
    parser.add_argument("--provider", type=_provider, default=None,
                        metavar=PROVIDER_METAVAR,
                        help="scripted:FILE, openai or anthropic (default: the daemon's, "
                             "from QUIESCE_PROVIDER)")
    parser.add_argument("--permission-mode", choices=("ask", "accept-edits", "auto"),
                        default="ask", help="which calls ask first (default: ask)")
    parser.add_argument("--config", help="configuration file, as serve's (TOML; env "
                        "QUIESCE_CONFIG; default $XDG_CONFIG_HOME/quiesce/config.toml if it "
                        "exists): docs/configuration.md")
    parser.add_argument("--data-dir", default=os.environ.get("QUIESCE_DATA_DIR") or None,
                        help="where session logs and chat-serve.log live, as serve's (env "
                        "QUIESCE_DATA_DIR; default the config file's, else "
                        "$XDG_DATA_HOME/quiesce)")
    args = parser.parse_args(argv)
    workspace = pathlib.Path(args.workspace).expanduser().resolve()
    if not workspace.is_dir():
        parser.error(f"--workspace: no directory at {workspace}")
    try:
        config_path, raw = read_config_file(args.config)
        config = parse_serve_config(config_path, raw)
    except ConfigError as exc:
        parser.error(str(exc))
    data_dir = pathlib.Path(args.data_dir or config.data_dir or default_data_dir())
    data_dir = data_dir.expanduser().resolve()
    serve_args = ["--data-dir", str(data_dir)]
    if config_path is not None:
        serve_args += ["--config", str(config_path.resolve())]
    has_provider = (args.provider is not None or bool(os.environ.get("QUIESCE_PROVIDER"))
                    or config.provider is not None)
    return ChatOptions(workspace=str(workspace), permission_mode=args.permission_mode,
                       provider=args.provider, log_path=data_dir / LOG_NAME,
                       serve_args=tuple(serve_args), provider_hint=None if has_provider
                       else NO_PROVIDER)


def main(rest: list[str]) -> int:
    options = parse_args(rest)
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        print("quiesce chat needs a terminal (stdin and stdout)", file=sys.stderr)
        return 2
    from runtime.clients.chat.app import run_chat  # the terminal libraries only when needed

    failures: list[ChatError] = []
    try:
        asyncio.run(run_chat(options))
    except* ChatError as group:  # the one place a failure of the chat becomes a message
        failures.extend(e for e in _leaves(group) if isinstance(e, ChatError))
    if failures:  # several tasks may see one cause (the daemon gone): say it once
        print(f"quiesce chat: {failures[0]}", file=sys.stderr)
        return 1
    return 0


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in _leaves(inner)]
    return [exc]
