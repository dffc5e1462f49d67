"""What a request to the host can end in besides its result: the link's failures, mapped
once (``HostLink.request``, and the supervisor and lease that refuse a request no host
can take) into the outcomes its callers handle.

``HostError`` is every one of them; a caller that only needs "no answer" catches it, one
that must tell them apart catches its kinds:

- ``HostNotReached``: the request never left the runtime (no live host, the host could not
  be started, its link already closed, the turn's host is gone): nothing of it ran there;
- ``HostLost``: the request was sent and the host died (crashed, or was killed by an
  operator's restart) before it answered: it may have acted;
- ``HostRefused``: the host answered with an error (its ``code`` and ``data`` kept);
  ``HostAnswerMalformed`` is one whose answer does not decode as the method's result;
- ``HostRequestTooLarge``: the request would not fit a frame; it was not sent.

The kinds keep the link's own exceptions as bases (``NotSent``, ``ConnectionClosed``,
``RemoteError``, ``OversizedMessage``), so what the link raised is what they are, and
``msgspec.DecodeError`` never leaves the link.
"""

from __future__ import annotations

from protocol.errors import ErrorCode, RemoteError
from runtime.link import ConnectionClosed, NotSent, OversizedMessage

__all__ = ["HostAnswerMalformed", "HostError", "HostLost", "HostNotReached", "HostRefused",
           "HostRequestTooLarge", "HostUnavailable"]


class HostError(Exception):
    """A request to the host that gave no result (see the module's text)."""


class HostUnavailable(HostError, ConnectionClosed):
    """No answer: the host was not reached, or was lost under the request."""


class HostNotReached(HostUnavailable, NotSent):
    """The request never left the runtime: nothing of it ran in the host."""


class HostLost(HostUnavailable):
    """The host died (or was replaced) after the request was sent: it may have acted."""


class HostRefused(HostError, RemoteError):
    """The host answered with an error."""

    @classmethod
    def of(cls, error: RemoteError) -> HostRefused:
        return cls(error.raw_code, error.message, error.data)


class HostAnswerMalformed(HostRefused):
    """The host's answer does not decode as the method's result."""

    def __init__(self, method: str, reason: str) -> None:
        super().__init__(ErrorCode.INTERNAL.value, f"the host's answer to {method} is "
                                                   f"malformed: {reason}")
        self.reason = reason


class HostRequestTooLarge(HostError, OversizedMessage):
    """The request exceeds the link's frame limit: it was not sent."""

    @classmethod
    def of(cls, error: OversizedMessage) -> HostRequestTooLarge:
        return cls(error.data["size"], error.data["limit"])
