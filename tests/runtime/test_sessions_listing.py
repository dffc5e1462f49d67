"""``LogListing.on_disk`` (what ``session.list`` shows of logs not loaded here): an OS
error is never cached, and the listing's cache is safe from two threads at once."""

from __future__ import annotations

import errno
import logging
import os
import pathlib
import threading

import pytest

from protocol.messages.events import SessionMeta
from runtime.agent import logfaults
from runtime.agent.sessionlog import LogContents, SessionLog, read_log
from runtime.daemon.sessions import listing as sessions
from runtime.daemon.sessions.listing import LogListing
from runtime.daemon.sessions.store import SessionStore


def stored(tmp_path: pathlib.Path) -> LogListing:
    store = SessionStore(tmp_path)
    log = SessionLog.create(store.dir / "s-0123456789ab.jsonl")
    log.append(SessionMeta(0, "", "s-0123456789ab", str(tmp_path), "auto", 1.0))
    log.close()
    return LogListing(store.dir, loaded=lambda session_id: session_id in store)


def test_an_os_error_is_not_cached_past_its_fix(tmp_path: pathlib.Path,
                                                monkeypatch: pytest.MonkeyPatch,
                                                caplog: pytest.LogCaptureFixture) -> None:
    store = stored(tmp_path)

    def denied(path: pathlib.Path) -> LogContents:  # as before a chmod fixes the file
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))

    monkeypatch.setattr(sessions, "read_log", denied)
    with caplog.at_level(logging.WARNING, logger="runtime.daemon.sessions.listing"):
        (first,) = store.on_disk().found
        store.on_disk()
    assert first.error is not None and "Permission denied" in first.error
    assert caplog.text.count("is unreadable") == 1  # said once, however often listed
    monkeypatch.setattr(sessions, "read_log", read_log)  # fixed: same size and mtime
    (second,) = store.on_disk().found
    assert second.error is None and second.permission_mode == "auto"


def test_listings_from_two_threads_at_once(tmp_path: pathlib.Path) -> None:
    store = stored(tmp_path)
    failures: list[BaseException] = []

    def lister() -> None:
        try:
            for _ in range(200):
                for path in store.dir.glob("s-*.jsonl"):
                    path.touch()  # a new mtime: each listing reads and caches again
                assert [s.error for s in store.on_disk().found] == [None]
        except BaseException as exc:  # noqa: BLE001 -- carried to the test's thread
            failures.append(exc)

    threads = [threading.Thread(target=lister) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert not failures and not any(t.is_alive() for t in threads)


def test_an_active_fault_seam_is_said_at_start(tmp_path: pathlib.Path,
                                               caplog: pytest.LogCaptureFixture) -> None:
    logfaults.configure("fsync:EIO:2")
    try:
        with caplog.at_level(logging.WARNING):
            SessionStore(tmp_path)
    finally:
        logfaults.configure("")
    assert "QUIESCE_LOG_FAULTS is set" in caplog.text and "fsync:EIO:2:1" in caplog.text
    caplog.clear()
    SessionStore(tmp_path)
    assert "QUIESCE_LOG_FAULTS" not in caplog.text
