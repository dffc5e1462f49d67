"""The clients of a socket link (``quiesce serve --listen``), and who hears what.

On stdio there is one client and it hears everything. On a socket link each connection
is a client that *follows* the sessions it opened, loaded or attached: their events go to
their followers only, in the order the sessions announce them. A client that goes away
stops nothing: it is only forgotten.

A permission prompt goes to every follower of its session (and to one that attaches
while it is pending); the first answer wins, and every other client it was sent to is
told it is withdrawn. With no follower it waits for one (the host's permission timeout
bounds the wait).
"""

from __future__ import annotations

import logging
from typing import Any

import msgspec
import trio

from protocol.errors import RemoteError
from protocol.messages.client import ClientPermissionRequestParams
from protocol.messages.host import PermissionRequestResult, PermissionWithdrawnParams
from runtime.link import ConnectionClosed, Endpoint

log = logging.getLogger(__name__)


class _Prompt:
    """One permission prompt, asked of several clients at once."""

    def __init__(self, params: ClientPermissionRequestParams) -> None:
        self.params = params
        self.asked: list[Endpoint] = []
        self.answer: PermissionRequestResult | None = None
        self.winner: Endpoint | None = None
        self.answered = trio.Event()
        self.nursery: trio.Nursery | None = None

    def ask(self, client: Endpoint) -> None:
        if client in self.asked or self.nursery is None or self.answered.is_set():
            return
        self.asked.append(client)
        self.nursery.start_soon(self._ask_one, client)

    async def _ask_one(self, client: Endpoint) -> None:
        try:
            answer: PermissionRequestResult = await client.request(
                "permission.request", self.params)
        except RemoteError as exc:  # an error answer is a deny, as on stdio
            log.info("permission %s: a client could not answer (%s): deny",
                     self.params.request_id, exc)
            answer = PermissionRequestResult("deny")
        except ConnectionClosed:
            return  # that client left: the others (or one that attaches) may answer
        if not self.answered.is_set():
            self.answer, self.winner = answer, client
            self.answered.set()


class ClientHub:
    def __init__(self) -> None:
        self.clients: list[Endpoint] = []
        self._followers: dict[str, list[Endpoint]] = {}
        self._prompts: dict[str, _Prompt] = {}
        self._left = trio.Event()

    def add(self, client: Endpoint) -> None:
        self.clients.append(client)

    def remove(self, client: Endpoint) -> None:
        if client in self.clients:
            self.clients.remove(client)
            self._left.set()
        for session_id in list(self._followers):
            self.unfollow(session_id, client)

    async def all_gone(self) -> None:
        """Return once no client is connected."""
        while self.clients:
            self._left = trio.Event()
            await self._left.wait()

    def follow(self, session_id: str, client: Endpoint) -> None:
        """``client`` hears ``session_id``'s events from now on, and its pending prompts."""
        followers = self._followers.setdefault(session_id, [])
        if client not in followers and client in self.clients:
            followers.append(client)
        for prompt in self._prompts.values():
            if prompt.params.session_id == session_id:
                prompt.ask(client)

    def unfollow(self, session_id: str, client: Endpoint) -> None:
        """``client`` no longer hears ``session_id``; a session nobody follows is dropped."""
        followers = self._followers.get(session_id)
        if followers is not None and client in followers:
            followers.remove(client)
            if not followers:
                del self._followers[session_id]

    def followers(self, session_id: str) -> list[Endpoint]:
        return list(self._followers.get(session_id, ()))

    def forget_session(self, session_id: str) -> None:
        self._followers.pop(session_id, None)

    def notify_session(self, session_id: str, method: str, params: msgspec.Struct) -> None:
        for client in self._followers.get(session_id, ()):
            client.notify(method, params)

    async def caught_up(self) -> None:
        """Every client link has taken every frame it read (a turn's first step waits for
        it, as on stdio: a stop written right behind its prompt stops it before a tool)."""
        for client in list(self.clients):
            await client.caught_up()

    async def ask(self, params: ClientPermissionRequestParams) -> PermissionRequestResult:
        """Ask the session's followers; the first answer wins. Cancelled (the host
        withdrew the prompt), every client asked is told it is withdrawn."""
        prompt = _Prompt(params)
        self._prompts[params.request_id] = prompt
        try:
            async with trio.open_nursery() as nursery:
                prompt.nursery = nursery
                for client in self.followers(params.session_id):
                    prompt.ask(client)
                await prompt.answered.wait()
                nursery.cancel_scope.cancel()  # the other clients' requests are forgotten
        finally:
            del self._prompts[params.request_id]
            withdrawn = PermissionWithdrawnParams(params.session_id, params.request_id)
            for client in prompt.asked:
                if client is not prompt.winner:
                    client.notify("permission.withdrawn", withdrawn)
        assert prompt.answer is not None
        return prompt.answer

    def pending_prompts(self) -> list[Any]:
        return [prompt.params for prompt in self._prompts.values()]
