from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from runtime.agent.providers.sse import ServerSentEvent, SSEDecoder, SSEError


def decode(*pieces: bytes) -> list[ServerSentEvent]:
    decoder = SSEDecoder()
    events = [e for piece in pieces for e in decoder.feed(piece)]
    assert not decoder.end()
    return events


@pytest.mark.parametrize("eol", [b"\n", b"\r\n", b"\r"])
def test_line_endings(eol: bytes) -> None:
    stream = eol.join([b"data: a", b"", b"event: x", b"data:b", b"data:  c", b"", b""])
    assert decode(stream) == [ServerSentEvent("a"), ServerSentEvent("b\n c", "x")]


def test_comments_fields_without_colon_and_unknown_fields() -> None:
    stream = (b": keep-alive\n\n"
              b"retry: 100\nfoo: bar\ndata\n\n"      # "data" with no colon is an empty data line
              b"id: 7\ndata: x\n\n"
              b"event: only-a-type\n\n")             # no data: not dispatched
    assert decode(stream) == [ServerSentEvent(""), ServerSentEvent("x", id="7")]


def test_a_leading_bom_is_dropped_even_when_split() -> None:
    assert decode(b"\xef", b"\xbb\xbfdata: a\n\n") == [ServerSentEvent("a")]


def test_crlf_split_across_pieces_is_one_line_ending() -> None:
    assert decode(b"data: a\r", b"\ndata: b\r", b"\n\r", b"\n") == [ServerSentEvent("a\nb")]


def test_unfinished_event_is_discarded_and_reported() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"data: a\n\ndata: half") == [ServerSentEvent("a")]
    assert decoder.end() is True


def test_size_is_bounded() -> None:
    decoder = SSEDecoder(max_event_bytes=16)
    with pytest.raises(SSEError, match="line is longer"):
        decoder.feed(b"data: " + b"x" * 32)
    decoder = SSEDecoder(max_event_bytes=16)
    with pytest.raises(SSEError, match="event is longer"):
        decoder.feed(b"data: 0123456789\n" * 3)


STREAM = ("\ufeffdata: {\"a\": \"wörld ✓\"}\r\n\r\n: comment\n"
          "event: e\ndata: one\rdata: two\r\rid: 3\ndata:\n\n").encode()


@given(st.lists(st.integers(0, len(STREAM)), max_size=12))
def test_any_split_gives_the_same_events(cuts: list[int]) -> None:
    bounds = [0, *sorted(cuts), len(STREAM)]
    pieces = [STREAM[a:b] for a, b in itertools.pairwise(bounds)]
    assert decode(*pieces) == decode(STREAM) == [
        ServerSentEvent('{"a": "wörld ✓"}'),
        ServerSentEvent("one\ntwo", "e"),
        ServerSentEvent("", id="3"),
    ]
