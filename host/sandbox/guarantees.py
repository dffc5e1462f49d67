"""What the sandbox enforces on this kernel, by Landlock ABI, and what it cannot (the table
of docs/sandbox.md): said in the start-up log, ``host.stats`` and ``quiesce ops stats``,
never claimed where the kernel cannot."""

from __future__ import annotations

import logging

from host.sandbox import landlock
from protocol.sandbox import SandboxReport
from protocol.sandboxsettings import SandboxSettings
from runtime.proc import netns

log = logging.getLogger(__name__)


PRIVATE_NETWORK = ("no network: a private network namespace per session, loopback only "
                   "(TCP, UDP and abstract sockets stay inside it)")


PROXY_NETWORK = ("network only through the host's HTTP proxy, admitting allow_domains: a "
                 "private network namespace per session, loopback only")


def report(settings: SandboxSettings, version: int | None = None,
           why: str | None = None, private_network: bool | None = None) -> SandboxReport:
    """The guarantees of ``settings`` at ABI ``version`` (default: this kernel's), with or
    without a private network namespace (default: whether this host can make one)."""
    if version is None:
        version, why = landlock.abi()
    if private_network is None:
        private_network = (settings.network in ("off", "proxy") and settings.mode != "off"
                           and netns.available())
    enforced: list[str] = []
    degraded: list[str] = []
    if version == 0:
        return SandboxReport(
            "none", 0, settings.mode, settings.network,
            (PROXY_NETWORK if settings.network == "proxy" else PRIVATE_NETWORK,)
            if private_network else (),
            ("no Landlock: tool and hook processes are not confined; Bash asks permission "
             "in every mode", "Grep and Glob may read outside the workspace under a "
             "symlink swap race"), why or "no Landlock")
    if settings.mode == "off":
        degraded.append("mode off: tool and hook processes are not confined")
    else:
        enforced += ["writes only beneath the writable roots", "no device nodes",
                     "no ptrace of processes outside the sandbox",
                     "no mount or pivot_root", "no new privileges",
                     "no capabilities (as root: the bounding set emptied)"]
        if version < 2:
            degraded.append("ABI 1: renames and links between directories always refused")
        if version >= 3:
            enforced.append("no truncation outside the writable roots")
        else:
            degraded.append("below ABI 3: truncate(2) outside the writable roots not refused")
        if settings.network == "proxy" and private_network:
            enforced.append(PROXY_NETWORK)
        elif settings.network == "off" and private_network:
            enforced.append(PRIVATE_NETWORK)
        elif settings.network == "off":
            if version >= 4:
                enforced.append("no TCP connect or bind")
            else:
                degraded.append("below ABI 4: TCP not confined (network reachable)")
            degraded.append("UDP not confined (no Landlock rule; no network namespace made)")
        if version >= 6:
            enforced += ["no signals to processes outside the sandbox",
                         "no abstract UNIX sockets outside the sandbox"]
        else:
            degraded.append("below ABI 6: signals and abstract UNIX sockets not confined "
                            "(the host and other sessions can be signalled)")
        if version < 9:
            degraded.append("below ABI 9: pathname UNIX sockets (Docker, D-Bus) reachable")
    enforced.append("ripgrep reads only beneath the workspace")
    return SandboxReport("landlock", version, settings.mode, settings.network,
                         tuple(enforced), tuple(degraded), None)


def log_at_start(settings: SandboxSettings) -> SandboxReport:
    """Say at start-up what the sandbox is here (a warning without Landlock)."""
    found = report(settings)
    if found.unavailable is not None:
        level = logging.ERROR if settings.required else logging.WARNING
        log.log(level, "sandbox: unavailable (%s)%s", found.unavailable,
                "; sandbox.required: sessions are refused" if settings.required
                else "; Bash asks permission in every mode")
    else:
        log.info("sandbox: landlock ABI %d, mode %s, network %s; not enforced here: %s",
                 found.abi, found.mode, found.network, "; ".join(found.degraded) or "none")
    return found
