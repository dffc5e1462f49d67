"""protocol.bounds: the batch limit, shortening to a frame, lone surrogates."""

from __future__ import annotations

import json
import re
import time

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol import bounds
from protocol.bounds import (
    MARKER,
    MAX_BATCH_MEMBERS,
    BatchTooLarge,
    repair_surrogates,
    shorten,
    split_batch,
)
from protocol.envelope import Batch, IncomingRequest, InvalidMessage, parse_frame
from protocol.errors import ErrorCode
from protocol.methods import CLIENT_TO_RUNTIME


def test_a_batch_up_to_the_limit_splits_into_its_members() -> None:
    members = split_batch(b"[" + b",".join([b'{"a":[1,2]}'] * MAX_BATCH_MEMBERS) + b"]")
    assert len(members) == MAX_BATCH_MEMBERS
    assert bytes(members[0]) == b'{"a":[1,2]}'


def test_one_member_over_the_limit_is_refused_without_reading_on() -> None:
    with pytest.raises(BatchTooLarge, match=str(MAX_BATCH_MEMBERS)):
        split_batch(b"[" + b",".join([b"1"] * (MAX_BATCH_MEMBERS + 1)) + b"]")
    # What follows the first member too many is not even read (it is not JSON here).
    with pytest.raises(BatchTooLarge):
        split_batch(b"[" + b"1," * (MAX_BATCH_MEMBERS + 1) + b"garbage")


def test_parse_frame_answers_an_oversized_batch_with_one_invalid_request() -> None:
    parsed = parse_frame(b"[" + b",".join([b"1"] * 3_000_000) + b"]", CLIENT_TO_RUNTIME)
    assert isinstance(parsed, InvalidMessage)
    assert parsed.code is ErrorCode.INVALID_REQUEST and parsed.id is None
    assert str(MAX_BATCH_MEMBERS) in parsed.detail
    at_limit = parse_frame(b"[" + b",".join([b"1"] * MAX_BATCH_MEMBERS) + b"]",
                           CLIENT_TO_RUNTIME)
    assert isinstance(at_limit, Batch) and len(at_limit.items) == MAX_BATCH_MEMBERS


@pytest.mark.parametrize(("escaped", "read"), [
    (b"\\udcff", "\ufffd"), (b"\\ud83d", "\ufffd"), (b"\\uDE00x", "\ufffdx"),
    (b"\\ud83d\\ude00", "\U0001f600"), (b"\\\\udcff", "\\udcff"),
    (b"\\\\\\udcff", "\\\ufffd"), (b"\\udfff\\ud800", "\ufffd\ufffd"),
])
def test_lone_surrogates_are_read_as_the_replacement_character(escaped: bytes,
                                                                read: str) -> None:
    assert msgspec.json.decode(repair_surrogates(b'"' + escaped + b'"')) == read


def test_a_lone_surrogate_keeps_the_request_id() -> None:
    parsed = parse_frame(b'{"jsonrpc":"2.0","id":7,"method":"agent.prompt","params":'
                         b'{"sessionId":"s-1","text":"half \\ud83d"}}', CLIENT_TO_RUNTIME)
    assert isinstance(parsed, IncomingRequest) and parsed.id == 7
    assert parsed.params.text == "half \ufffd"


@given(st.text())
def test_repair_changes_nothing_in_text_without_lone_surrogates(text: str) -> None:
    encoded = json.dumps(text).encode()
    assert msgspec.json.decode(repair_surrogates(encoded)) == text


def test_shorten_cuts_the_longest_strings_to_fit_with_a_marker() -> None:
    value = {"args": {"content": "x" * 100_000, "path": "/a"}, "seq": 1}
    short = shorten(value, 2_000)
    assert short is not None
    assert len(msgspec.json.encode(short)) <= 2_000
    assert short["args"]["path"] == "/a" and short["seq"] == 1
    content = short["args"]["content"]
    kept = content[:content.index("…")]
    assert content == kept + MARKER.format(100_000 - len(kept))
    assert shorten(value, 10**6) is value  # it fits: unchanged


def test_shorten_gives_up_when_strings_are_not_what_is_large() -> None:
    assert shorten({"n": list(range(10_000))}, 1_000) is None


def test_shorten_keeps_ids_tags_and_short_strings_whole() -> None:
    """Many strings under a KiB and a huge one: only the huge one is cut; ids and tags
    stay whole even when long."""
    small = {"sessionId": "s-" + "9" * 2_000, "event": {
        "type": "tool/call", "callId": "c-" + "1" * 1_500, "toolClass": "write",
        "notes": [f"note {i} " * 50 for i in range(200)], "args": {"path": "/a"}}}
    value = json.loads(json.dumps(small))
    value["event"]["args"]["content"] = "x" * 500_000
    budget = len(msgspec.json.encode(small)) + 300  # room for a short cut only
    short = shorten(value, budget)
    assert short is not None and len(msgspec.json.encode(short)) <= budget
    content = short["event"]["args"].pop("content")
    assert short == small  # everything but the content, whole
    assert content.endswith("bytes left out]")


class _CountingEncoder:
    def __init__(self) -> None:
        self.encoded_bytes = 0
        self._encoder = msgspec.json.Encoder()

    def encode(self, value: object) -> bytes:
        out = self._encoder.encode(value)
        self.encoded_bytes += len(out)
        return out


def test_shortening_a_9_mib_event_is_quick(monkeypatch: pytest.MonkeyPatch) -> None:
    """What the link does on its event loop for a 9 MiB Write: a couple of encodings of
    the event at most (not one per guess), and well under a blink."""
    counting = _CountingEncoder()
    monkeypatch.setattr(bounds, "_encoder", counting)
    for content in ("x" * (9 * 2**20), "é\\\n" * (3 * 2**20)):
        value = {"sessionId": "s-1", "event": {"type": "tool/call", "callId": "c1",
                                               "args": {"content": content}},
                 "notes": [f"n{i}" for i in range(180_000)]}
        size = len(msgspec.json.encode(value))
        counting.encoded_bytes = 0
        started = time.perf_counter()
        short = shorten(value, 8 * 2**20 - 200)
        elapsed = time.perf_counter() - started
        assert short is not None and len(msgspec.json.encode(short)) <= 8 * 2**20 - 200
        assert short["notes"] == value["notes"] and short["event"]["callId"] == "c1"
        assert counting.encoded_bytes < 2.5 * size, (counting.encoded_bytes, size)
        if content[0] == "x":
            assert elapsed < 0.5, elapsed


def _prompt_frame(text: bytes) -> bytes:
    return (b'{"jsonrpc":"2.0","id":7,"method":"agent.prompt","params":'
            b'{"sessionId":"s-1","text":"' + text + b'"}}')


@pytest.mark.parametrize("text", [
    b"\\\\" * (2 * 2**20) + b"\\udcff",  # 4 MiB of escaped backslashes, one lone half
    b"\\ud83d\\ude00" * (2**20 * 2 // 3),  # 8 MiB of escaped emoji pairs
    b"\\ud83d\\ude00" * (2**20 * 2 // 3) + b"\\udcff",  # and one lone half
    b"\\\\x" * 2**20 + b"\\udcff",
])
def test_reading_surrogate_escapes_is_quick(text: bytes) -> None:
    started = time.perf_counter()
    parsed = parse_frame(_prompt_frame(text), CLIENT_TO_RUNTIME)
    elapsed = time.perf_counter() - started
    assert isinstance(parsed, IncomingRequest) and parsed.id == 7
    assert elapsed < 0.5, elapsed


def test_a_low_half_after_the_text_of_a_high_one_is_repaired() -> None:
    """An escaped backslash, "ud83d", then a lone low half: not a pair."""
    parsed = parse_frame(_prompt_frame(b"\\\\ud83d\\udc00"), CLIENT_TO_RUNTIME)
    assert isinstance(parsed, IncomingRequest)
    assert parsed.params.text == "\\ud83d\ufffd"


@given(st.lists(st.sampled_from([b"\\\\", b"\\ud83d", b"\\ude00", b"a", b"\\u0041", b"\\n",
                                 b"\\uD800", b"\\udFFF", b"ud83d", b"\\\\\\\\"]), max_size=12))
def test_repair_reads_as_python_does_with_lone_halves_replaced(parts: list[bytes]) -> None:
    frame = b'"' + b"".join(parts) + b'"'
    expected = re.sub("[\ud800-\udfff]", "\ufffd", json.loads(frame))
    assert msgspec.json.decode(repair_surrogates(frame)) == expected


def test_strings_in_tuples_are_shortened_too() -> None:
    """``msgspec.to_builtins`` keeps a Struct's tuple as a tuple (an assistant message's
    blocks): its strings were never cut, and the message was dropped (issue 31 item 9)."""
    value = {"event": {"blocks": ({"type": "text", "text": "x" * 100_000},)}}
    short = shorten(value, 10_000)
    assert short is not None
    assert len(msgspec.json.encode(short)) <= 10_000
    assert short["event"]["blocks"][0]["text"].startswith("x" * 1000)
