"""Who may use the socket link: every check, in this one module.

- **The token.** 256 bits from ``secrets`` made per start, written to a file only the
  user can read (0600, created exclusively), and printed as a URL whose fragment carries
  it (``http://127.0.0.1:PORT/#token=…``: a browser never sends a fragment). A browser
  presents it as a ``Sec-WebSocket-Protocol`` entry ``quiesce.token.<token>`` (the only
  header a page's WebSocket may set), a native client as ``Authorization: Bearer
  <token>``. Compared with ``hmac.compare_digest`` (constant time).
- **Host** (DNS rebinding): on every request it must name the address we listen on
  (``127.0.0.1:PORT``, ``localhost:PORT``, ``[::1]:PORT``) or a configured name;
  otherwise 421.
- **Origin** (cross-site WebSocket hijacking): absent (a native client), our own
  (``http://<an allowed host>``) or a configured app origin; otherwise 403.
- **No cookies**: none is ever set, and a request's ``Cookie`` header is ignored.
- **Addresses**: a non-loopback listening address is refused unless explicitly allowed.
- **The Unix socket** lives in a directory only the user can enter (0700, ours, not a
  symlink) and is itself 0600; a process a quiesce daemon started (a session's tool,
  hook or plugin: same user, and Landlock below ABI 9 cannot keep it from a pathname
  socket) is refused by its ancestry (``runtime.proc.peers``).

Every refusal is logged (method, target, the reason; never the token) and answered 403 or
421 with no body worth reading.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hmac
import ipaddress
import logging
import os
import pathlib
import secrets
import stat

import trio

from runtime.daemon.ops.pidfile import pid_files
from runtime.daemon.ops.rundir import run_dir
from runtime.proc.peers import refusal, tcp_refusal

log = logging.getLogger(__name__)

TOKEN_BYTES = 32  # 256 bits
SUBPROTOCOL = "quiesce.v1"
"""The WebSocket subprotocol the server selects (a browser requires one it offered)."""
TOKEN_PREFIX = "quiesce.token."
"""A browser offers ``quiesce.v1, quiesce.token.<token>`` in ``Sec-WebSocket-Protocol``."""


class Refused(Exception):
    """A connection or request the checks refuse: ``status`` is 403 or 421."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


class UnsafeAddress(Exception):
    """A listening address the checks refuse (non-loopback without ``allow_remote``)."""


def make_token() -> str:
    return secrets.token_hex(TOKEN_BYTES)


def write_token_file(path: pathlib.Path, token: str) -> None:
    """The token to ``path``, readable by the user only (replaced if it exists)."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        os.write(fd, token.encode() + b"\n")
    finally:
        os.close(fd)


def check_bind_host(host: str, *, allow_remote: bool) -> None:
    """Refuse a non-loopback listening address unless it is explicitly allowed."""
    if host == "localhost":
        return
    try:
        address = ipaddress.ip_address(host)
    except ValueError as exc:
        raise UnsafeAddress(f"listen on an IP address, not {host!r}") from exc
    if not address.is_loopback and not allow_remote:
        raise UnsafeAddress(f"{host} is not a loopback address (--allow-remote to allow it)")


def prepare_unix_dir(socket_path: pathlib.Path) -> None:
    """The socket's directory: made 0700 if missing; else it must be ours, a real
    directory, and enterable by nobody else."""
    directory = socket_path.parent
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    info = os.lstat(directory)
    if not stat.S_ISDIR(info.st_mode):
        raise UnsafeAddress(f"{directory} is not a directory")
    if info.st_uid != os.geteuid():
        raise UnsafeAddress(f"{directory} is not ours")
    if info.st_mode & 0o077:
        raise UnsafeAddress(f"{directory} is open to others (mode {info.st_mode & 0o777:o}); "
                            "it must be 0700")


@dataclasses.dataclass
class Guard:
    """The checks of one listening WebSocket address."""

    token: str
    port: int
    hosts: tuple[str, ...] = ("127.0.0.1", "localhost", "[::1]")
    """Names a request's ``Host`` may give (each with ``:port``)."""
    origins: tuple[str, ...] = ()
    """App origins allowed beside our own (e.g. ``app://renderer``)."""

    def allowed_hosts(self) -> set[str]:
        return {f"{name}:{self.port}".lower() for name in self.hosts}

    def check_host(self, host: str | None) -> None:
        if host is None or host.lower() not in self.allowed_hosts():
            raise Refused(421, f"Host {host!r} is not this server")

    def check_origin(self, origin: str | None) -> None:
        if origin is None:
            return  # a native client: browsers always send one on a WebSocket
        own = {f"http://{host}" for host in self.allowed_hosts()}
        if origin.lower() in own or origin in self.origins:
            return
        raise Refused(403, f"Origin {origin!r} is not allowed")

    def check_token(self, authorization: str | None, protocols: list[str]) -> None:
        presented: list[str] = [p[len(TOKEN_PREFIX):] for p in protocols
                                if p.startswith(TOKEN_PREFIX)]
        if authorization is not None:
            scheme, _, value = authorization.partition(" ")
            if scheme.lower() == "bearer":
                presented.append(value.strip())
        expected = self.token.encode()
        # Each candidate compared whole, in constant time; any one matching lets it in.
        ok = False
        for candidate in presented:
            ok |= hmac.compare_digest(candidate.encode(), expected)
        if not ok:
            raise Refused(403, "no valid token" if presented else "no token")

    def check_request(self, method: str, target: str, headers: dict[str, list[str]],
                      *, websocket: bool) -> None:
        """Every check of one request (``headers`` by lower-case name). A page
        (``websocket`` False) needs no token: it is static and holds none; a WebSocket
        needs everything. Raise :class:`Refused`, logged here."""
        try:
            self.check_host(_one(headers, "host"))
            self.check_origin(_one(headers, "origin"))
            if websocket:
                protocols = [p.strip() for value in headers.get("sec-websocket-protocol", [])
                             for p in value.split(",") if p.strip()]
                self.check_token(_one(headers, "authorization"), protocols)
        except Refused as refused:
            log.warning("socket link: refused %s %s: %d %s", method, target[:200],
                        refused.status, refused.reason)
            raise


def _one(headers: dict[str, list[str]], name: str) -> str | None:
    values = headers.get(name)
    if not values:
        return None
    if len(values) > 1:
        raise Refused(403, f"{len(values)} {name} headers")
    return values[0]


def unix_peer_refusal(sock: trio.socket.SocketType) -> str | None:
    """Why the peer of a ``unix:`` connection is refused (``None``: it may connect): a
    process of this daemon's sessions or of another daemon of the user's run directory."""
    daemons = {os.getpid()}
    with contextlib.suppress(OSError):
        daemons.update(pid for pid, _ in pid_files(run_dir()))
    return refusal(sock, daemons)


async def tcp_peer_refusal(sock: trio.socket.SocketType) -> str | None:
    """Why the peer of a loopback TCP connection is refused (``None``: it may go on to the
    token check): a process a quiesce daemon started, which can read the token file."""
    peer, ours = sock.getpeername(), sock.getsockname()
    if not ipaddress.ip_address(peer[0].split("%")[0]).is_loopback:
        return None
    daemons = {os.getpid()}
    with contextlib.suppress(OSError):
        daemons.update(pid for pid, _ in pid_files(run_dir()))
    return await trio.to_thread.run_sync(tcp_refusal, peer[:2], ours[:2], daemons)
