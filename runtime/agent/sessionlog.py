"""One append-only JSON-lines log per session: the durable transcript.

Appends are ``os.write`` calls on an ``O_APPEND`` descriptor, done before the event
is announced to the client; ``turn/end`` is also fsynced before anyone is told the
turn ended. A torn last line (a crash mid-write) is ignored on read and cut off
before the log is appended to again.

A full or failing disk never tears a record in the middle: an append that fails or
writes short is undone at once, the log cut back (``ftruncate``) to the end of its last
whole record, so what follows starts on a fresh line. If that cut fails too (EIO, a
file system gone read-only), the log is *torn*: every later append first retries the
cut and refuses (raises ``OSError``) while it still fails, so nothing is ever written
after a torn record; a torn record can only be the last line. A failed fsync cuts
nothing: the records are true, only their durability is unconfirmed (and stays so: a
later fsync that succeeds does not prove them, see ``sync``). ``runtime.agent.logfaults`` is
the test-only seam that makes chosen operations fail.
"""

from __future__ import annotations

import errno
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
    TurnStart,
)
from protocol.transcript import Transcript
from runtime.agent import logfaults

log = logging.getLogger(__name__)

_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(DurableEvent)


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
        """Turns that started and never ended (the transcript rulebook's reading)."""
        return Transcript(self.events).open_turns()

    def unanswered_calls(self, turn_id: str) -> list[ToolCallEvent]:
        return Transcript(self.events).unanswered_calls(turn_id)


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


@dataclass(frozen=True)
class Mark:
    """A point of a log to cut back to: the end of a whole record and the next seq."""

    size: int
    next_seq: int


class SessionLog:
    def __init__(self, path: pathlib.Path, fd: int, next_seq: int, size: int = 0) -> None:
        self.path = path
        self._fd = fd
        self._next_seq = next_seq
        self._size = size  # the end of the last whole record
        self._torn = False  # bytes past ``_size`` that a failed cut left behind
        self._cut_errno = errno.EIO  # why the last cut failed

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
        try:
            size = os.fstat(fd).st_size
            if contents.torn_bytes:
                size -= contents.torn_bytes
                os.ftruncate(fd, size)
        except OSError:
            os.close(fd)  # and with it the lock
            raise
        if contents.torn_bytes:
            log.warning("%s: cut off a torn last line of %d bytes", path, contents.torn_bytes)
        next_seq = contents.events[-1].seq + 1 if contents.events else 0
        return cls(path, fd, next_seq, size)

    def next_seq(self) -> int:
        """The seq of the next record (taken by a successful append)."""
        return self._next_seq

    @property
    def mark(self) -> Mark:
        return Mark(self._size, self._next_seq)

    @property
    def torn(self) -> bool:
        """A failed append left bytes that could not be cut yet (appends are refused)."""
        return self._torn

    def append(self, event: DurableEvent) -> None:
        """Write one event; it is in the kernel (survives our crash) when this returns.
        A failure (``OSError``) leaves the log as it was before, or torn (see the module)."""
        line = _encoder.encode(event) + b"\n"
        self._cut_torn_tail()
        try:
            self._write_all(line)
        except OSError as exc:
            log.error("%s: an append failed (%s): cutting the log back to its last whole "
                      "record", self.path, exc.strerror or exc)
            self.rewind(self.mark)
            raise
        self._size += len(line)
        self._next_seq = event.seq + 1

    def _write_all(self, line: bytes) -> None:
        fault = logfaults.injector.check("write")
        if fault is not None:
            os.write(self._fd, line[:len(line) // 2])
            raise fault
        view = memoryview(line)
        while view:  # a short write is followed by one that says why (ENOSPC) or finishes
            written = os.write(self._fd, view)
            if written <= 0:
                raise OSError(errno.EIO, f"write to {self.path} wrote nothing")
            view = view[written:]

    def rewind(self, mark: Mark) -> None:
        """Cut the log back to ``mark`` (a whole record's end at or before the current one).
        If the cut fails the log is torn: said in the daemon's log, and retried by the
        next append, which refuses to write while it still fails."""
        self._size, self._next_seq = mark.size, mark.next_seq
        try:
            # Only ever shorter (EROFS, EIO: often nothing was written); never extended.
            if os.fstat(self._fd).st_size > self._size:
                fault = logfaults.injector.check("truncate")
                if fault is not None:
                    raise fault
                os.ftruncate(self._fd, self._size)
        except OSError as exc:
            self._torn, self._cut_errno = True, exc.errno or errno.EIO
            log.error("%s: could not cut the log back to %d bytes (%s): it refuses appends "
                      "until a cut succeeds", self.path, self._size, exc.strerror or exc)
            return
        self._torn = False

    def _cut_torn_tail(self) -> None:
        if not self._torn:
            return
        self.rewind(self.mark)
        if self._torn:
            raise OSError(self._cut_errno, f"{self.path}: a failed append left a torn record "
                          "that cannot be cut yet; refusing to append after it")
        log.warning("%s: cut the torn record a failed append had left", self.path)

    async def sync(self) -> None:
        """Make everything appended so far durable (survives a machine crash).

        After a failure, nothing appended before it is proven durable any more, whatever
        later fsyncs answer: Linux reports a writeback error once and may drop the pages
        that failed. Said in the daemon's log (docs/operations.md: what to do)."""
        try:
            fault = logfaults.injector.check("fsync")
            if fault is not None:
                raise fault
            await trio.to_thread.run_sync(os.fsync, self._fd)
        except OSError as exc:
            log.error("%s: fsync failed (%s): the records appended so far may not be on "
                      "disk, even if a later fsync succeeds", self.path, exc.strerror or exc)
            raise

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
