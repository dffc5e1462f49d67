from __future__ import annotations

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.envelope import (
    Batch,
    IncomingNotification,
    IncomingRequest,
    IncomingResponse,
    InvalidMessage,
    encode_notification,
    encode_request,
    parse_frame,
)
from protocol.errors import ErrorCode
from protocol.messages.client import SessionNewParams
from protocol.messages.common import Empty
from protocol.messages.host import ToolsAbortParams, ToolsExecuteParams, ToolsOutputParams
from protocol.methods import CLIENT_TO_RUNTIME, HOST_TO_RUNTIME, RUNTIME_TO_HOST
from protocol.tools import aborted_result, ok_result
from protocol.version import check_compatible


def test_request_round_trip() -> None:
    params = ToolsExecuteParams("s1", "c1", "Read", {"path": "a.txt", "limit": 3})
    parsed = parse_frame(encode_request(7, "tools.execute", params), RUNTIME_TO_HOST)
    assert parsed == IncomingRequest(7, "tools.execute", params)


def test_notification_round_trip() -> None:
    params = ToolsOutputParams("s1", "c1", 3, "stdout", "hello\n")
    parsed = parse_frame(encode_notification("tools.output", params), HOST_TO_RUNTIME)
    assert parsed == IncomingNotification("tools.output", params)


def test_omitted_params_default_when_all_optional() -> None:
    parsed = parse_frame(b'{"jsonrpc":"2.0","id":"x","method":"session.list"}',
                         CLIENT_TO_RUNTIME)
    assert parsed == IncomingRequest("x", "session.list", Empty())


@pytest.mark.parametrize(("frame", "code", "request_id"), [
    (b'{"jsonrpc":"2.0","id":1,', ErrorCode.PARSE_ERROR, None),
    (b"\xff\xfe", ErrorCode.PARSE_ERROR, None),
    (b"42", ErrorCode.INVALID_REQUEST, None),
    (b"[]", ErrorCode.INVALID_REQUEST, None),
    (b'{"id":4,"method":"session.list"}', ErrorCode.INVALID_REQUEST, 4),
    (b'{"jsonrpc":"1.0","id":4,"method":"session.list"}', ErrorCode.INVALID_REQUEST, 4),
    (b'{"jsonrpc":"2.0","id":{"a":1},"method":"session.list"}', ErrorCode.INVALID_REQUEST, None),
    (b'{"jsonrpc":"2.0","id":5,"method":7}', ErrorCode.INVALID_REQUEST, 5),
    (b'{"jsonrpc":"2.0","id":5}', ErrorCode.INVALID_REQUEST, 5),
    (b'{"jsonrpc":"2.0","id":6,"method":"no.such"}', ErrorCode.METHOD_NOT_FOUND, 6),
    (b'{"jsonrpc":"2.0","id":7,"method":"session.new","params":{"workspace":1}}',
     ErrorCode.INVALID_PARAMS, 7),
    (b'{"jsonrpc":"2.0","id":8,"method":"session.new","params":[1]}',
     ErrorCode.INVALID_PARAMS, 8),
    (b'{"jsonrpc":"2.0","id":9,"method":"session.new","params":{"workspace":"/","x":1}}',
     ErrorCode.INVALID_PARAMS, 9),
    (b'{"jsonrpc":"2.0","id":10,"method":"session.new"}', ErrorCode.INVALID_PARAMS, 10),
])
def test_bad_input_gets_the_error_it_deserves(frame: bytes, code: ErrorCode,
                                              request_id: object) -> None:
    parsed = parse_frame(frame, CLIENT_TO_RUNTIME)
    assert isinstance(parsed, InvalidMessage)
    assert parsed.code == code
    assert parsed.id == request_id
    assert parsed.respond


def test_invalid_params_names_the_offending_path() -> None:
    frame = b'{"jsonrpc":"2.0","id":1,"method":"tools.execute","params":' \
            b'{"sessionId":"s","callId":"c","tool":"Read","args":[]}}'
    parsed = parse_frame(frame, RUNTIME_TO_HOST)
    assert isinstance(parsed, InvalidMessage)
    assert parsed.code == ErrorCode.INVALID_PARAMS
    assert "$.params.args" in parsed.detail


def test_bad_notification_gets_no_answer() -> None:
    parsed = parse_frame(b'{"jsonrpc":"2.0","method":"tools.output","params":{}}',
                         HOST_TO_RUNTIME)
    assert isinstance(parsed, InvalidMessage) and not parsed.respond
    unknown = parse_frame(b'{"jsonrpc":"2.0","method":"nope"}', HOST_TO_RUNTIME)
    assert isinstance(unknown, InvalidMessage) and not unknown.respond


def test_batch_members_are_judged_alone() -> None:
    frame = (b'[{"jsonrpc":"2.0","id":1,"method":"session.list"}, 5,'
             b' {"jsonrpc":"2.0","id":2,"method":"nope"}]')
    parsed = parse_frame(frame, CLIENT_TO_RUNTIME)
    assert isinstance(parsed, Batch)
    first, second, third = parsed.items
    assert first == IncomingRequest(1, "session.list", Empty())
    assert isinstance(second, InvalidMessage) and second.code == ErrorCode.INVALID_REQUEST
    assert isinstance(third, InvalidMessage) and third.code == ErrorCode.METHOD_NOT_FOUND


def test_responses() -> None:
    ok = parse_frame(b'{"jsonrpc":"2.0","id":3,"result":{"found":true,"state":"running"}}',
                     HOST_TO_RUNTIME)
    assert isinstance(ok, IncomingResponse) and ok.error is None and ok.result is not None
    err = parse_frame(b'{"jsonrpc":"2.0","id":3,"error":{"code":-32601,"message":"m"}}',
                      HOST_TO_RUNTIME)
    assert isinstance(err, IncomingResponse) and err.error is not None
    assert err.error.code == -32601


def test_handshake_major_mismatch() -> None:
    check_compatible("1.7")
    with pytest.raises(Exception) as info:
        check_compatible("2.0")
    assert getattr(info.value, "code", None) == ErrorCode.PROTOCOL_MISMATCH


def test_tool_results_round_trip_frozen() -> None:
    for result in (ok_result("fine", details={"n": 1}), aborted_result(before_dispatch=True),
                   aborted_result(before_dispatch=False, extra_text="partial")):
        data = msgspec.json.encode(result)
        assert msgspec.json.decode(data, type=type(result)) == result
    with pytest.raises(AttributeError):
        ok_result("x").is_error = True  # type: ignore[misc]


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300))
def test_parse_frame_never_raises(data: bytes) -> None:
    for direction in (CLIENT_TO_RUNTIME, RUNTIME_TO_HOST, HOST_TO_RUNTIME):
        parse_frame(data, direction)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner,
                                                                max_size=3),
    max_leaves=10)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from(["jsonrpc", "id", "method", "params", "result",
                                        "error"]), json_values, max_size=6))
def test_fuzzed_envelopes_always_classified(obj: dict[str, object]) -> None:
    parsed = parse_frame(msgspec.json.encode(obj), CLIENT_TO_RUNTIME)
    assert isinstance(parsed, IncomingRequest | IncomingNotification | IncomingResponse
                      | InvalidMessage)


def test_abort_params_defaults() -> None:
    params = msgspec.json.decode(b'{"sessionId":"s","callId":"c","tool":"Bash"}',
                                 type=ToolsAbortParams)
    assert params.cause == "user"
    assert msgspec.json.decode(msgspec.json.encode(SessionNewParams("/w")),
                               type=SessionNewParams).permission_mode == "ask"
