"""The host link: the runtime talking to its host process (and back)."""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from protocol.causes import Cause, UserCause
from protocol.messages.client import PermissionMode, SandboxMode
from protocol.messages.common import McpServerConfig, PluginServerStatus, Struct
from protocol.sandbox import SandboxPolicy, SandboxReport

CallPhase = Literal["admission", "permission-pending", "running"]  # of a call in flight
CallState = Literal["tombstoned", CallPhase, "settled"]


class SessionOpenParams(Struct, frozen=True):
    """``hiddenEnv``: variables the session's provider configuration names for its key
    (``apiKeyEnv``); no child process the host starts sees them from then on."""

    session_id: str
    workspace: str
    permission_mode: PermissionMode = "ask"
    mcp_servers: tuple[McpServerConfig, ...] = ()
    hidden_env: tuple[str, ...] = ()
    trusted_digest: str | None = None
    """The digest (``sha256:<hex>``) of the workspace's ``.quiesce/mcp.json`` content the
    user trusted: its servers are started only if the host reads that same content (else
    they are listed ``untrusted``). A re-open of an open session with it trusts them."""
    sandbox: SandboxMode | None = None
    """The session's narrower sandbox mode, if it asked for one (never wider than the
    host's configuration: a wider one is refused)."""


class SessionOpenResult(Struct, frozen=True):
    sandbox: SandboxPolicy | None = None
    """The session's sandbox as it is enforced (the Bash specification the model receives
    states it)."""


class ToolsExecuteParams(Struct, frozen=True):
    """``callId`` is the runtime's host call id: ``<turnId>.<callId>`` of the call's
    ``tool/call`` event (``dbg-<n>`` for ``debug.runTool``), unique in the session."""

    session_id: str
    call_id: str
    tool: str
    args: dict[str, Any]
    ask: bool = False
    """A pre-tool-use hook answered ``ask``: the call goes through the permission prompt
    whatever the session's mode and its session-wide answers (a ``deny-session`` still
    denies)."""


class ToolsAbortParams(Struct, frozen=True):
    session_id: str
    call_id: str
    tool: str
    cause: Cause = UserCause()


class ToolsAbortResult(Struct, frozen=True):
    """What the host did with an abort, answered at once (it never waits for the call).

    - ``found`` true, ``state`` ``admission`` / ``permission-pending`` / ``running``: the
      call is in flight; ``state`` is its phase when the *first* abort reached it, and
      ``bodyInvoked`` whether its body had started. Its ``tools.execute`` answers later.
    - ``found`` true, ``state`` ``settled``: the call's result was already sent (the host
      remembers the last 4096 settled calls).
    - ``found`` false, ``state`` ``tombstoned``: the host does not know the call yet (its
      ``tools.execute`` has not arrived): a tombstone is left, see ``tools.abort``.
    """

    found: bool
    state: CallState
    body_invoked: bool = False


class ToolsStartedParams(Struct, frozen=True):
    """A call's body is about to run: its permission was granted (or not needed) and
    it holds an admission slot. Sent at most once per call, immediately before the
    body is invoked (where the host records ``bodyInvoked``), before any of the call's
    ``tools.output``. ``callId`` is the host call id of ``tools.execute``."""

    session_id: str
    call_id: str


class ToolsOutputParams(Struct, frozen=True):
    session_id: str
    call_id: str
    seq: int
    stream: Literal["stdout", "stderr", "progress"]
    text: str


class PermissionRequestParams(Struct, frozen=True):
    """The host's prompt for one call; ``callId`` is the host call id of
    ``tools.execute``. The runtime asks its client with ``ClientPermissionRequestParams``,
    which names the call as its ``tool/call`` event does. ``argsPreview`` is the call's
    whole arguments as JSON; past 256 Ki characters it is cut, ending in
    ``… [N more characters not shown]``."""

    session_id: str
    request_id: str
    call_id: str
    tool: str
    args_preview: str
    risk: Literal["low", "medium", "high"] = "medium"


class PermissionRequestResult(Struct, frozen=True):
    decision: Literal["allow-once", "allow-session", "deny", "deny-session"]


class PermissionWithdrawnParams(Struct, frozen=True):
    session_id: str
    request_id: str


class HostCallInfo(Struct, frozen=True):
    """One call in flight at the host. ``state`` is its phase: ``admission`` (its arguments
    and permission are being evaluated, or it waits for a free slot in the host's
    admission queue), ``permission-pending`` (the user is being asked) or ``running`` (its
    body was invoked)."""

    session_id: str
    call_id: str  # the host call id of tools.execute
    state: CallPhase


class HostStatsResult(Struct, frozen=True):
    calls_in_flight: int
    tombstones: int
    tombstones_expired: int
    tombstones_evicted: int
    admission_waiting: int
    admission_running: int
    calls: tuple[HostCallInfo, ...] = ()  # every call in flight, with its phase
    process_isolation: Literal["cgroup", "process-tree"] = "process-tree"
    """How the host attributes processes to calls: a cgroup v2 per tree, or (where it
    cannot make cgroups) ancestry, session and its own records."""
    sandbox: SandboxReport | None = None
    """What the sandbox enforces on this kernel, and what it cannot (docs/sandbox.md)."""
    call_limits: dict[str, str] = msgspec.field(default_factory=dict)
    """Each per-call resource limit (``processes``, ``memory``) and how this host enforces
    it, in words: ``"1024 processes per call (pids.max)"``, ``"4096 MiB per process
    (RLIMIT_AS)"``, ``"not enforced"``."""


class ToolsForceParams(Struct, frozen=True):
    session_id: str
    call_id: str
    tool: str


class ToolsForceResult(Struct, frozen=True):
    forced: bool
    detail: str = ""


class PluginsListParams(Struct, frozen=True):
    session_id: str


class SessionCloseHostParams(Struct, frozen=True):
    session_id: str


class PluginTool(Struct, frozen=True):
    """A plugin tool as the model sees it: ``mcp__<server>__<tool>``, with the server's
    description and JSON input schema (arguments are validated by the server)."""

    name: str
    server: str
    description: str = ""
    input_schema: dict[str, Any] = msgspec.field(default_factory=dict)


class PluginsListResult(Struct, frozen=True):
    """``workspaceDigest``: the digest of the workspace's ``.quiesce/mcp.json`` as the host
    read it (null without one): what the runtime asks the user to trust when a server of
    it is ``untrusted``."""

    tools: tuple[PluginTool, ...] = ()
    servers: tuple[PluginServerStatus, ...] = ()
    workspace_digest: str | None = None


HookOutcome = Literal["exited", "stopped", "timeout", "failed"]


class HooksRunParams(Struct, frozen=True):
    """Run one hook of the daemon's configuration as a process tree, like Bash: in the
    session's workspace, its own session and cgroup, ``input`` on its stdin, its output
    bounded. ``hookId`` is unique in the session (``<host call id>/<event>/<n>``)."""

    session_id: str
    hook_id: str
    command: tuple[str, ...]
    input: str
    timeout: float
    sandbox: bool = True
    """Run it in the session's sandbox (unless the hook opted out, or the daemon's
    ``sandbox.hooks`` is false)."""


class HooksRunResult(Struct, frozen=True):
    """How the hook's tree ended: ``exited`` (``exitStatus``, or ``signal`` if a signal
    ended it), ``stopped`` by ``hooks.abort``, ``timeout`` (killed at its time limit) or
    ``failed`` to start (``error``). ``stdout`` and ``stderr`` are bounded (head and
    tail kept)."""

    outcome: HookOutcome
    exit_status: int | None = None
    signal: str | None = None
    stdout: str = ""
    stderr: str = ""
    duration_ms: int = 0
    killed_after_grace: int = 0
    error: str = ""


class HooksAbortParams(Struct, frozen=True):
    session_id: str
    hook_id: str


class HooksAbortResult(Struct, frozen=True):
    """Answered at once: whether the hook was running (its ``hooks.run`` answers once its
    tree is gone)."""

    found: bool
