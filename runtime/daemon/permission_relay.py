"""Permission prompts from the host, relayed to the client, and withdrawn on a stop.

The host asks (``permission.request``); the runtime asks the client the same
question. When the host withdraws a prompt (its call was stopped, or the
prompt timed out), the runtime stops waiting for the client and tells it the
prompt is withdrawn; the client's late answer is a response to a forgotten
request and is dropped.

The host names a call by its host call id, ``<turnId>.<callId>``
(``protocol.ids``); the client is told the ``turnId`` and ``callId`` of
the call's ``tool/call`` event instead, so it can match the prompt to the call.
"""

from __future__ import annotations

import collections
import logging
from typing import TYPE_CHECKING

import trio

from protocol.errors import ErrorCode, RemoteError, RpcError
from protocol.ids import split_host_call_id
from protocol.messages.client import ClientPermissionRequestParams
from protocol.messages.host import (
    PermissionRequestParams,
    PermissionRequestResult,
    PermissionWithdrawnParams,
)
from runtime.daemon.client_link import ClientLinkState
from runtime.link import ConnectionClosed, Endpoint

if TYPE_CHECKING:
    from runtime.daemon.client_hub import ClientHub

log = logging.getLogger(__name__)

EARLY_WITHDRAWALS_KEPT = 1024


def client_params(params: PermissionRequestParams) -> ClientPermissionRequestParams:
    """The host's prompt as the client is asked it: the call named as its tool/call is."""
    turn_id, call_id = split_host_call_id(params.call_id)
    return ClientPermissionRequestParams(params.session_id, params.request_id, turn_id, call_id,
                                         params.tool, params.args_preview, params.risk)


class PermissionRelay:
    def __init__(self, link: ClientLinkState | None = None) -> None:
        """``link``: the daemon's (None: one of its own, for a relay on its own)."""
        self._link = link if link is not None else ClientLinkState()
        self._pending: dict[str, trio.CancelScope] = {}
        self._calls: dict[str, str] = {}  # request id -> host call id
        # Withdrawals read before their request (the host withdrew a prompt it had not
        # yet sent, or sent both in an order a crossing made odd): such a request is
        # refused, never shown. The link takes frames in wire order, so a withdrawal
        # read after its request always finds it registered.
        self._withdrawn_early: collections.OrderedDict[str, None] = collections.OrderedDict()

    @property
    def client(self) -> Endpoint | None:
        return self._link.client

    @client.setter
    def client(self, client: Endpoint | None) -> None:
        self._link.client = client

    @property
    def hub(self) -> ClientHub | None:
        """On a socket link: the prompt goes to its session's clients, first answer wins."""
        return self._link.hub

    async def request(self, params: PermissionRequestParams) -> PermissionRequestResult:
        client = self.client
        if self._withdrawn_early.pop(params.request_id, 0) is None:
            raise RpcError(ErrorCode.PERMISSION_WITHDRAWN, f"{params.request_id} was withdrawn")
        if client is None and self.hub is None:
            return PermissionRequestResult("deny")
        with trio.CancelScope() as scope:
            self._pending[params.request_id] = scope
            self._calls[params.request_id] = params.call_id
            # Registered, so a withdrawal now finds it; the host link reads on (its
            # registration says ``answers_later``: its reader must never wait on this
            # prompt, which may wait for ever below).
            if self.hub is not None:  # withdrawn (cancelled), the hub tells its clients
                return await self.hub.ask(client_params(params))
            assert client is not None
            try:
                answer: PermissionRequestResult = await client.request(
                    "permission.request", client_params(params))
                return answer
            except RemoteError as exc:
                log.info("permission %s: client could not answer (%s): deny",
                         params.request_id, exc)
                return PermissionRequestResult("deny")
            except ConnectionClosed:
                # The client went away: the daemon is shutting down and disposes every
                # turn, so this prompt is about to be withdrawn (cancelling this scope).
                # Answering "deny" would record a refusal the user never made. The host's
                # permission timeout still bounds the wait.
                log.info("permission %s: client link closed; waiting for the withdrawal",
                         params.request_id)
                await trio.sleep_forever()
            finally:
                self._pending.pop(params.request_id, None)
                self._calls.pop(params.request_id, None)
        raise RpcError(ErrorCode.PERMISSION_WITHDRAWN, f"{params.request_id} was withdrawn")

    def pending_calls(self) -> set[str]:
        """Host call ids whose permission prompt waits for the client."""
        return set(self._calls.values())

    def withdrawn(self, params: PermissionWithdrawnParams) -> None:
        scope = self._pending.pop(params.request_id, None)
        if scope is not None:
            scope.cancel()
        else:
            self._withdrawn_early[params.request_id] = None
            while len(self._withdrawn_early) > EARLY_WITHDRAWALS_KEPT:
                self._withdrawn_early.popitem(last=False)
        if self.client is not None:
            self.client.notify("permission.withdrawn", params)
