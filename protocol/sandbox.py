"""What the host's sandbox enforces on its kernel (``host.stats``, ``ops.stats``): the
mechanism, its ABI and every guarantee it cannot give (docs/sandbox.md)."""

from __future__ import annotations

from typing import Literal

from protocol.messages.common import Struct


class SandboxReport(Struct, frozen=True):
    mechanism: Literal["landlock", "none"]
    abi: int
    """The Landlock ABI in use (0: none)."""
    mode: str
    """The daemon's mode: ``workspace-write``, ``read-only`` or ``off``."""
    network: str
    """``off``, ``on`` or ``proxy``."""
    enforced: tuple[str, ...] = ()
    """Each guarantee the kernel enforces here, in a few words."""
    degraded: tuple[str, ...] = ()
    """Each guarantee it cannot give here, in a few words."""
    unavailable: str | None = None
    """Why there is no sandbox at all (no Landlock), if so: Bash then asks permission
    even in mode ``auto``."""


class SandboxPolicy(Struct, frozen=True):
    """One session's sandbox as its tools get it (``session.open``'s answer): the mode as
    the session narrowed it, its network, where it may write; what the Bash
    specification the model receives states (``protocol.toolspecs.bash_description``)."""

    mode: str
    """``workspace-write``, ``read-only`` or ``off``."""
    network: str
    """``off``, ``on`` or ``proxy``."""
    writable: tuple[str, ...] = ()
    """Where a confined process may write (the session's temporary directory as
    ``$TMPDIR``)."""
    allow_domains: tuple[str, ...] = ()
    """With network ``proxy``: the domains the host's proxy admits (exact, or
    ``*.suffix``)."""
    unavailable: str | None = None
    """Why nothing is confined (no Landlock), if so: Bash then asks permission."""
