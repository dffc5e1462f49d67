"""The chat's side of workspace trust: the ``workspace.trust`` question on screen (each
command in full, ``runtime/clients/chat/plugins.py``) until ``/trust``, ``/not-now`` or ``/never``
answers it. The daemon gives up after its trust timeout (not now); a newer question
replaces an older one, which is answered not now. The question comes while ``session.new``
opens the session: :func:`open_answering_trust` reads the typed commands for its answer
meanwhile."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import trio
from rich.text import Text

from protocol.errors import RemoteError
from protocol.messages.client import (
    SessionNewParams,
    SessionNewResult,
    WorkspaceTrustParams,
    WorkspaceTrustResult,
)
from runtime.clients.chat.commands import Command, Quit, TrustAnswer, TrustChoice
from runtime.clients.chat.plugins import trust_answered, trust_lines
from runtime.clients.daemon_client import DaemonClient


@dataclass
class _Asked:
    answered: trio.Event
    decision: TrustChoice = "not-now"


class TrustQuestion:
    def __init__(self, commit: Callable[[Sequence[Text]], None]) -> None:
        self._commit = commit
        self._asked: _Asked | None = None

    async def ask(self, params: WorkspaceTrustParams) -> WorkspaceTrustResult:
        """The daemon's ``workspace.trust`` handler (``answers_later``: waiting for the user
        must not hold up the link's reader)."""
        if self._asked is not None:
            self._asked.answered.set()
        asked = self._asked = _Asked(trio.Event())
        self._commit(trust_lines(params))
        try:
            await asked.answered.wait()
        finally:
            if self._asked is asked:
                self._asked = None
        return WorkspaceTrustResult(asked.decision)

    def dismiss(self) -> None:
        """The user quits: a question showing is answered not now."""
        if self._asked is not None:
            self._asked.answered.set()

    def answer(self, command: TrustAnswer) -> None:
        asked = self._asked
        if asked is None or asked.answered.is_set():
            self._commit([Text("no question about a workspace's servers is open",
                               style="dim")])
            return
        asked.decision = command.decision
        asked.answered.set()
        self._commit(trust_answered(command.decision))


async def open_answering_trust(daemon: DaemonClient, params: SessionNewParams,
                               trust: TrustQuestion,
                               inbox: trio.MemoryReceiveChannel[Command],
                               requeue: trio.MemorySendChannel[Command]) -> SessionNewResult:
    """``session.new``, while the typed commands are read for the answer to a
    ``workspace.trust`` question it may bring (the others are sent back to ``requeue``, in
    the order typed, to be served once the session is open)."""
    outcome: list[SessionNewResult | RemoteError] = []
    deferred: list[Command] = []
    async with trio.open_nursery() as nursery:
        async def open_session() -> None:
            try:
                outcome.append(await daemon.request("session.new", params))
            except RemoteError as exc:
                outcome.append(exc)
            nursery.cancel_scope.cancel()

        nursery.start_soon(open_session)
        async for command in inbox:
            if isinstance(command, TrustAnswer):
                trust.answer(command)
                continue
            if isinstance(command, Quit):
                trust.dismiss()
            deferred.append(command)
    for command in deferred:  # served once the session is open, in the order typed
        requeue.send_nowait(command)
    (result,) = outcome
    if isinstance(result, RemoteError):
        raise result
    return result
