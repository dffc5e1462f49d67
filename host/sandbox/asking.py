"""When a call must ask the user whatever the permission mode: a Bash call that asks to
run unsandboxed (``sandbox: "off"``; always, even after an "allow for the session"), or
any Bash call where the kernel has no Landlock and the sandbox is not ``off`` (until the
user allows Bash for the session)."""

from __future__ import annotations

import logging

from host.sandbox.session import SessionSandbox

log = logging.getLogger(__name__)


def unsandboxed_asked(tool: str, args: object) -> bool:
    """Whether this is a Bash call that asks to run outside the sandbox."""
    return tool == "Bash" and getattr(args, "sandbox", None) == "off"


def must_ask(sandbox: SessionSandbox, tool: str, args: object,
             session_allowed: set[str] | frozenset[str]) -> bool:
    if unsandboxed_asked(tool, args):
        log.warning("a Bash call asks to run outside the sandbox: the user is asked")
        return not sandbox.off
    return (tool == "Bash" and sandbox.abi == 0 and not sandbox.off
            and tool not in session_allowed)
