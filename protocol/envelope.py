"""JSON-RPC 2.0 envelopes, sans-IO: one frame in, one classified message out.

``parse_frame`` never raises for bad input: a malformed frame becomes an
:class:`InvalidMessage` carrying the JSON-RPC error it deserves and the request
id where one can be recovered, so an endpoint answers it and keeps serving. A lone
surrogate escape is read as U+FFFD and a batch is bounded (``protocol.bounds``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

import msgspec

from protocol.bounds import (
    BatchTooLarge,
    has_surrogate_escape,
    repair_surrogates,
    split_batch,
)
from protocol.errors import ErrorCode
from protocol.methods import Direction, RequestId


@dataclass(frozen=True, slots=True)
class IncomingRequest:
    id: RequestId
    method: str
    params: Any


@dataclass(frozen=True, slots=True)
class IncomingNotification:
    method: str
    params: Any


class ErrorObject(msgspec.Struct, frozen=True):
    code: int
    message: str
    data: Any = None


@dataclass(frozen=True, slots=True)
class IncomingResponse:
    id: RequestId
    result: msgspec.Raw | None
    error: ErrorObject | None


@dataclass(frozen=True, slots=True)
class InvalidMessage:
    """A message that gets an error response (``respond``) or, for a bad notification, none."""

    id: RequestId | None
    code: ErrorCode
    detail: str
    respond: bool = True
    path: str | None = None  # bad params: the JSON path of the offending member

    @property
    def data(self) -> Any:
        """The error response's ``data``: ``{path, detail}`` for bad params (a machine
        reads the path), else the detail."""
        return self.detail if self.path is None else {"path": self.path, "detail": self.detail}


@dataclass(frozen=True, slots=True)
class Batch:
    items: tuple[Incoming, ...]


Incoming = IncomingRequest | IncomingNotification | IncomingResponse | InvalidMessage
Parsed = Incoming | Batch


class _Envelope(msgspec.Struct):
    jsonrpc: msgspec.Raw | msgspec.UnsetType = msgspec.UNSET
    id: msgspec.Raw | msgspec.UnsetType = msgspec.UNSET
    method: msgspec.Raw | msgspec.UnsetType = msgspec.UNSET
    result: msgspec.Raw | msgspec.UnsetType = msgspec.UNSET
    error: msgspec.Raw | msgspec.UnsetType = msgspec.UNSET


_envelope_decoder = msgspec.json.Decoder(_Envelope)
_id_decoder = msgspec.json.Decoder(RequestId | None)
_str_decoder = msgspec.json.Decoder(str)
_error_decoder = msgspec.json.Decoder(ErrorObject)
_any_decoder = msgspec.json.Decoder()
_encoder = msgspec.json.Encoder()
_VERSION = b'"2.0"'


def parse_frame(data: bytes, incoming: Direction) -> Parsed:
    """Classify one frame received on a link whose peer sends ``incoming`` messages."""
    if not data.isascii():
        # The wire is UTF-8: a frame that is not is not JSON text. (msgspec checks UTF-8
        # only in the strings it decodes, and raises UnicodeDecodeError, not DecodeError.)
        try:
            data.decode("utf-8")
        except UnicodeDecodeError as exc:
            return InvalidMessage(None, ErrorCode.PARSE_ERROR,
                                  f"invalid UTF-8 at byte {exc.start}")
    try:
        parsed = _parse_frame(data, incoming)
        # Read first; repair only a frame refused as not JSON that has a surrogate escape
        # (msgspec's message does not always say so: "truncated" for a half at the end).
        if _not_json(parsed) and has_surrogate_escape(data):
            parsed = _parse_frame(repair_surrogates(data), incoming)
        return parsed
    except RecursionError:  # msgspec's nesting limit, before an id could be read
        return InvalidMessage(None, ErrorCode.PARSE_ERROR, "JSON nested too deeply")


def _not_json(parsed: Parsed) -> bool:
    items = parsed.items if isinstance(parsed, Batch) else (parsed,)
    return any(isinstance(item, InvalidMessage) and item.code is ErrorCode.PARSE_ERROR
               for item in items)


def _parse_frame(data: bytes, incoming: Direction) -> Parsed:
    if data.lstrip()[:1] == b"[":
        try:
            members = split_batch(data)
        except BatchTooLarge as exc:
            return InvalidMessage(None, ErrorCode.INVALID_REQUEST, str(exc))
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            return InvalidMessage(None, ErrorCode.PARSE_ERROR, str(exc))
        if not members:
            return InvalidMessage(None, ErrorCode.INVALID_REQUEST, "empty batch")
        # Each member is judged alone: one bad member does not fail the batch.
        return Batch(tuple(_parse_one(bytes(m), incoming) for m in members))
    return _parse_one(data, incoming)


class _Result(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The common answer: a success with an id, nothing else."""

    jsonrpc: Literal["2.0"]
    id: RequestId
    result: msgspec.Raw


_result_decoder = msgspec.json.Decoder(_Result)


def _parse_one(data: bytes, incoming: Direction) -> Incoming:
    # Fast paths, one decode each: a well-formed request or notification is exactly
    # one member of the direction's union; a well-formed success is exactly a
    # _Result. Anything either refuses takes the careful path below, which works
    # out the error it deserves (and the id, where there is one).
    try:
        message = incoming.decoder.decode(data)
    except (msgspec.ValidationError, msgspec.DecodeError, RecursionError):
        pass
    else:
        method = type(message).__struct_config__.tag  # the union's tag is the method
        request_id = getattr(message, "id", None)
        if request_id is None:
            return IncomingNotification(method, message.params)
        return IncomingRequest(request_id, method, message.params)
    try:
        answer = _result_decoder.decode(data)
    except (msgspec.ValidationError, msgspec.DecodeError, RecursionError):
        pass
    else:
        return IncomingResponse(answer.id, answer.result, None)
    return _parse_careful(data, incoming)


def _parse_careful(data: bytes, incoming: Direction) -> Incoming:
    try:
        env = _envelope_decoder.decode(data)
    except msgspec.ValidationError:
        # msgspec refuses a non-object at its first token, before it reads the rest: the
        # frame may not even be JSON ("2]5"), and that is a parse error.
        try:
            _any_decoder.decode(data)
        except msgspec.DecodeError as exc:
            return InvalidMessage(None, ErrorCode.PARSE_ERROR, str(exc))
        except msgspec.ValidationError:
            pass  # JSON, with a number out of any integer's range
        return InvalidMessage(None, ErrorCode.INVALID_REQUEST, "a message must be a JSON object")
    except msgspec.DecodeError as exc:
        return InvalidMessage(None, ErrorCode.PARSE_ERROR, str(exc))

    request_id: RequestId | None = None
    if env.id is not msgspec.UNSET:
        try:
            request_id = _id_decoder.decode(env.id)
        except msgspec.ValidationError:
            return InvalidMessage(None, ErrorCode.INVALID_REQUEST,
                                  "id must be a string, an integer or null")
    if env.jsonrpc is msgspec.UNSET or not _is_version(env.jsonrpc):
        return InvalidMessage(request_id, ErrorCode.INVALID_REQUEST, 'jsonrpc must be "2.0"')

    if env.method is msgspec.UNSET:
        return _parse_response(env, request_id)

    is_notification = env.id is msgspec.UNSET
    try:
        method = _str_decoder.decode(env.method)
    except msgspec.ValidationError:
        return InvalidMessage(request_id, ErrorCode.INVALID_REQUEST, "method must be a string")
    if method not in incoming:
        return InvalidMessage(request_id, ErrorCode.METHOD_NOT_FOUND, method,
                              respond=not is_notification)
    spec = incoming.specs[method]
    if spec.is_notification != is_notification:
        kind = "a notification" if spec.is_notification else "a request (with an id)"
        return InvalidMessage(request_id, ErrorCode.INVALID_REQUEST, f"{method} must be {kind}",
                              respond=not is_notification)
    try:
        message = incoming.decoder.decode(data)
    except msgspec.ValidationError as exc:
        detail = str(exc)
        if _about_params(detail):
            return InvalidMessage(request_id, ErrorCode.INVALID_PARAMS, detail,
                                  respond=not is_notification, path=_offending_path(detail))
        return InvalidMessage(request_id, ErrorCode.INVALID_REQUEST, detail,
                              respond=not is_notification)
    except RecursionError:
        return InvalidMessage(request_id, ErrorCode.INVALID_REQUEST, "message nested too deeply",
                              respond=not is_notification)
    if is_notification:
        return IncomingNotification(method, message.params)
    assert request_id is not None or message.id is not None
    return IncomingRequest(message.id, method, message.params)


def _parse_response(env: _Envelope, request_id: RequestId | None) -> Incoming:
    has_result = env.result is not msgspec.UNSET
    has_error = env.error is not msgspec.UNSET
    if request_id is None and (has_result or has_error):
        # A response is never answered: the peer's error about a frame it could not
        # attribute (id null) answered with our own id-null error would ping-pong forever.
        return InvalidMessage(None, ErrorCode.INVALID_REQUEST, "response without an id",
                              respond=False)
    if request_id is None or has_result == has_error:
        return InvalidMessage(request_id, ErrorCode.INVALID_REQUEST,
                              "not a request, a notification or a response")
    if has_error:
        try:
            error = _error_decoder.decode(env.error)  # type: ignore[arg-type]
        except msgspec.ValidationError as exc:
            return InvalidMessage(None, ErrorCode.INVALID_REQUEST, f"malformed error: {exc}",
                                  respond=False)
        return IncomingResponse(request_id, None, error)
    return IncomingResponse(request_id, env.result, None)  # type: ignore[arg-type]


def _is_version(raw: msgspec.Raw) -> bool:
    if bytes(raw).strip() == _VERSION:
        return True
    try:  # the same string spelt with escapes ("2.\\u0030")
        return _str_decoder.decode(raw) == "2.0"
    except msgspec.ValidationError:
        return False


def _about_params(detail: str) -> bool:
    """Whether a validation error of a whole message is about its ``params`` member."""
    return "`$.params" in detail or detail.endswith("field `params`")


_AT_PATH = re.compile(r" - at `(\$[^`]*)`$")
_NAMED_FIELD = re.compile(r"^Object (?:missing required|contains unknown) field `([^`]*)`")


def _offending_path(detail: str) -> str:
    """The JSON path a msgspec validation message points at; for a missing or unknown
    field, the path of that field (``$.params.workspace``), not of its object."""
    at = _AT_PATH.search(detail)
    path = at.group(1) if at else "$"
    field = _NAMED_FIELD.match(detail)
    return f"{path}.{field.group(1)}" if field else path


def decode_result(spec_decoder: msgspec.json.Decoder[Any], raw: msgspec.Raw) -> Any:
    return spec_decoder.decode(raw)


def encode_request(request_id: RequestId, method: str, params: msgspec.Struct) -> bytes:
    return _encoder.encode({"jsonrpc": "2.0", "id": request_id, "method": method,
                            "params": params})


def encode_notification(method: str, params: msgspec.Struct) -> bytes:
    return _encoder.encode({"jsonrpc": "2.0", "method": method, "params": params})


def encode_message(message: dict[str, Any] | list[dict[str, Any]]) -> bytes:
    """Encode an already-built response (or batch of responses)."""
    return _encoder.encode(message)


def error_response(request_id: RequestId | None, code: int, message: str,
                   data: Any = None) -> dict[str, Any]:
    error: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    return {"jsonrpc": "2.0", "error": error, "id": request_id}


def decode_any(data: bytes) -> Any:
    return _any_decoder.decode(data)
