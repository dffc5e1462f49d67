"""Recognising a sandbox refusal in a finished call's output, so the model and the user
are told (``details.sandbox`` and one line of text) instead of guessing.

A heuristic by design: a confined call that failed (or printed an error) with the errors
the kernel gives a refused operation (``EACCES`` "Permission denied", ``EPERM``
"Operation not permitted", ``EROFS``, an unreachable network). It says "may have been":
the same errors have other causes.
"""

from __future__ import annotations

import re

from host.sandbox.session import SessionSandbox

_REFUSED = re.compile(
    r"Permission denied|Operation not permitted|Read-only file system|EACCES|EPERM|EROFS"
    r"|Network is unreachable|ENETUNREACH", re.IGNORECASE)


def refusal(sandbox: SessionSandbox, output: str, failed: bool
            ) -> tuple[dict[str, object], str] | None:
    """``(details.sandbox, line of text)`` when ``output`` looks like a refusal."""
    if not failed or _REFUSED.search(output) is None:
        return None
    writable = sandbox.writable_roots()
    network = sandbox.settings.network
    details: dict[str, object] = {"likelyRefusal": True, "mode": sandbox.settings.mode,
                                  "writable": writable, "network": network}
    line = (f"[sandbox: this may have been refused by the sandbox (mode "
            f"{sandbox.settings.mode}: writes only beneath {', '.join(writable)}; network "
            f"{network}). If the task needs more, call Bash again with sandbox: \"off\" "
            "(the user is asked).]")
    return details, line
