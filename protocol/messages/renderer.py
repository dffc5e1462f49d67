"""What the client link adds for desktop renderers on a socket link:
attaching to a running session, and forcing a stop's waiting calls."""

from __future__ import annotations

from protocol.messages.common import Struct


class SessionAttachParams(Struct, frozen=True):
    session_id: str
    after_seq: int = -1
    """Replay the session's durable events with a greater ``seq`` (-1: all of them)."""


class SessionAttachResult(Struct, frozen=True):
    session_id: str
    workspace: str
    last_seq: int
    """The last durable event replayed (live events follow it)."""
    running: bool
    """A turn is running (or queued)."""
    stopping: bool
    """A stop of it is waiting for its calls to settle."""


class AgentForceParams(Struct, frozen=True):
    session_id: str
    call_id: str | None = None
    """One waiting call (its ``tool/call``'s ``callId``); none: every call a stop waits on."""


class ForcedCall(Struct, frozen=True):
    call_id: str
    forced: bool
    detail: str = ""


class AgentForceResult(Struct, frozen=True):
    calls: tuple[ForcedCall, ...]
    """Each call forced (or why not), as ``quiesce ops force`` answers for one."""
