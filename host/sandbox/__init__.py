"""The sandbox every process a tool or a hook starts runs in (docs/sandbox.md): Landlock
bindings (``landlock``), the rulesets (``rulesets``), the confinement applied between fork
and exec (``confine``), a session's sandbox (``session``), what is enforced on this kernel
(``guarantees``) and how a refusal is recognised in a result (``refusal``). Its settings
and modes are ``protocol.sandboxsettings`` and its network namespaces
``runtime.proc.netns``, which the runtime reads too."""

from host.sandbox.session import SessionSandbox
from protocol.sandboxsettings import Mode, Network, SandboxSettings

__all__ = ["Mode", "Network", "SandboxSettings", "SessionSandbox"]
