"""The trio side of JSON-RPC links: endpoint (framing, correlation, writer), dispatch and
each request's effect point (``effects``).

Both processes use it: the runtime for its client and host links, the host for
its runtime link.
"""

from runtime.link.dispatch import InstantHandler, NotificationHandler
from runtime.link.effects import (
    Effect,
    Handler,
    PlainHandler,
    answers_later,
    call_handler,
    marks_effect,
)
from runtime.link.endpoint import (
    ConnectionClosed,
    Endpoint,
    NotSent,
    OversizedMessage,
    SentRequest,
)

__all__ = ["ConnectionClosed", "Effect", "Endpoint", "Handler", "InstantHandler", "NotSent",
           "NotificationHandler", "OversizedMessage", "PlainHandler", "SentRequest",
           "answers_later", "call_handler", "marks_effect"]
