"""What ``session.list`` (and ``quiesce ops``) shows of the session logs in the data
directory that this daemon has not loaded: ``LogListing``, read off the event loop, each
log read again only once it changed, an unreadable one listed with why, never left out."""

from __future__ import annotations

import logging
import pathlib
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass

import msgspec
import trio

from protocol.messages.client import SessionInfo
from protocol.messages.events import SessionMeta
from runtime.agent.compaction import usage_sum
from runtime.agent.sessionlog import is_live_elsewhere, read_log
from runtime.daemon.sessions.picker import picker_fields

log = logging.getLogger(__name__)

SESSION_ID = re.compile(r"^s-[0-9a-f]{12}$")
"""A session id as its log's name has it."""


@dataclass(frozen=True)
class DiskScan:
    """One scan of the logs: how each log not loaded here shows (``found``), and the logs
    it passed over because their session was loaded then (``loaded``). A session that
    closed during the scan is in neither part of what the caller sees unless it reads
    that log (``LogListing.read``)."""

    found: list[SessionInfo]
    loaded: list[pathlib.Path]


class LogListing:
    def __init__(self, sessions_dir: pathlib.Path, loaded: Callable[[str], bool]) -> None:
        """``sessions_dir``: where the logs are; ``loaded``: whether a session is loaded
        here (then ``session.list`` shows it from the session, not its log)."""
        self.dir = sessions_dir
        self._loaded = loaded
        self._listing: dict[pathlib.Path, tuple[tuple[int, int] | None, SessionInfo]] = {}
        """Each log's listing, by (size, mtime) of the file read (None: an OS error)."""
        # session.list and ops list from worker threads, maybe at once.
        self._listing_lock = threading.Lock()
        self._scan_lock = trio.Lock()  # one scan of the logs on disk at a time
        self._scans = 0
        self._scanned = DiskScan([], [])

    async def scan_disk(self) -> DiskScan:
        """The sessions on disk, read off the event loop (a long log must not hold up
        agent.abort), by a scan that started after this call: lists that wait for the same
        scan share it, so a burst of them (a batch) costs two scans, not a thread each
        (which would take the worker threads and the interpreter lock a stop needs)."""
        wanted = self._scans + 1
        async with self._scan_lock:
            if self._scans < wanted:
                self._scans += 1
                self._scanned = await trio.to_thread.run_sync(self.on_disk)
            return self._scanned

    def on_disk(self) -> DiskScan:
        """Sessions in the data directory that this daemon has not loaded; a log that cannot
        be read is listed with ``error`` saying why, never left out."""
        scan = DiskScan([], [])
        if not self.dir.is_dir():
            return scan
        paths = sorted(self.dir.glob("s-*.jsonl"))
        with self._listing_lock:
            for gone in set(self._listing) - set(paths):  # logs deleted since last listed
                self._listing.pop(gone, None)
            for path in paths:
                session_id = path.stem
                if not SESSION_ID.fullmatch(session_id):
                    continue
                if self._loaded(session_id):
                    scan.loaded.append(path)
                else:
                    scan.found.append(self._listed(path))
        return scan

    def read(self, paths: list[pathlib.Path]) -> list[SessionInfo]:
        """How these logs show (those of sessions closed during a scan)."""
        with self._listing_lock:
            return [self._listed(path) for path in paths]

    def _listed(self, path: pathlib.Path) -> SessionInfo:
        """How ``session.list`` shows a log not loaded here; logs unchanged since they were
        last read (same size and mtime) are not read again, unless that read met an OS
        error (a permission fixed by ``chmod`` changes neither)."""
        try:
            stat = path.stat()
        except OSError as exc:
            return _unreadable(path, exc, None)
        key = (stat.st_size, stat.st_mtime_ns)
        cached = self._listing.get(path)
        if cached is not None and cached[0] == key:
            info = cached[1]
        else:
            try:
                contents = read_log(path)
                meta = contents.meta
            except OSError as exc:  # read again next time: it may clear, the file unchanged
                info = _unreadable(path, exc, stat.st_mtime)
                if cached is None or cached[1].error != info.error:  # said once, not each time
                    log.warning("session log %s is unreadable: %s", path, why(exc))
                self._listing[path] = (None, info)
                return info
            except ValueError as exc:
                log.warning("session log %s is unreadable: %s", path, why(exc))
                info = _unreadable(path, exc, stat.st_mtime)
            else:
                info = SessionInfo(meta.session_id, meta.workspace,
                                   meta.permission_mode,  # type: ignore[arg-type]
                                   meta.created_at, loaded=False,
                                   interrupted=bool(contents.open_turns()),
                                   usage=usage_sum(contents.events),
                                   **picker_fields(contents.events, path))
            self._listing[path] = (key, info)
        # A session open in another daemon is running there, not interrupted.
        if info.interrupted and is_live_elsewhere(path):
            info = msgspec.structs.replace(info, interrupted=False)
        return info


def why(exc: OSError | ValueError) -> str:
    """What an unreadable log's listing (or a refused load) says of why."""
    if isinstance(exc, OSError) and exc.strerror:
        return f"{exc.strerror} ({exc.filename})" if exc.filename else exc.strerror
    return str(exc)


def _unreadable(path: pathlib.Path, exc: OSError | ValueError,
                mtime: float | None) -> SessionInfo:
    """A listing of a log that cannot be read: what its first line says, if it can be
    read, else only its id (workspace empty, no permission mode, created at the file's
    mtime)."""
    meta = _first_meta(path)
    if meta is not None:
        return SessionInfo(path.stem, meta.workspace, meta.permission_mode,  # type: ignore[arg-type]
                           meta.created_at, loaded=False, error=why(exc))
    return SessionInfo(path.stem, "", None, mtime or 0.0, loaded=False, error=why(exc))


def _first_meta(path: pathlib.Path) -> SessionMeta | None:
    try:
        with path.open("rb") as f:
            first = f.readline(1 << 20)
        event = msgspec.json.decode(first, type=SessionMeta)
    except (OSError, msgspec.DecodeError, msgspec.ValidationError):
        return None
    return event
