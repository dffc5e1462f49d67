"""The host's permission prompts as the chat holds them: each ``permission.request`` waits
until the user answers it, or until the runtime withdraws it.

The view draws the prompts (:mod:`runtime.clients.chat.permission_view`); here each request
waits, off the link's reader (the controller hands :meth:`PermissionAsks.ask` to
``answers_later``), for the one answer that decides it. A withdrawn request is let go
unanswered by the user: the runtime forgot it, so what it gets back is dropped.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import trio
from rich.text import Text

from protocol.messages.client import ClientPermissionRequestParams
from protocol.messages.host import PermissionRequestResult, PermissionWithdrawnParams
from runtime.clients.chat.commands import Answer, Decision
from runtime.clients.chat.view import ChatView


@dataclass
class _Asked:
    answered: trio.Event
    decision: Decision = "deny"


class PermissionAsks:
    """The permission requests open now, by request id, each waiting for its decision."""

    def __init__(self, view: ChatView, *, show: Callable[[Sequence[Text]], None],
                 commit: Callable[[Sequence[Text]], None], refresh: Callable[[], None],
                 clock: Callable[[], float]) -> None:
        self._view = view
        self._show = show  # printed at once, even while a stop settles
        self._commit = commit  # printed, or held while a stop settles
        self._refresh = refresh
        self._clock = clock
        self._asked: dict[str, _Asked] = {}

    async def ask(self, params: ClientPermissionRequestParams) -> PermissionRequestResult:
        """``permission.request``: shown, and answered with the user's decision."""
        asked = _Asked(trio.Event())
        self._asked[params.request_id] = asked
        whole = self._view.permission_asked(params.request_id, params.tool,
                                            params.args_preview, params.risk, params.call_id)
        if whole:  # printed now, even while a stop settles: the user decides on it
            self._show(whole)
        self._refresh()
        try:
            await asked.answered.wait()
        finally:
            self._asked.pop(params.request_id, None)
        return PermissionRequestResult(asked.decision)

    def withdrawn(self, params: PermissionWithdrawnParams) -> None:
        """``permission.withdrawn``: the prompt goes; its request is let go."""
        self._commit(self._view.permission_withdrawn(params.request_id, self._clock()))
        asked = self._asked.get(params.request_id)
        if asked is not None:  # the runtime forgot the request: this answer is dropped
            asked.answered.set()

    def answer(self, command: Answer) -> None:
        """The user's decision on a prompt still open; one on a prompt gone is ignored."""
        asked = self._asked.get(command.request_id)
        if asked is None or asked.answered.is_set():
            return
        asked.decision = command.decision
        asked.answered.set()
        self._commit(self._view.permission_answered(command.request_id, command.decision))
