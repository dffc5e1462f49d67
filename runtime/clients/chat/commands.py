"""What the user asked for: typed lines and keys as commands for the controller.

Pure: :func:`parse_line` turns one submitted line into a command; the key
bindings build the others directly.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Decision = Literal["allow-once", "allow-session", "deny", "deny-session"]
TrustChoice = Literal["trust", "not-now", "never"]

HELP = ("Type a prompt and press Enter (prompts typed while a turn runs are queued). "
        "Esc or Ctrl-C: stop the turn; Ctrl-C twice within a second: quit. "
        "A permission prompt is answered by a line of one letter and Enter: "
        "y allow once, a allow for the session, n deny, d deny for the session. "
        "/stop-keep: stop but keep queued prompts. /sessions (this workspace's; "
        "/sessions all: every one), /load ID, /compact (summarise the older turns; Esc "
        "stops it), /tools (the plugin servers, their state and "
        "tools), /trust, /not-now, /never (answer whether a workspace's servers may run), "
        "/quit, /help.")

CHOOSE_MODEL = ("Choose one with --provider openai (and OPENAI_MODEL, OPENAI_API_KEY), the "
                "QUIESCE_PROVIDER variable, or `provider = \"openai\"` in the config file "
                "(docs/providers.md); --provider scripted:FILE replays a script.")

ANSWERS: dict[str, Decision] = {"y": "allow-once", "a": "allow-session", "n": "deny",
                                "d": "deny-session"}


@dataclass(frozen=True)
class Prompt:
    text: str


@dataclass(frozen=True)
class Stop:
    keep_inbox: bool = False
    via: str = "Esc"


@dataclass(frozen=True)
class Answer:
    request_id: str
    decision: Decision


@dataclass(frozen=True)
class ListSessions:
    every_workspace: bool = False


@dataclass(frozen=True)
class Load:
    session_id: str


@dataclass(frozen=True)
class Compact:
    pass


@dataclass(frozen=True)
class Quit:
    pass


@dataclass(frozen=True)
class TrustAnswer:
    """The answer to the question whether a workspace's declared servers may run."""

    decision: TrustChoice


@dataclass(frozen=True)
class Tools:
    pass


@dataclass(frozen=True)
class Help:
    pass


@dataclass(frozen=True)
class Unknown:
    text: str


@dataclass(frozen=True)
class Usage:
    """A known command used wrongly: what it needs."""

    text: str


Command = (Prompt | Stop | Answer | ListSessions | Load | Quit | Help | Unknown | Usage
           | TrustAnswer | Tools | Compact)
TRUST_COMMANDS: dict[str, TrustChoice] = {"/trust": "trust", "/not-now": "not-now",
                                          "/never": "never"}


def parse_answer(line: str) -> Decision | None:
    """A submitted line as a permission answer: exactly one answer letter, or nothing.

    Only a whole line decides (typed, then Enter): a sentence typed while a prompt
    shows ("wait, do not do that") is never an answer, whatever letters it holds."""
    return ANSWERS.get(line.strip().lower())


def parse_line(line: str) -> Command | None:
    """A submitted line: a prompt, or a slash command. Blank lines are nothing."""
    text = line.strip()
    if not text:
        return None
    if not text.startswith("/"):
        return Prompt(line.rstrip("\n"))
    name, _, rest = text.partition(" ")
    rest = rest.strip()
    if name in ("/quit", "/exit") and not rest:
        return Quit()
    if name == "/stop" and not rest:
        return Stop(via="/stop")
    if name == "/stop-keep" and not rest:
        return Stop(keep_inbox=True, via="/stop-keep")
    if name == "/sessions" and rest in ("", "all"):
        return ListSessions(every_workspace=rest == "all")
    if name == "/load":
        if rest and " " not in rest:
            return Load(rest)
        return Usage("/load needs one session id: /load ID (/sessions lists them)")
    if name == "/help":
        return Help()
    if name in TRUST_COMMANDS and not rest:
        return TrustAnswer(TRUST_COMMANDS[name])
    if name == "/tools" and not rest:
        return Tools()
    if name == "/compact" and not rest:
        return Compact()
    return Unknown(text)
