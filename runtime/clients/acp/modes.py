"""quiesce's permission modes as ACP session modes: offered by ``session/new`` and
``session/load``, switched by ``session/set_mode`` (native ``session.setMode``)."""

from __future__ import annotations

from typing import get_args

from protocol.messages.client import PermissionMode
from runtime.clients.acp.messages import SessionMode, SessionModeState

MODES = (
    SessionMode("ask", "Ask", "Ask before file edits and commands (reads never ask)."),
    SessionMode("accept-edits", "Accept edits",
                "Edit files in the workspace without asking; ask before commands."),
    SessionMode("auto", "Auto", "Run every tool without asking."),
)
assert tuple(m.id for m in MODES) == get_args(PermissionMode)


def mode_state(current: str) -> SessionModeState:
    return SessionModeState(current, MODES)


def permission_mode(mode_id: str) -> PermissionMode | None:
    """The native mode an ACP mode id names; None for an unknown id."""
    for mode in get_args(PermissionMode):
        if mode == mode_id:
            return mode  # type: ignore[no-any-return]
    return None
