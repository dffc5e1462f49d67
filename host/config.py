"""The host's configuration: tool settings, permission and stop timeouts, tombstones,
admission limits, plugin settings, the environment policy of child processes and the
sandbox (``host.sandbox``)."""

from __future__ import annotations

from dataclasses import dataclass, field

from host.admission import AdmissionLimits
from host.childenv import EnvironmentPolicy
from host.limits import CallLimits
from host.plugins import PluginSettings
from host.tools.context import HostToolConfig
from protocol.sandboxsettings import SandboxSettings


@dataclass(frozen=True)
class HostConfig:
    tools: HostToolConfig = field(default_factory=HostToolConfig)
    permission_timeout: float = 120.0
    stop_timeout: float = 5.0
    """When every call is stopped (EOF, shutdown, signal): seconds beyond the kill grace
    to wait for them before forcing what is left, so the host can exit."""
    tombstone_ttl: float = 60.0
    tombstone_capacity: int = 10_000
    admission: AdmissionLimits = field(default_factory=AdmissionLimits)
    plugins: PluginSettings = field(default_factory=PluginSettings)
    environment: EnvironmentPolicy = field(default_factory=EnvironmentPolicy)
    """What every child process's environment leaves out and adds (``host/childenv.py``)."""
    sandbox: SandboxSettings = field(default_factory=SandboxSettings)
    """The daemon's ``[sandbox]`` table (docs/sandbox.md)."""
    limits: CallLimits = field(default_factory=CallLimits)
    """Per call: processes and memory (``host.limits``)."""
