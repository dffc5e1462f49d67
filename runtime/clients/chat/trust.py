"""The chat's side of workspace trust: the ``workspace.trust`` question on screen (each
command in full, ``runtime/clients/chat/plugins.py``) until ``/trust``, ``/not-now`` or ``/never``
answers it. The daemon gives up after its trust timeout (not now); a newer question
replaces an older one, which is answered not now."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import trio
from rich.text import Text

from protocol.messages.client import WorkspaceTrustParams, WorkspaceTrustResult
from runtime.clients.chat.commands import TrustAnswer, TrustChoice
from runtime.clients.chat.plugins import trust_answered, trust_lines


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
