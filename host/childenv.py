"""The environment every child process of the host starts from (tools, ``rg``, the image
backend, hooks, plugin servers): the host's own, without the secrets in it.

Default: every variable of the host's environment except those whose names match one
of ``SECRET_PATTERNS`` (shell-style, case-insensitive: ``*KEY*``, ``*SECRET*``, ...),
and never a variable a provider configuration names for its key (``apiKeyEnv``, and the
providers' defaults ``OPENAI_API_KEY`` and ``ANTHROPIC_API_KEY``). The daemon's
``[environment]`` table changes it (``EnvironmentPolicy``): ``include`` passes names a
pattern would drop (never a provider key), ``exclude`` drops more, ``set`` sets
variables in every child. A session whose provider names its own key variable tells
the host at ``session.open`` (``hiddenEnv``); from then on no child of any session sees
it (dropping more never harms). A child's own additions (the process marker, a plugin
server's declared ``env``) come on top, as given.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping

from protocol.hostconfig import EnvironmentPolicy
from runtime.proc.secretenv import PROVIDER_KEYS, SECRET_PATTERNS, passes

__all__ = ["PROVIDER_KEYS", "SECRET_PATTERNS", "ChildEnvironment", "EnvironmentPolicy",
           "child_environment", "configure", "hide"]


class ChildEnvironment:
    """A policy and the provider keys learnt since: what a child's environment is."""

    def __init__(self, policy: EnvironmentPolicy) -> None:
        self.policy = policy
        self._hidden = {name.upper() for name in (*PROVIDER_KEYS, *policy.hidden)}

    def hide(self, names: Iterable[str]) -> None:
        """Never pass these names again (a session's provider keys)."""
        self._hidden.update(name.upper() for name in names)

    def passes(self, name: str) -> bool:
        return passes(name, include=self.policy.include, exclude=self.policy.exclude,
                      hidden=self._hidden)

    def build(self, base: Mapping[str, str], extra: Mapping[str, str] | None = None
              ) -> dict[str, str]:
        """``base`` filtered, then the policy's ``set``, then ``extra`` as given."""
        env = {name: value for name, value in base.items() if self.passes(name)}
        env.update(self.policy.set)
        env.update(extra or {})
        return env


_current = [ChildEnvironment(EnvironmentPolicy())]


def configure(policy: EnvironmentPolicy) -> ChildEnvironment:
    """Set the host's policy (at start, from its configuration)."""
    _current[0] = ChildEnvironment(policy)
    return _current[0]


def hide(names: Iterable[str]) -> None:
    _current[0].hide(names)


def child_environment(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment a child of the host starts with: the host's own, filtered."""
    return _current[0].build(os.environ, extra)
