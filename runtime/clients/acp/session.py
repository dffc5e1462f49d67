"""One ACP session as the server holds it: what translating its events needs, no more.

Its translator (native events to ``session/update``), the prompt in flight, the errors
its failed turns ended with (a prompt that ended ``error`` answers with its turn's), and
its permission mode. Turns, tools and the stop policy are the daemon's.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from runtime.clients.acp.prompts import SeenPrompt
from runtime.clients.acp.translate import Translator


@dataclass
class AcpSession:
    """An ACP session opened (``session/new``) or loaded (``session/load``) on this link."""

    session_id: str
    translator: Translator = field(default_factory=Translator)
    replaying: bool = False
    active: SeenPrompt | None = None
    errors: dict[str, str] = field(default_factory=dict)  # turn id -> why it failed
    mode: str = ""  # its permission mode (session/meta's, then session/set_mode's)
