"""One append-only JSON-lines log per session: the durable transcript.

Appends are single ``os.write`` calls on an ``O_APPEND`` descriptor, done
before the event is announced to the client; ``turn/end`` is also fsynced
before anyone is told the turn ended. A torn last line (a crash mid-write) is
ignored on read and cut off before the log is appended to again.
"""

from __future__ import annotations

import fcntl
import logging
import os
import pathlib
from dataclasses import dataclass

import msgspec
import trio

from protocol.messages.events import (
    DurableEvent,
    SessionMeta,
    ToolCallEvent,
    ToolResultEvent,
    TurnEnd,
    TurnStart,
)

log = logging.getLogger(__name__)

_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(DurableEvent)


def default_data_dir() -> pathlib.Path:
    configured = os.environ.get("QUIESCE_DATA_DIR")
    if configured:
        return pathlib.Path(configured)
    base = os.environ.get("XDG_DATA_HOME") or os.path.expanduser("~/.local/share")
    return pathlib.Path(base) / "quiesce"


@dataclass(frozen=True)
class LogContents:
    events: tuple[DurableEvent, ...]
    torn_bytes: int  # bytes of an unfinished last line, ignored

    @property
    def meta(self) -> SessionMeta:
        first = self.events[0] if self.events else None
        if not isinstance(first, SessionMeta):
            raise ValueError("log does not start with session/meta")
        return first

    def open_turns(self) -> list[TurnStart]:
        """Turns that started and never ended (the runtime died inside them), in start
        order: a subagent's turn and its parent's can both be open."""
        open_: dict[str, TurnStart] = {}
        for event in self.events:
            if isinstance(event, TurnStart):
                open_[event.turn_id] = event
            elif isinstance(event, TurnEnd):
                open_.pop(event.turn_id, None)
        return list(open_.values())

    def unanswered_calls(self, turn_id: str) -> list[ToolCallEvent]:
        calls: dict[str, ToolCallEvent] = {}
        for event in self.events:
            if event.turn_id != turn_id:
                continue
            if isinstance(event, ToolCallEvent):
                calls[event.call_id] = event
            elif isinstance(event, ToolResultEvent):
                calls.pop(event.call_id, None)
        return list(calls.values())


def read_log(path: pathlib.Path) -> LogContents:
    data = path.read_bytes()
    complete, _, torn = data.rpartition(b"\n")
    events: list[DurableEvent] = []
    for number, line in enumerate(complete.split(b"\n") if complete else [], 1):
        if not line.strip():
            continue
        try:
            events.append(_decoder.decode(line))
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise ValueError(f"{path}:{number}: unreadable event: {exc}") from exc
    if not complete and data and not data.endswith(b"\n"):
        torn = data
    return LogContents(tuple(events), len(torn))


class SessionBusy(Exception):
    """Another daemon has this session's log open (and locked)."""


def _lock(fd: int, path: pathlib.Path) -> None:
    """One writer per log: daemons sharing a data directory never append to each other's."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise SessionBusy(f"{path.name} is open in another daemon") from None


def is_live_elsewhere(path: pathlib.Path) -> bool:
    """Whether another process holds the log's lock (its session is open there)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


class SessionLog:
    def __init__(self, path: pathlib.Path, fd: int, next_seq: int) -> None:
        self.path = path
        self._fd = fd
        self._next_seq = next_seq

    @classmethod
    def create(cls, path: pathlib.Path) -> SessionLog:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o600)
        _lock(fd, path)
        return cls(path, fd, 0)

    @classmethod
    def reopen(cls, path: pathlib.Path, contents: LogContents) -> SessionLog:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND)
        _lock(fd, path)
        if contents.torn_bytes:
            size = os.fstat(fd).st_size
            os.ftruncate(fd, size - contents.torn_bytes)
            log.warning("%s: cut off a torn last line of %d bytes", path, contents.torn_bytes)
        next_seq = contents.events[-1].seq + 1 if contents.events else 0
        return cls(path, fd, next_seq)

    def next_seq(self) -> int:
        seq = self._next_seq
        self._next_seq += 1
        return seq

    def append(self, event: DurableEvent) -> None:
        """Write one event; it is in the kernel (survives our crash) when this returns."""
        line = _encoder.encode(event) + b"\n"
        written = os.write(self._fd, line)
        if written != len(line):  # regular files do not short-write short lines in practice
            raise OSError(f"short write to {self.path}: {written} of {len(line)} bytes")

    async def sync(self) -> None:
        """Make everything appended so far durable (survives a machine crash)."""
        await trio.to_thread.run_sync(os.fsync, self._fd)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
