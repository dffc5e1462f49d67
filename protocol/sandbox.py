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
    """``off`` or ``on``."""
    enforced: tuple[str, ...] = ()
    """Each guarantee the kernel enforces here, in a few words."""
    degraded: tuple[str, ...] = ()
    """Each guarantee it cannot give here, in a few words."""
    unavailable: str | None = None
    """Why there is no sandbox at all (no Landlock), if so: Bash then asks permission
    even in mode ``auto``."""
