"""Workspace trust: nothing a workspace declares runs before the user trusted that exact
content (DESIGN.md, "Consent and secrets"; docs/plugins.md, "Workspace trust").

Today the one declaring file is ``.quiesce/mcp.json``. The host reads it, never starts a
server of it unless told the digest of the content it read is trusted
(``SessionOpenParams.trustedDigest``), and lists those servers ``untrusted`` with their
commands (``PluginsListResult.workspaceDigest``). Here the runtime decides, when a
session opens: a workspace the daemon was told to trust up front (``--trust-workspace``,
``trusted_workspaces``) is trusted whatever its content; else the answer kept in the
trust store for (the workspace's real path, the digest); else the client is asked
(``workspace.trust``) and its ``trust`` or ``never`` is kept. A client that cannot
answer (an error) or does not within the trust timeout: ``not-now``, nothing runs.

The store is ``trust.json`` in the daemon's data directory (outside every workspace),
written whole to a temporary file and renamed, mode 0600. A store another user owns, or
that group or others may write, is not believed (nothing is trusted from it; the next
answer kept replaces it with the user's own).
"""

from __future__ import annotations

import json
import logging
import os
import pathlib
from collections.abc import Callable, Iterable

import trio

from protocol.errors import RemoteError
from protocol.messages.client import TrustDecision, WorkspaceTrustParams, WorkspaceTrustResult
from protocol.messages.host import PluginsListResult
from runtime.link import ConnectionClosed, Endpoint, NotSent

log = logging.getLogger(__name__)

DECLARING_FILE = ".quiesce/mcp.json"
DEFAULT_TRUST_TIMEOUT = 60.0
STORE_NAME = "trust.json"

Stored = dict[str, dict[str, str]]  # real workspace path -> digest -> "trust" | "never"


class TrustStore:
    """The answers kept: which content of which workspace is trusted, or never to run."""

    def __init__(self, data_dir: pathlib.Path) -> None:
        self.path = data_dir / STORE_NAME

    def _read(self) -> Stored:
        try:
            with open(self.path, "rb") as file:
                owner = os.fstat(file.fileno())
                text = file.read()
        except FileNotFoundError:
            return {}
        except OSError as exc:
            log.warning("trust store %s unreadable (%s): nothing is trusted from it",
                        self.path, exc)
            return {}
        if owner.st_uid != os.geteuid() or owner.st_mode & 0o022:
            # Someone else wrote it, or could have: its answers are not the user's.
            log.warning("trust store %s is %s: nothing is trusted from it", self.path,
                        "not the user's" if owner.st_uid != os.geteuid()
                        else "writable by others")
            return {}
        try:
            raw = json.loads(text.decode("utf-8"))
        except ValueError as exc:  # UnicodeDecodeError is one
            log.warning("trust store %s unreadable (%s): nothing is trusted from it",
                        self.path, exc)
            return {}
        if not isinstance(raw, dict):
            return {}
        return {ws: {d: str(a) for d, a in entries.items()}
                for ws, entries in raw.items() if isinstance(entries, dict)}

    def get(self, workspace: str, digest: str) -> str | None:
        return self._read().get(workspace, {}).get(digest)

    def put(self, workspace: str, digest: str, answer: TrustDecision) -> None:
        stored = self._read()
        stored.setdefault(workspace, {})[digest] = answer
        self.path.parent.mkdir(parents=True, exist_ok=True)
        temporary = self.path.with_name(f".{STORE_NAME}.{os.getpid()}")
        # Never through a symlink planted under the temporary's name.
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        replaced = False
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as file:
                json.dump(stored, file, indent=1, sort_keys=True)
                file.flush()
                os.fsync(file.fileno())
            os.replace(temporary, self.path)
            replaced = True
        finally:
            if not replaced:  # the store is unchanged; nothing left over
                temporary.unlink(missing_ok=True)


class WorkspaceTrust:
    """The runtime's decision for one session's workspace declarations."""

    def __init__(self, store: TrustStore, *, trusted_workspaces: Iterable[str] = (),
                 timeout: float = DEFAULT_TRUST_TIMEOUT,
                 client: Callable[[], Endpoint | None] = lambda: None) -> None:
        self.store = store
        self.trusted_workspaces = frozenset(os.path.realpath(w) for w in trusted_workspaces)
        self.timeout = timeout
        self._client = client

    async def decide(self, session_id: str, workspace: str, listed: PluginsListResult
                     ) -> str | None:
        """The digest now trusted for the session's workspace file, or None (nothing
        untrusted to decide, or not trusted)."""
        untrusted = tuple(s for s in listed.servers if s.state == "untrusted")
        digest = listed.workspace_digest
        if not untrusted or digest is None:
            return None
        real = workspace  # the session's workspace is its real path (SessionStore.create)
        if real in self.trusted_workspaces:
            log.info("session %s: %s trusted by the daemon's configuration", session_id, real)
            return digest
        kept = await trio.to_thread.run_sync(self.store.get, real, digest)
        if kept == "trust":
            return digest
        if kept == "never":
            log.info("session %s: %s/%s was refused for ever: not started", session_id,
                     real, DECLARING_FILE)
            return None
        decision = await self._ask(WorkspaceTrustParams(session_id, real, DECLARING_FILE,
                                                        digest, untrusted))
        log.info("session %s: %s/%s (%s): %s", session_id, real, DECLARING_FILE, digest,
                 decision)
        if decision != "not-now":
            try:
                await trio.to_thread.run_sync(self.store.put, real, digest, decision)
            except OSError as exc:  # still this session's answer; asked again next time
                log.warning("trust store %s not written: %s", self.store.path, exc)
        return digest if decision == "trust" else None

    async def _ask(self, params: WorkspaceTrustParams) -> TrustDecision:
        client = self._client()
        if client is None:
            return "not-now"
        with trio.move_on_after(self.timeout):
            try:
                answer: WorkspaceTrustResult = await client.request("workspace.trust", params)
                return answer.decision
            except RemoteError as exc:
                log.info("session %s: the client cannot answer workspace.trust (%s)",
                         params.session_id, exc)
                return "not-now"
            except (ConnectionClosed, NotSent):
                return "not-now"
        log.info("session %s: no answer to workspace.trust within %g s", params.session_id,
                 self.timeout)
        return "not-now"
