"""The host link maps its failures once: a request to the host gives its result or one
of ``runtime.supervision.failures``' kinds, never the link's raw exceptions or a decode
error."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from protocol.errors import ErrorCode, RemoteError
from protocol.messages.common import Empty
from runtime.link import ConnectionClosed, NotSent, OversizedMessage
from runtime.supervision.failures import (
    HostAnswerMalformed,
    HostError,
    HostLost,
    HostNotReached,
    HostRefused,
    HostRequestTooLarge,
    HostUnavailable,
)
from runtime.supervision.link import HostLink


class _Endpoint:
    def __init__(self, error: Exception) -> None:
        self.error = error

    async def request(self, method: str, params: msgspec.Struct) -> Any:
        raise self.error


def _link(error: Exception) -> HostLink:
    link = HostLink(command=["true"], env={})
    link._endpoint = _Endpoint(error)  # type: ignore[assignment]
    return link


@pytest.mark.parametrize(("raised", "kind", "base"), [
    (NotSent("host[1]: link closed"), HostNotReached, NotSent),
    (ConnectionClosed("host[1]: link closed"), HostLost, ConnectionClosed),
    (OversizedMessage(10, 5), HostRequestTooLarge, OversizedMessage),
    (RemoteError(ErrorCode.NOT_FOUND.value, "no such session"), HostRefused, RemoteError),
    (msgspec.ValidationError("Expected `str`"), HostAnswerMalformed, RemoteError),
    (msgspec.DecodeError("truncated"), HostAnswerMalformed, RemoteError),
])
async def test_each_link_failure_is_one_kind(raised: Exception, kind: type[HostError],
                                             base: type[Exception]) -> None:
    with pytest.raises(kind) as caught:
        await _link(raised).request("host.stats", Empty())
    assert type(caught.value) is kind and isinstance(caught.value, base | HostError)
    assert caught.value.__cause__ is raised


async def test_a_link_never_started_is_not_reached() -> None:
    with pytest.raises(HostNotReached):
        await HostLink(command=["true"], env={}).request("host.stats", Empty())


def test_the_kinds_keep_what_they_were() -> None:
    refused = HostRefused.of(RemoteError(-32099, "odd", {"x": 1}))
    assert (refused.code, refused.raw_code, refused.data) == (ErrorCode.INTERNAL, -32099,
                                                              {"x": 1})
    too_large = HostRequestTooLarge.of(OversizedMessage(10, 5))
    assert too_large.code is ErrorCode.INVALID_PARAMS and too_large.data == {"size": 10,
                                                                             "limit": 5}
    assert issubclass(HostNotReached, HostUnavailable) and issubclass(HostLost,
                                                                       HostUnavailable)
    assert not issubclass(HostLost, NotSent)
