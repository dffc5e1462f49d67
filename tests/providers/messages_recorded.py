"""Hand-made Anthropic Messages stream bodies, shaped like the documented ones.

Every event is ``event: <type>`` then ``data: <json with the same type>``, as the
Messages streaming documentation shows them.
"""

from __future__ import annotations

import json
from typing import Any

MODEL = "claude-sonnet-4-5"


def ev(kind: str, **fields: Any) -> bytes:
    data = json.dumps({"type": kind, **fields}, ensure_ascii=False)
    return f"event: {kind}\ndata: {data}\n\n".encode()


def start(input_tokens: int = 25) -> bytes:
    return ev("message_start", message={
        "id": "msg_01XFDUDYJgAACzvnptvVoYEL", "type": "message", "role": "assistant",
        "content": [], "model": MODEL, "stop_reason": None, "stop_sequence": None,
        "usage": {"input_tokens": input_tokens, "output_tokens": 1}})


def text_block(index: int, *pieces: str) -> bytes:
    out = ev("content_block_start", index=index, content_block={"type": "text", "text": ""})
    for piece in pieces:
        out += ev("content_block_delta", index=index,
                  delta={"type": "text_delta", "text": piece})
    return out + ev("content_block_stop", index=index)


def thinking_block(index: int, *pieces: str, signature: str) -> bytes:
    out = ev("content_block_start", index=index,
             content_block={"type": "thinking", "thinking": ""})
    for piece in pieces:
        out += ev("content_block_delta", index=index,
                  delta={"type": "thinking_delta", "thinking": piece})
    out += ev("content_block_delta", index=index,
              delta={"type": "signature_delta", "signature": signature})
    return out + ev("content_block_stop", index=index)


def tool_start(index: int, call_id: str, name: str) -> bytes:
    return ev("content_block_start", index=index, content_block={
        "type": "tool_use", "id": call_id, "name": name, "input": {}})


def json_delta(index: int, fragment: str) -> bytes:
    return ev("content_block_delta", index=index,
              delta={"type": "input_json_delta", "partial_json": fragment})


def tool_block(index: int, call_id: str, name: str, *fragments: str) -> bytes:
    out = tool_start(index, call_id, name)
    for fragment in fragments:
        out += json_delta(index, fragment)
    return out + ev("content_block_stop", index=index)


def finish(stop_reason: str = "end_turn", output_tokens: int = 15) -> bytes:
    return (ev("message_delta", delta={"stop_reason": stop_reason, "stop_sequence": None},
               usage={"output_tokens": output_tokens})
            + ev("message_stop"))


def ping() -> bytes:
    return ev("ping")


def error_event(kind: str, message: str) -> bytes:
    return ev("error", error={"type": kind, "message": message})


def error_body(kind: str, message: str) -> bytes:
    return json.dumps({"type": "error", "error": {"type": kind, "message": message},
                       "request_id": "req_011CSHoEeqs5C35K2UUqR7Fy"}).encode()
