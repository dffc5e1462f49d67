"""Host tools as registry definitions: one ``HostCall`` per call, and the routing of the
host's notifications to the call they are about.

Each built-in tool and each plugin tool (``mcp__<server>__<tool>``, listed by the host's
``plugins.list``) is defined with the same body: make the call's ``HostCall``
(``hostcall.py``: its execute, its stop, its class's stop policy), keep it by its host call
id while it runs (for ``tools.output``/``tools.started`` and for operators), and execute
it. Plugin tools take free-form JSON arguments (``JsonObjectArgs``, validated by the
plugin server) and the server's own input schema for the model.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import msgspec

from protocol import ids
from protocol.messages.host import PluginTool, ToolsOutputParams, ToolsStartedParams
from protocol.sandbox import SandboxPolicy
from protocol.toolclass import TOOL_CLASSES, ToolClass
from protocol.tools import TOOL_ARGS, ToolResult
from protocol.toolspecs import TOOL_SPECS, bash_description
from runtime.agent.hostcall import (
    DEFAULT_PROCESS_GRACE,
    AbortSink,
    CallContext,
    HostCall,
    InFlightCall,
)
from runtime.agent.hostport import HostPort
from runtime.agent.registry import JsonObjectArgs, ToolDefinition, ToolExecution, define_tool

__all__ = ["DEFAULT_PROCESS_GRACE", "HostTools"]

log = logging.getLogger(__name__)

ProgressSink = Callable[[str, str, str], None]  # (call id, stream, text)
StartedSink = Callable[[str], None]  # (call id): the host started the call's body


class HostTools:
    """The host tools of one session's turn, and the routing of their progress."""

    def __init__(self, host: HostPort, session_id: str, turn_id: str, *,
                 on_progress: ProgressSink, on_abort: AbortSink,
                 process_grace: float = DEFAULT_PROCESS_GRACE,
                 plugin_tools: tuple[PluginTool, ...] = (),
                 on_started: StartedSink | None = None,
                 asked: Callable[[str], bool] | None = None,
                 sandbox: SandboxPolicy | None = None,
                 on_calls: Callable[[], None] | None = None) -> None:
        self._sandbox = sandbox  # the session's, stated in Bash's description
        # Told when a call is made, moves in its state table or ends (stop/waiting).
        self._on_calls = on_calls
        self._context = CallContext(host, session_id, process_grace, on_abort,
                                    self._calls_changed, asked)
        self._on_started = on_started
        self._turn_id = turn_id
        self._on_progress = on_progress
        self._calls: dict[str, HostCall] = {}  # by host call id
        self._plugin_tools = plugin_tools

    def definitions(self) -> list[ToolDefinition[Any]]:
        builtin: list[ToolDefinition[Any]] = [
            define_tool(name, args=args_type, tool_class=TOOL_CLASSES[name], body=self._body,
                        description=(bash_description(self._sandbox) if name == "Bash"
                                     else TOOL_SPECS[name].description),
                        input_schema=TOOL_SPECS[name].input_schema())
            for name, args_type in TOOL_ARGS.items()
        ]
        plugins: list[ToolDefinition[Any]] = [
            define_tool(tool.name, args=JsonObjectArgs, tool_class=ToolClass.PLUGIN,
                        body=self._body, description=tool.description,
                        input_schema=tool.input_schema)
            for tool in self._plugin_tools
        ]
        return builtin + plugins

    def in_flight(self) -> list[InFlightCall]:
        """Every call waiting on the host (running, aborting or draining)."""
        now = time.monotonic()
        return [call.view(now) for call in self._calls.values() if not call.abandoned]

    def find(self, call_id: str) -> InFlightCall | None:
        """The call of this model call id waiting on the host, if any."""
        call = self._calls.get(self.host_call_id(call_id))
        return None if call is None or call.abandoned else call.view(time.monotonic())

    def host_call_id(self, call_id: str) -> str:
        # Unique per turn, so a late abort or tombstone can never meet a later turn's call.
        return ids.host_call_id(self._turn_id, call_id)

    def on_output(self, params: ToolsOutputParams | ToolsStartedParams) -> bool:
        """Route a ``tools.output`` or ``tools.started`` notification; False if the call is
        not (or no longer) ours."""
        call = self._calls.get(params.call_id)
        if call is None or call.abandoned:
            return False
        if isinstance(params, ToolsStartedParams):
            if self._on_started is not None:
                self._on_started(call.call_id)
            return True
        call.progress.append(params.text)
        self._on_progress(call.call_id, params.stream, params.text)
        return True

    async def _body(self, args: msgspec.Struct, execution: ToolExecution) -> ToolResult:
        call = HostCall(self._context, execution.call_id, self.host_call_id(execution.call_id),
                        execution.tool, execution.tool_class)
        self._calls[call.host_call_id] = call
        self._calls_changed()
        try:
            return await call.execute(args, execution.signal)
        finally:
            del self._calls[call.host_call_id]
            self._calls_changed()

    def _calls_changed(self) -> None:
        if self._on_calls is not None:
            self._on_calls()
