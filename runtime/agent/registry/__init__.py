"""The tool registry: cancellation signals, the pipeline of one call, the step scheduler.

Public names are re-exported here; see each module for its concept:
``causes`` (why a stop happened), ``signal`` (AbortSignal and trio interop),
``views`` (what each stage may see and change), ``definition`` (``define_tool``),
``policies`` (the pluggable stages), ``pipeline`` (one call), ``lossless`` (its
arguments and result through their JSON form, unchanged), ``outcomes`` (the
classification rules), ``timeout`` (the timeout policy), ``registry`` and
``scheduler`` (one step's calls under a stop).
"""

from runtime.agent.registry.causes import (
    Cause,
    CauseKind,
    DisposedCause,
    HookCause,
    OperatorCause,
    ParentCause,
    TimeoutCause,
    UserCause,
)
from runtime.agent.registry.definition import (
    Body,
    FinalContent,
    JsonObjectArgs,
    StopHandler,
    ToolDefinition,
    define_tool,
)
from runtime.agent.registry.pipeline import Stages, ToolCall
from runtime.agent.registry.policies import (
    Allow,
    Approval,
    ApprovalDecision,
    Ask,
    Delegate,
    Deny,
    DispatchWrapper,
    PolicyDecision,
    PostPolicy,
    PrePolicy,
    ResultObserver,
)
from runtime.agent.registry.registry import ToolRegistry
from runtime.agent.registry.scheduler import DEFAULT_MAX_PARALLEL, Recorder, run_tool_calls
from runtime.agent.registry.signal import (
    AbortController,
    AbortError,
    AbortSignal,
    cancel_on_abort,
    fuse,
    on_abort,
)
from runtime.agent.registry.timeout import TimeoutPolicy
from runtime.agent.registry.views import (
    ToolCallRequest,
    ToolDispatchExecution,
    ToolExecution,
    ToolExecutionInput,
)

__all__ = [
    "DEFAULT_MAX_PARALLEL",
    "AbortController",
    "AbortError",
    "AbortSignal",
    "Allow",
    "Approval",
    "ApprovalDecision",
    "Ask",
    "Body",
    "Cause",
    "CauseKind",
    "Delegate",
    "Deny",
    "DispatchWrapper",
    "DisposedCause",
    "FinalContent",
    "HookCause",
    "JsonObjectArgs",
    "OperatorCause",
    "ParentCause",
    "PolicyDecision",
    "PostPolicy",
    "PrePolicy",
    "Recorder",
    "ResultObserver",
    "Stages",
    "StopHandler",
    "TimeoutCause",
    "TimeoutPolicy",
    "ToolCall",
    "ToolCallRequest",
    "ToolDefinition",
    "ToolDispatchExecution",
    "ToolExecution",
    "ToolExecutionInput",
    "ToolRegistry",
    "UserCause",
    "cancel_on_abort",
    "define_tool",
    "fuse",
    "on_abort",
    "run_tool_calls",
]
