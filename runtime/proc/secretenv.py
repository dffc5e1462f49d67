"""Which environment variables are secrets no process the daemon starts may inherit: the
names matched by ``SECRET_PATTERNS`` and the provider keys (``PROVIDER_KEYS``, and the
names a configuration's ``apiKeyEnv`` gives), unless ``[environment] include`` passes
them. The host filters every child's environment with it (``host/childenv.py``), and the
runtime the host's own (``host_environment``): the host is the parent of every tool
process, and a Bash call can read ``/proc/<its parent>/environ``. The runtime needs its
keys; it makes itself non-dumpable (``keep_environ_private``), so another process of the
same (non-root) user cannot read its ``/proc/<pid>/environ``.
"""

from __future__ import annotations

import fnmatch
import json
import logging
import os
from collections.abc import Iterable, Mapping, Sequence

log = logging.getLogger(__name__)

SECRET_PATTERNS = ("*KEY*", "*SECRET*", "*TOKEN*", "*PASSWORD*", "*CREDENTIAL*")
"""Names a child never sees unless the configuration includes them."""
PROVIDER_KEYS = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY")
"""The providers' default key variables: never passed, whatever the configuration."""


def matches(name: str, patterns: Iterable[str]) -> bool:
    """Shell-style, case-insensitive."""
    upper = name.upper()
    return any(fnmatch.fnmatchcase(upper, pattern.upper()) for pattern in patterns)


def passes(name: str, *, include: Iterable[str] = (), exclude: Iterable[str] = (),
           hidden: Iterable[str] = ()) -> bool:
    """Whether a variable named ``name`` is passed: never a hidden name (the provider keys
    always among them), else an included one, else one no secret pattern nor ``exclude``
    matches."""
    upper = name.upper()
    if upper in PROVIDER_KEYS or upper in {h.upper() for h in hidden}:
        return False
    if matches(name, include):
        return True
    return not matches(name, (*SECRET_PATTERNS, *exclude))


def _policy(command: Sequence[str]) -> dict[str, list[str]]:
    """The ``environment`` table of the host's ``--config`` in ``command`` (checked by the
    host, which refuses a malformed one: here anything unexpected is no entry)."""
    try:
        config = json.loads(command[list(command).index("--config") + 1])
    except (ValueError, IndexError):
        return {}
    table = config.get("environment") if isinstance(config, dict) else None
    if not isinstance(table, dict):
        return {}
    return {key: [str(p) for p in value] for key in ("include", "exclude", "hidden")
            if isinstance(value := table.get(key), list)}


def host_environment(command: Sequence[str], environ: Mapping[str, str] | None = None
                     ) -> dict[str, str]:
    """The environment the host ``command`` starts with: ``environ`` (ours) without every
    variable none of the host's children may see, by the policy its ``--config`` carries.
    The host needs no secret itself; what its configuration includes it still gets."""
    policy = _policy(command)
    source = os.environ if environ is None else environ
    return {name: value for name, value in source.items() if passes(name, **policy)}




def keep_environ_private() -> bool:
    """Make this process non-dumpable: its ``/proc/<pid>/environ`` (and memory, fds) is
    then readable by root only, not by the tools of the same user it runs, nor can they
    ptrace it. Core dumps are off for it too. A child that execs is dumpable again (the
    host: its environment holds no secret). False where it cannot be done
    (``runtime.proc.hardening``, which logs why)."""
    from runtime.proc.hardening import harden

    return harden(children_without_ptrace=False).not_dumpable
