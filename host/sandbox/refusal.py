"""Recognising a sandbox refusal in a finished call's output, so the model and the user
are told (``details.sandbox`` and one line of text) instead of guessing.

A heuristic by design: a confined call that failed (or printed an error) with the errors
the kernel gives a refused operation (``EACCES`` "Permission denied", ``EPERM``
"Operation not permitted", ``EROFS``, an unreachable network). It says "may have been":
the same errors have other causes.
"""

from __future__ import annotations

import re

from host.sandbox.proxy import REFUSED_MARK
from host.sandbox.session import SessionSandbox

_REFUSED = re.compile(
    r"Permission denied|Operation not permitted|Read-only file system|EACCES|EPERM|EROFS"
    r"|Network is unreachable|ENETUNREACH", re.IGNORECASE)
_PROXY_NAMED = re.compile(re.escape(REFUSED_MARK) + r": (\S+) is not")
_PROXY = re.compile(r"tunnel connection failed: 403|CONNECT tunnel failed, response 403",
                    re.IGNORECASE)


def refusal(sandbox: SessionSandbox, output: str, failed: bool
            ) -> tuple[dict[str, object], str] | None:
    """``(details.sandbox, line of text)`` when ``output`` looks like a refusal (the
    proxy's names itself: recognised even where the command did not fail)."""
    proxied = (_PROXY_NAMED.search(output) or _PROXY.search(output)
               if sandbox.proxy is not None else None)
    if proxied is None and (not failed or _REFUSED.search(output) is None):
        return None
    writable = sandbox.writable_roots()
    network = sandbox.settings.network
    details: dict[str, object] = {"likelyRefusal": True, "mode": sandbox.settings.mode,
                                  "writable": writable, "network": network}
    if proxied is not None:
        domain = proxied.group(1) if proxied.re is _PROXY_NAMED else None
        allowed = ", ".join(sandbox.proxy.allow) if sandbox.proxy is not None else ""
        details["proxyRefused"] = domain or True
        return details, (f"[sandbox: the network proxy refused "
                         f"{domain or 'a domain'}: only {allowed} are allowed. If the task "
                         "needs it, call Bash again with sandbox: \"off\" (the user is "
                         "asked).]")
    line = (f"[sandbox: this may have been refused by the sandbox (mode "
            f"{sandbox.settings.mode}: writes only beneath {', '.join(writable)}; network "
            f"{network}). If the task needs more, call Bash again with sandbox: \"off\" "
            "(the user is asked).]")
    return details, line
