"""``agent.force {sessionId, callId?}`` on the client link (stdio and socket links): the
calls a stop waits on forced, as ``quiesce ops force`` forces one (``DaemonOps.ops_force``:
the host gives up on the call, its result is recorded ``forced``, effects unknown).

Without ``callId``, every call in flight of a session whose turn is being stopped; with
it, that call (NOT_FOUND if no such call is in flight)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from protocol.errors import ErrorCode, RpcError
from protocol.messages.renderer import AgentForceParams, AgentForceResult, ForcedCall

if TYPE_CHECKING:
    from runtime.daemon.sessions.requests import SessionRequests

log = logging.getLogger(__name__)

async def agent_force(requests: SessionRequests, params: AgentForceParams
                      ) -> AgentForceResult:
    session = requests.sessions.get(params.session_id)
    if params.call_id is not None:
        targets = [params.call_id]
    else:
        targets = [row[0] for row in session.waiting.rows]
        if not targets:
            raise RpcError(ErrorCode.NOT_FOUND,
                           f"no stop of session {params.session_id} waits on a call")
    out = []
    for call_id in targets:
        result = await requests.ops.ops_force(params.session_id, call_id)
        log.warning("session %s: call %s forced by a client: %s", params.session_id,
                    call_id, result.detail or result.forced)
        out.append(ForcedCall(call_id, result.forced, result.detail))
    return AgentForceResult(tuple(out))
