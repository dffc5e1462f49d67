"""The trio side of JSON-RPC links: endpoint (framing, correlation, writer) and dispatch,
with the stdout guard and the JSON-lines logs.

Both processes load it: the runtime for its client, host and ops links, the host for its
runtime link and its plugin servers. It imports ``protocol`` and libraries only, nothing
else of ours and not ``runtime.proc`` (the two are independent); every layer of the
runtime and the host may import it.
"""

from runtime.link.dispatch import (
    Handler,
    InstantHandler,
    NotificationHandler,
    effect_status,
    effect_taken,
)
from runtime.link.endpoint import (
    ConnectionClosed,
    Endpoint,
    NotSent,
    OversizedMessage,
    SentRequest,
)

__all__ = ["ConnectionClosed", "Endpoint", "Handler", "InstantHandler", "NotSent",
           "NotificationHandler",
           "OversizedMessage", "SentRequest", "effect_status", "effect_taken"]
