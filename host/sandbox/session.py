"""A session's sandbox: its settings, its temporary directory (made and removed by the
host; ``TMPDIR`` and the usual caches point there) and its rulesets, built once and
duplicated for every confined spawn."""

from __future__ import annotations

import dataclasses
import logging
import os
import shutil
import tempfile
import threading

from host.sandbox import landlock, rulesets
from host.sandbox.confine import Confinement
from host.sandbox.proxy import SessionProxy
from protocol.sandbox import SandboxPolicy
from protocol.sandboxsettings import SandboxSettings
from runtime.proc import netns

log = logging.getLogger(__name__)

_BASE: list[str] = []
_BASE_LOCK = threading.Lock()


PREFIX = "quiesce-sandbox-"


def base_dir() -> str:
    """This host's directory of session temporary directories (0700), made once (then
    those of dead hosts, killed before they could remove theirs, are removed)."""
    with _BASE_LOCK:
        if not _BASE:
            _BASE.append(tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-"))
            _remove_stale(os.path.dirname(_BASE[0]))
        return _BASE[0]


def _remove_stale(parent: str) -> None:
    """``quiesce-sandbox-<pid>-*`` directories of ours whose host is gone."""
    try:
        names = os.listdir(parent)
    except OSError:
        return
    for name in names:
        pid = name[len(PREFIX):].split("-", 1)[0]
        if not name.startswith(PREFIX) or not pid.isdigit():
            continue
        path = os.path.join(parent, name)
        try:
            os.kill(int(pid), 0)
            continue  # its host (or a process that reused its pid) is alive
        except ProcessLookupError:
            pass
        except PermissionError:
            continue
        try:
            if os.lstat(path).st_uid != os.getuid():
                continue
        except OSError:
            continue
        log.info("removing a dead host's sandbox directory %s", path)
        shutil.rmtree(path, ignore_errors=True)


def remove_base() -> None:
    """Remove every session's temporary directory (the host is leaving)."""
    with _BASE_LOCK:
        if _BASE:
            shutil.rmtree(_BASE.pop(), ignore_errors=True)


class SessionSandbox:
    def __init__(self, settings: SandboxSettings, workspace: str, session_id: str) -> None:
        self.settings = settings
        self.workspace = workspace
        self.abi = landlock.abi()[0]
        self._session_key = "".join(c if c.isalnum() else "_" for c in session_id)[:64]
        self._tmpdir: str | None = None
        self._rulesets: dict[str, int] = {}
        self._netns: int | None = None
        self._netns_tried = False
        self._lock = threading.Lock()
        self._closed = False
        self.proxy: SessionProxy | None = (
            SessionProxy(tuple(settings.allow_domains or ()), self.namespace)
            if settings.network == "proxy" and settings.mode != "off" else None)
        """With network ``proxy``: the session's proxy (run by the host's session table,
        in a host nursery, until ``stop_network``)."""

    @property
    def off(self) -> bool:
        return self.settings.mode == "off"

    def tmpdir(self) -> str:
        """The session's temporary directory, made on first use (on the spawner thread)."""
        with self._lock:
            if self._tmpdir is None:
                self._tmpdir = tempfile.mkdtemp(prefix=f"{self._session_key}-", dir=base_dir())
            return self._tmpdir

    def writable_roots(self) -> list[str]:
        """Where a confined tool may write (its mode's roots; the temporary directory as
        ``$TMPDIR``)."""
        return [("$TMPDIR" if root == self._tmpdir else root) for root in
                rulesets.writable_roots(self.settings, self.workspace, self._tmpdir or "")]

    def policy(self) -> SandboxPolicy:
        """The session's sandbox as its tools get it (what the model is told)."""
        version, why = landlock.abi()
        writable = [("$TMPDIR" if not root else root) for root in
                    rulesets.writable_roots(self.settings, self.workspace, "")]
        return SandboxPolicy(self.settings.mode, self.settings.network, tuple(writable),
                             tuple(self.settings.allow_domains or ()),
                             why or "no Landlock" if version == 0 else None)

    async def network_ready(self) -> None:
        """Before a confined spawn: the session's proxy listens (network ``proxy``)."""
        if self.proxy is not None:
            await self.proxy.ready()

    def stop_network(self) -> None:
        """End the session's proxy and its connections (on the trio thread)."""
        if self.proxy is not None:
            self.proxy.close()

    def env(self) -> dict[str, str]:
        """What a confined process's environment gains: its temporary directory and caches,
        and the session's proxy (network ``proxy``, once it listens)."""
        tmp = self.tmpdir()
        env = {"TMPDIR": tmp, "TMP": tmp, "TEMP": tmp,
               "XDG_CACHE_HOME": os.path.join(tmp, "cache"),
               "npm_config_cache": os.path.join(tmp, "npm"),
               "PIP_CACHE_DIR": os.path.join(tmp, "pip")}
        if self.proxy is not None and self.proxy.port is not None:
            url = f"http://127.0.0.1:{self.proxy.port}"
            for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"):
                env[name] = url
            env["NO_PROXY"] = env["no_proxy"] = "localhost,127.0.0.1,::1"
        return env

    def namespace(self) -> int | None:
        """A descriptor of the session's private network namespace (made if need be; the
        caller closes it), or ``None``. Blocking: on a thread."""
        with self._lock:
            if self._closed:
                raise OSError("the session's sandbox is closed")
            return self._private_network()

    def _private_network(self) -> int | None:
        """The session's network namespace (made once, if the network is off and the host
        can), duplicated for a spawn; call with the lock held."""
        if self.settings.network in ("off", "proxy") and not self._netns_tried:
            self._netns_tried = True
            try:
                self._netns = netns.make()
            except OSError as exc:
                log.warning("session without a private network namespace: %s", exc)
        return os.dup(self._netns) if self._netns is not None else None

    def _ruleset(self, kind: str, rg_binary: str | None) -> int | None:
        if self.abi == 0:
            return None
        with self._lock:
            if self._closed:
                raise OSError("the session's sandbox is closed")
            fd = self._rulesets.get(kind)
            if fd is None:
                if kind == "search":
                    assert rg_binary is not None
                    fd = rulesets.search_ruleset(self.workspace, rg_binary, self.abi)
                else:
                    tmp = self._tmpdir
                    assert tmp is not None
                    # A private network namespace is the boundary where there is one:
                    # TCP stays allowed inside it (a test's local server works).
                    settings = (dataclasses.replace(self.settings, network="on")
                                if kind == "plugin" or self._netns is not None
                                else self.settings)
                    fd = rulesets.tool_ruleset(settings, self.workspace, tmp, self.abi)
                self._rulesets[kind] = fd
            return os.dup(fd)

    def confine_tool(self) -> Confinement | None:
        """A Bash / image / hook process's confinement (``None``: mode ``off``). On the
        spawner thread."""
        if self.off:
            return None
        self.tmpdir()
        with self._lock:
            private = self._private_network()
        try:
            return Confinement(self._ruleset("tool", None), private)
        except BaseException:
            if private is not None:
                os.close(private)
            raise

    def confine_plugin(self) -> Confinement | None:
        """A plugin (MCP) server's: the session's mode with the network on (a plugin
        server usually talks to a service). On the spawner thread."""
        if self.off:
            return None
        self.tmpdir()
        return Confinement(self._ruleset("plugin", None))

    def confine_search(self, rg_binary: str) -> Confinement:
        """ripgrep's, whatever the mode. On the spawner thread."""
        return Confinement(self._ruleset("search", rg_binary))

    def close(self) -> None:
        """Close the rulesets and remove the temporary directory (blocking: a thread)."""
        with self._lock:
            self._closed = True
            for fd in self._rulesets.values():
                os.close(fd)
            self._rulesets.clear()
            if self._netns is not None:
                os.close(self._netns)
                self._netns = None
            tmp, self._tmpdir = self._tmpdir, None
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
