from __future__ import annotations

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.causes import UserCause
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


@pytest.mark.parametrize(("params", "path"), [
    (b'{"sessionId":"s","callId":"c","tool":"Read","args":[]}', "$.params.args"),
    (b'{"sessionId":"s","callId":"c","tool":"Read"}', "$.params.args"),  # missing
    (b'{"sessionId":"s","callId":"c","tool":"Read","args":{},"x":1}', "$.params.x"),  # unknown
    (b'[1]', "$.params"),
])
def test_invalid_params_names_the_offending_path(params: bytes, path: str) -> None:
    frame = b'{"jsonrpc":"2.0","id":1,"method":"tools.execute","params":' + params + b'}'
    parsed = parse_frame(frame, RUNTIME_TO_HOST)
    assert isinstance(parsed, InvalidMessage)
    assert parsed.code == ErrorCode.INVALID_PARAMS
    # Machine-readable for a client, and msgspec's message for a person.
    assert parsed.data == {"path": path, "detail": parsed.detail}
    assert parsed.detail.startswith(("Expected", "Object"))


def test_missing_params_of_a_request_name_params() -> None:
    parsed = parse_frame(b'{"jsonrpc":"2.0","id":1,"method":"tools.execute"}', RUNTIME_TO_HOST)
    assert isinstance(parsed, InvalidMessage) and parsed.code == ErrorCode.INVALID_PARAMS
    assert parsed.data["path"] == "$.params"


def test_other_errors_carry_their_detail_as_data() -> None:
    parsed = parse_frame(b'{"jsonrpc":"2.0","id":6,"method":"no.such"}', CLIENT_TO_RUNTIME)
    assert isinstance(parsed, InvalidMessage) and parsed.data == "no.such"


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


envelopes = st.fixed_dictionaries({}, optional={
    "jsonrpc": st.sampled_from(["2.0", "1.0"]) | json_values,
    "id": st.integers(-5, 5) | st.text(max_size=4) | json_values,
    "method": st.sampled_from([*CLIENT_TO_RUNTIME.specs, "nope"]) | json_values,
    "params": st.just({}) | json_values,
    "result": json_values,
    "error": st.fixed_dictionaries({"code": st.integers(-5, 5), "message": st.text()})
    | json_values,
})


@settings(max_examples=300, deadline=None)
@given(envelopes)
def test_fuzzed_envelopes_are_classified_as_their_members_say(obj: dict[str, object]) -> None:
    parsed = parse_frame(msgspec.json.encode(obj), CLIENT_TO_RUNTIME)
    # An id a response may carry: a string or an integer (a bool is neither).
    valid_id = "id" in obj and (isinstance(obj["id"], str) or type(obj["id"]) is int)
    if isinstance(parsed, IncomingRequest):
        assert obj["jsonrpc"] == "2.0" and valid_id and parsed.id == obj["id"]
        assert parsed.method == obj["method"] and parsed.method in CLIENT_TO_RUNTIME
    elif isinstance(parsed, IncomingNotification):
        assert obj["jsonrpc"] == "2.0" and "id" not in obj
        assert parsed.method == obj["method"] and parsed.method in CLIENT_TO_RUNTIME
    elif isinstance(parsed, IncomingResponse):
        assert obj["jsonrpc"] == "2.0" and "method" not in obj
        assert valid_id and parsed.id == obj["id"]
        assert ("result" in obj) != ("error" in obj)
    else:
        assert isinstance(parsed, InvalidMessage)
        if obj.get("jsonrpc") != "2.0":
            assert parsed.code == ErrorCode.INVALID_REQUEST
        if parsed.respond and valid_id:
            assert parsed.id == obj["id"]  # answered where the sender can see it


def test_abort_params_defaults() -> None:
    params = msgspec.json.decode(b'{"sessionId":"s","callId":"c","tool":"Bash"}',
                                 type=ToolsAbortParams)
    assert params.cause == UserCause()
    assert msgspec.json.decode(msgspec.json.encode(SessionNewParams("/w")),
                               type=SessionNewParams).permission_mode == "ask"
