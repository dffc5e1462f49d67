"""Each session's host tools, made per turn: the registry a turn runs its calls through,
their start, progress and abort events in the session's journal, on the turn's hold on a
host (``Session.lease_for``), and the host's tool output routed back to the agent listening
for it."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from protocol.messages.events import ToolAbortEvent, ToolProgressEvent, ToolStartedEvent
from protocol.messages.host import ToolsAbortResult, ToolsOutputParams, ToolsStartedParams
from runtime.agent.agent import CallNotice, ToolsFactory
from runtime.agent.hooks.config import HookConfig
from runtime.agent.hooks.stages import TurnHooks
from runtime.agent.hosttools import HostTools
from runtime.agent.registry import ToolRegistry
from runtime.daemon.sessions.session import Session
from runtime.daemon.sessions.store import SessionStore
from runtime.supervision.lease import HostLease

log = logging.getLogger(__name__)


class SessionTools:
    def __init__(self, sessions: SessionStore, *,
                 process_grace: float, hooks: HookConfig | None = None) -> None:
        self._sessions = sessions
        self.process_grace = process_grace
        self._hooks = hooks if hooks is not None and not hooks.empty else None

    def factory(self, session_id: str) -> ToolsFactory:
        def make(turn_id: str) -> tuple[ToolRegistry, list[Any],
                                        Callable[[CallNotice], bool]]:
            session = self._sessions.get(session_id)
            journal = session.agent.journal

            def on_progress(call_id: str, stream: str, text: str) -> None:
                journal.announce(lambda seq: ToolProgressEvent(seq, turn_id, call_id, stream,
                                                               text))

            def on_started(call_id: str) -> None:
                journal.announce(lambda seq: ToolStartedEvent(seq, turn_id, call_id))

            def on_abort(call_id: str, tool: str, answer: ToolsAbortResult) -> None:
                journal.announce(lambda seq: ToolAbortEvent(seq, turn_id, call_id, tool,
                                                            answer.state, answer.body_invoked))

            lease = session.lease_for(turn_id)
            hooks = self._turn_hooks(session, turn_id, lease)
            tools = HostTools(lease, session_id, turn_id,
                              on_progress=on_progress, on_started=on_started,
                              on_abort=on_abort, process_grace=self.process_grace,
                              plugin_tools=session.plugin_tools,
                              sandbox=session.sandbox_policy,
                              asked=hooks.asked if hooks is not None else None,
                              on_calls=session.waiting.changed)
            definitions = tools.definitions()
            session.ops.track_tools(turn_id, tools)
            stages = hooks.stages() if hooks is not None else {}
            return ToolRegistry(definitions, **stages), definitions, tools.on_output

        return make

    def _turn_hooks(self, session: Session, turn_id: str, lease: HostLease) -> TurnHooks | None:
        """The daemon's hooks as this turn's registry stages (none configured: None)."""
        if self._hooks is None:
            return None
        hooks = TurnHooks(self._hooks, lease, session_id=session.session_id, turn_id=turn_id,
                          workspace=session.workspace, record=session.agent.journal.append,
                          stop_turn=session.agent.stop_from_within, grace=self.process_grace)
        session.ops.track_hooks(turn_id, hooks)
        return hooks

    def on_tool_output(self, params: ToolsOutputParams | ToolsStartedParams) -> None:
        """The host's ``tools.output`` or ``tools.started``: to the agent whose call it is,
        if it still listens (announced as ``tool/progress`` / ``tool/started``)."""
        session = self._sessions.find(params.session_id)
        if session is None:
            return
        if not session.agent.on_output(params):
            log.debug("dropped output of %s (no longer listened to)", params.call_id)
