"""The sandbox's settings (the daemon's ``[sandbox]`` table, handed to the host as
``sandbox`` in its configuration) and what a session may ask for: a narrower mode, never
a wider one."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Mode = Literal["workspace-write", "read-only", "off"]
Network = Literal["off", "on", "proxy"]

MODES: tuple[Mode, ...] = ("off", "workspace-write", "read-only")
"""From widest to narrowest."""


@dataclass(frozen=True)
class SandboxSettings:
    mode: Mode = "workspace-write"
    """``workspace-write``: reads everywhere, writes beneath the workspace, the session's
    temporary directory, ``/tmp`` (unless ``strict_tmp``) and ``extra_writable``;
    ``read-only``: writes only in the session's temporary directory; ``off``: unconfined."""
    network: Network = "off"
    """``off``: a private network namespace (root), else TCP connect and bind refused
    (Landlock ABI 4); ``on``: as the host's; ``proxy``: a private network namespace whose
    only way out is the host's HTTP proxy, admitting ``allow_domains`` (root only)."""
    required: bool = False
    """Refuse sessions (``SANDBOX_UNAVAILABLE``) where the kernel has no Landlock, instead
    of warning and asking permission for every Bash call."""
    strict_tmp: bool = False
    """Leave ``/tmp`` out of the writable roots (the session's temporary directory stays)."""
    extra_writable: tuple[str, ...] | None = None
    """More writable directories (absolute paths), in ``workspace-write`` only."""
    hooks: bool = True
    """Whether hooks run inside the sandbox (its mode, no network)."""
    allow_domains: tuple[str, ...] | None = None
    """With network ``proxy``: the domains the proxy admits (``example.org`` exactly,
    ``*.example.org`` any name below it)."""
    protected: tuple[str, ...] | None = None
    """Directories never writable, even beneath a writable root (a workspace that is the
    user's home): the runtime adds its configuration, data and run directories."""


def narrowed(configured: SandboxSettings, asked: Mode | None,
             network: Network | None = None) -> SandboxSettings:
    """``configured`` narrowed by what a session asked for; a wider ask is refused with
    ``ValueError`` (the caller names it to the client)."""
    mode, net = configured.mode, configured.network
    if asked is not None:
        if MODES.index(asked) < MODES.index(configured.mode):
            raise ValueError(f"sandbox mode {asked!r} is wider than the daemon's "
                             f"{configured.mode!r}")
        mode = asked
    if network is not None:
        if network == "on" and configured.network == "off":
            raise ValueError("sandbox network 'on' is wider than the daemon's 'off'")
        net = network
    return SandboxSettings(mode, net, configured.required, configured.strict_tmp,
                           configured.extra_writable, configured.hooks,
                           configured.allow_domains, configured.protected)


def admits(allow: tuple[str, ...], host: str) -> bool:
    """Whether ``host`` is one of the ``allow`` domains: ``example.org`` exactly, or
    ``*.example.org`` any name below it (not itself); letters' case ignored."""
    host = host.rstrip(".").lower()
    for domain in allow:
        domain = domain.lower()
        if domain.startswith("*.") and host.endswith(domain[1:]) and len(host) > len(domain) - 1:
            return True
        if host == domain:
            return True
    return False


def check(settings: SandboxSettings, private_network: bool, why: str) -> None:
    """A setting that cannot be honoured here: ``ValueError`` naming it (at start-up).
    ``private_network``: whether this host can make a network namespace per session (else
    ``why`` not)."""
    if settings.network != "proxy":
        if settings.allow_domains:
            raise ValueError("sandbox.allow_domains needs sandbox.network = \"proxy\"")
        return
    if not settings.allow_domains:
        raise ValueError("sandbox.network = \"proxy\" needs sandbox.allow_domains")
    for domain in settings.allow_domains:
        name = domain[2:] if domain.startswith("*.") else domain
        if not name or any(c.isspace() or c in "*/:@[]" for c in name):
            raise ValueError(f"sandbox.allow_domains: {domain!r} is not a domain "
                             "(example.org or *.example.org)")
    if settings.mode == "off":
        raise ValueError("sandbox.network = \"proxy\" needs a confined sandbox.mode "
                         "(not \"off\")")
    if not private_network:
        raise ValueError("sandbox.network = \"proxy\" is not offered here: it needs a "
                         f"private network namespace per session, and {why} (a proxy "
                         "port alone is not a boundary)")
