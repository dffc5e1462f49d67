"""The sandbox's settings (the daemon's ``[sandbox]`` table, handed to the host as
``sandbox`` in its configuration) and what a session may ask for: a narrower mode, never
a wider one."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Mode = Literal["workspace-write", "read-only", "off"]
Network = Literal["off", "on"]

MODES: tuple[Mode, ...] = ("off", "workspace-write", "read-only")
"""From widest to narrowest."""


@dataclass(frozen=True)
class SandboxSettings:
    mode: Mode = "workspace-write"
    """``workspace-write``: reads everywhere, writes beneath the workspace, the session's
    temporary directory, ``/tmp`` (unless ``strict_tmp``) and ``extra_writable``;
    ``read-only``: writes only in the session's temporary directory; ``off``: unconfined."""
    network: Network = "off"
    """``off``: TCP connect and bind refused (Landlock ABI 4); ``on``: as the host's."""
    required: bool = False
    """Refuse sessions (``SANDBOX_UNAVAILABLE``) where the kernel has no Landlock, instead
    of warning and asking permission for every Bash call."""
    strict_tmp: bool = False
    """Leave ``/tmp`` out of the writable roots (the session's temporary directory stays)."""
    extra_writable: tuple[str, ...] | None = None
    """More writable directories (absolute paths), in ``workspace-write`` only."""
    hooks: bool = True
    """Whether hooks run inside the sandbox (its mode, no network)."""
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
                           configured.extra_writable, configured.hooks, configured.protected)
