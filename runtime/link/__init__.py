"""The trio side of JSON-RPC links: endpoint (framing, the reader), correlation, the single
writer, dispatch and each request's effect point (``effects``), with the stdout guard and
the JSON-lines logs.

Both processes load it: the runtime for its client, host and ops links, the host for its
runtime link and its plugin servers. It imports ``protocol`` and libraries only, nothing
else of ours and not ``runtime.proc`` (the two are independent); every layer of the
runtime and the host may import it.
"""

from runtime.link.correlation import ConnectionClosed, NotSent, SentRequest
from runtime.link.dispatch import InstantHandler, NotificationHandler
from runtime.link.effects import (
    Effect,
    Handler,
    PlainHandler,
    answers_later,
    call_handler,
    marks_effect,
)
from runtime.link.endpoint import Endpoint
from runtime.link.fitting import OversizedMessage

__all__ = ["ConnectionClosed", "Effect", "Endpoint", "Handler", "InstantHandler", "NotSent",
           "NotificationHandler", "OversizedMessage", "PlainHandler", "SentRequest",
           "answers_later", "call_handler", "marks_effect"]
