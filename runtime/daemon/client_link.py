"""The daemon's client link as the rest of the daemon reads it: ``ClientLinkState``.

One owner, the daemon, sets it as the link goes (``initialize`` answered, the stdio client
or the socket link's hub, the nursery the sessions' agents run in, the shutdown begun);
the session side and the permission relay hold the same object, so nothing is copied.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import trio

if TYPE_CHECKING:
    from runtime.daemon.client_hub import ClientHub
    from runtime.link import Endpoint


@dataclass
class ClientLinkState:
    initialized: bool = False
    """``initialize`` was answered: until then every request on sessions is refused."""
    closing: bool = False
    """The daemon shuts down (``shutdown``, EOF or a signal): later requests are refused,
    and an open the host's stop cut short is answered ``SHUTTING_DOWN``."""
    client: Endpoint | None = None
    """The stdio client, while the daemon serves one."""
    hub: ClientHub | None = None
    """The socket link's clients (``quiesce serve --listen``), while it serves them."""
    nursery: trio.Nursery | None = None
    """Where the sessions' agents run: the daemon's, while it serves."""

    def caught_up(self) -> Callable[[], Awaitable[None]] | None:
        """What a turn's first step awaits: the client link has taken every frame it read
        (the stdio client's, else every socket client's); None while there is no link."""
        if self.client is not None:
            return self.client.caught_up
        if self.hub is not None:
            return self.hub.caught_up
        return None
