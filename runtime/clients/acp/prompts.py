"""The ``session/prompt`` requests seen on the wire, each from its reading to its answer.

The endpoint's tap shows the server each message as it is read (``seen``), before its
handler starts: a ``session/cancel`` read behind a prompt marks that prompt cancelled
(``cancel_unstarted``) even though its handler has not started, so it never reaches the
agent. A handler takes its prompt with ``claim``, and ``$/cancel_request`` finds one by
its request id (``get``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import trio

from protocol.causes import ClientCause, UserCause
from protocol.methods import RequestId
from runtime.clients.acp.messages import PromptRequest
from runtime.link import SentRequest


@dataclass
class SeenPrompt:
    """A ``session/prompt`` seen on the wire, from before its handler runs to its answer."""

    request_id: RequestId | None
    params: PromptRequest
    cancelled: trio.Event = field(default_factory=trio.Event)
    cause: ClientCause = field(default_factory=UserCause)
    done: trio.Event = field(default_factory=trio.Event)
    sent: bool = False  # its agent.prompt is queued on the native link
    abort: SentRequest | None = None  # the agent.abort queued right behind it, if any

    @property
    def session_id(self) -> str:
        return self.params.session_id


class SeenPrompts:
    """The prompts seen and not answered, by request id, and per session those not started."""

    def __init__(self) -> None:
        self._by_id: dict[RequestId, SeenPrompt] = {}
        self._unstarted: dict[str, list[SeenPrompt]] = {}  # session id -> seen, not started

    def seen(self, request_id: RequestId, params: PromptRequest) -> None:
        """A ``session/prompt`` the endpoint is about to handle."""
        prompt = SeenPrompt(request_id, params)
        self._by_id[request_id] = prompt
        self._unstarted.setdefault(prompt.session_id, []).append(prompt)

    def cancel_unstarted(self, session_id: str) -> None:
        """The session's prompts read and not yet handled never reach the agent."""
        for prompt in self._unstarted.get(session_id, ()):
            prompt.cancelled.set()

    def get(self, request_id: RequestId) -> SeenPrompt | None:
        """The prompt of that request, if it is seen and not answered."""
        return self._by_id.get(request_id)

    def claim(self, params: PromptRequest) -> SeenPrompt:
        """The prompt seen for these params: the first unstarted one equal to them (two
        equal prompts are interchangeable)."""
        waiting = self._unstarted.get(params.session_id, [])
        for i, prompt in enumerate(waiting):
            if prompt.params == params:
                del waiting[i]
                if not waiting:
                    del self._unstarted[params.session_id]
                return prompt
        return SeenPrompt(None, params)  # not seen by the tap: cancellable once it runs

    def forget(self, prompt: SeenPrompt) -> None:
        """The prompt has answered."""
        if prompt.request_id is not None and self._by_id.get(prompt.request_id) is prompt:
            del self._by_id[prompt.request_id]
