"""The fuzz's messages, in-process: ``parse_frame`` against the same expectations the live
tests check, so a failure here shrinks to a minimal frame. Plus the bugs the live fuzz
found in ``protocol/envelope.py`` (fixed there), pinned one by one."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocol.envelope import (
    Batch,
    IncomingNotification,
    IncomingRequest,
    IncomingResponse,
    InvalidMessage,
    Parsed,
    parse_frame,
)
from protocol.errors import ErrorCode
from protocol.framing import Frame, FrameDecoder, FrameTooLarge
from protocol.methods import CLIENT_TO_RUNTIME, DIRECTIONS, RUNTIME_TO_HOST
from tests.fuzz import wire

CLIENT = wire.Link(tuple(wire.client_methods()), max_frame=16384)
HOST = wire.Link(tuple(wire.host_methods(session_id="s-fuzz")),
                 max_frame=16384)
SYNTAX = {wire.PARSE, wire.INVALID_REQUEST, wire.METHOD_NOT_FOUND, wire.INVALID_PARAMS}
FUZZ = settings(max_examples=12, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _answer_of(item: Parsed) -> object:
    """What an endpoint does with a parsed frame: an (id, code) error, "dispatch" (id) for
    a request its handler answers, None for nothing, a list for a batch."""
    if isinstance(item, Batch):
        answers = [_answer_of(member) for member in item.items]
        return [a for a in answers if a is not None] or None
    if isinstance(item, InvalidMessage):
        return (item.id, int(item.code)) if item.respond else None
    if isinstance(item, IncomingRequest):
        return ("dispatch", item.id)
    assert isinstance(item, IncomingNotification | IncomingResponse)
    return None


def _expected(msg: wire.Msg, answer: wire.Answer, dispatched: bool) -> object:
    if dispatched:
        return ("dispatch", answer.id)
    (code,) = answer.codes
    return (answer.id, code)


def _dispatched(answer: wire.Answer, label: str) -> bool:
    return label.startswith("valid") or not answer.codes <= SYNTAX


def _check(msg: wire.Msg, parsed: Parsed) -> None:
    got = _answer_of(parsed)
    if msg.answer is None:
        assert got is None, (msg, got)
    elif isinstance(msg.answer, tuple):
        assert isinstance(got, list), (msg, got)
        # Batch members: the request-shaped ones are dispatched, the rest answered here.
        want = sorted(map(repr, (_expected(msg, a, not a.codes <= SYNTAX or (
            a.id is not None and ("dispatch", a.id) in got)) for a in msg.answer)))
        assert sorted(map(repr, got)) == want, (msg, got)
    else:
        assert got == _expected(msg, msg.answer, _dispatched(msg.answer, msg.label)), (msg, got)


def _frames(frame: bytes) -> list[Frame | FrameTooLarge]:
    return list(FrameDecoder(16384).feed(frame + b"\n"))


@pytest.mark.parametrize("link, direction", [(CLIENT, CLIENT_TO_RUNTIME),
                                             (HOST, RUNTIME_TO_HOST)], ids=["client", "host"])
def test_every_kind_of_message_is_classified_as_the_fuzz_expects(link: wire.Link,
                                                                  direction: object) -> None:
    @FUZZ
    @given(wire.messages(link, oversize=4096))
    def run(templates: list[wire.Template]) -> None:
        ids = wire.Ids()
        for msg in wire.instantiate(templates, ids, wire.READY):
            events = _frames(msg.frame)
            if not events:
                assert msg.answer is None, msg
                continue
            (event,) = events
            if isinstance(event, FrameTooLarge):
                assert msg.label == "oversized", msg
                continue
            _check(msg, parse_frame(event.data, direction))  # type: ignore[arg-type]

    run()


@settings(max_examples=300, deadline=None, database=None)
@given(st.binary(max_size=200), st.sampled_from(DIRECTIONS))
def test_parse_frame_never_raises(data: bytes, direction: object) -> None:
    parse_frame(data, direction)  # type: ignore[arg-type]


# -- found by the live fuzz, fixed in protocol/envelope.py ------------------------------

@pytest.mark.parametrize("frame", [
    b'{"jsonrpc":"2.0","id":"\xff","method":"nope"}',  # killed the daemon (UnicodeDecodeError)
    b'{"jsonrpc":"2.0","id":1,"method":"session.new","params":{"workspace":"\xed\xa0\x80"}}',
    b'{"jsonrpc":"2.0","id":1,"error":{"code":1,"message":"\xc0\xaf"}}',
    b'[{"jsonrpc":"2.0","id":"\xff","method":"nope"}]',
])
def test_invalid_utf8_is_a_parse_error(frame: bytes) -> None:
    parsed = parse_frame(frame, CLIENT_TO_RUNTIME)
    assert isinstance(parsed, InvalidMessage)
    assert parsed.code == ErrorCode.PARSE_ERROR and parsed.id is None and parsed.respond


@pytest.mark.parametrize("frame", [
    b"[" * 5000 + b"]" * 5000,  # killed the daemon (RecursionError)
    b'{"jsonrpc":"2.0","id":1,"method":"session.list","params":' + b"[" * 5000
    + b"]" * 5000 + b"}",
    b'{"jsonrpc":"2.0","id":1,"result":' + b'{"a":' * 5000 + b"1" + b"}" * 5000 + b"}",
])
def test_nesting_too_deep_is_a_parse_error(frame: bytes) -> None:
    parsed = parse_frame(frame, CLIENT_TO_RUNTIME)
    assert isinstance(parsed, InvalidMessage)
    assert parsed.code == ErrorCode.PARSE_ERROR and parsed.respond


@pytest.mark.parametrize("frame", [
    # The peer's complaint about a frame it could not read: answering it with our own
    # id-null error made two endpoints ping-pong errors forever.
    b'{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error"}}',
    b'{"jsonrpc":"2.0","id":null,"result":{}}',
    b'{"jsonrpc":"2.0","result":1}',
])
def test_a_response_without_an_id_is_not_answered(frame: bytes) -> None:
    parsed = parse_frame(frame, CLIENT_TO_RUNTIME)
    assert isinstance(parsed, InvalidMessage) and not parsed.respond


def test_an_unknown_member_named_like_params_is_an_invalid_request() -> None:
    # Was -32602: the classification looked for "params" anywhere in msgspec's message.
    parsed = parse_frame(b'{"jsonrpc":"2.0","id":1,"method":"session.list","xparams":1}',
                         CLIENT_TO_RUNTIME)
    assert isinstance(parsed, InvalidMessage) and parsed.code == ErrorCode.INVALID_REQUEST
    missing = parse_frame(b'{"jsonrpc":"2.0","id":2,"method":"session.new"}', CLIENT_TO_RUNTIME)
    assert isinstance(missing, InvalidMessage) and missing.code == ErrorCode.INVALID_PARAMS


def test_the_version_may_be_spelt_with_an_escape() -> None:
    parsed = parse_frame(b'{"jsonrpc":"2.\\u0030","id":1,"method":"session.list"}',
                         CLIENT_TO_RUNTIME)
    assert isinstance(parsed, IncomingRequest)


@pytest.mark.parametrize("frame", [b"2]5", b"4aE{", b'"a" x', b"1 2"])
def test_garbage_after_a_scalar_is_a_parse_error(frame: bytes) -> None:
    # Was -32600: msgspec refuses a non-object at its first token, before reading on.
    parsed = parse_frame(frame, CLIENT_TO_RUNTIME)
    assert isinstance(parsed, InvalidMessage) and parsed.code == ErrorCode.PARSE_ERROR
