"""The trio side of JSON-RPC links: endpoint (framing, correlation, writer) and dispatch.

Both processes use it: the runtime for its client and host links, the host for
its runtime link.
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
