from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.framing import Frame, FrameDecoder, FrameTooLarge, encode_frame

payloads = st.binary(min_size=1, max_size=200).map(
    lambda b: b.replace(b"\n", b"x").replace(b"\r", b"y")).filter(lambda b: b.strip())


def chunked(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    pieces, last = [], 0
    for p in points:
        pieces.append(data[last:p])
        last = p
    pieces.append(data[last:])
    return pieces


@settings(max_examples=200, deadline=None)
@given(st.lists(payloads, max_size=20), st.lists(st.integers(min_value=0), max_size=30))
def test_frames_survive_any_chunking(messages: list[bytes], cuts: list[int]) -> None:
    stream = b"".join(encode_frame(m) for m in messages)
    decoder = FrameDecoder(max_frame_size=1024)
    events = [e for piece in chunked(stream, cuts) for e in decoder.feed(piece)]
    assert events == [Frame(m) for m in messages]
    assert decoder.pending == 0


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.booleans(), payloads), max_size=15),
       st.lists(st.integers(min_value=0), max_size=30))
def test_oversized_frames_are_reported_and_skipped(items: list[tuple[bool, bytes]],
                                                   cuts: list[int]) -> None:
    limit = 64
    stream = b""
    expected: list[type] = []
    for big, payload in items:
        body = payload * (limit // len(payload) + 2) if big else payload[:limit]
        stream += encode_frame(body)
        expected.append(FrameTooLarge if len(body) > limit else Frame)
    decoder = FrameDecoder(max_frame_size=limit)
    events = [e for piece in chunked(stream, cuts) for e in decoder.feed(piece)]
    assert [type(e) for e in events] == expected
    # Small frames come through intact, even right after an oversized one.
    small = [p[:limit] for big, p in items if not big]
    assert [e.data for e in events if isinstance(e, Frame)] == small


def test_oversized_frame_in_one_chunk_then_resync() -> None:
    decoder = FrameDecoder(max_frame_size=10)
    events = list(decoder.feed(b"x" * 50 + b"\n" + b'{"a":1}\n'))
    assert isinstance(events[0], FrameTooLarge) and events[0].limit == 10
    assert events[1:] == [Frame(b'{"a":1}')]


def test_blank_lines_and_crlf() -> None:
    decoder = FrameDecoder()
    assert list(decoder.feed(b"\n\r\n  \n{}\r\n")) == [Frame(b"{}")]


def test_encode_rejects_newline() -> None:
    with pytest.raises(ValueError):
        encode_frame(b"a\nb")
