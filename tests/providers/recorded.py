"""Hand-made Chat Completions stream bodies, shaped like recorded ones."""

from __future__ import annotations

import json
from typing import Any

CREATED = 1_735_000_000


def event(delta: dict[str, Any] | None = None, finish: str | None = None,
          *, choices: bool = True, **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"id": "chatcmpl-9xYz", "object": "chat.completion.chunk",
                            "created": CREATED, "model": "gpt-4o-mini-2024-07-18",
                            "system_fingerprint": "fp_0aa8d3e20b", **extra}
    body["choices"] = ([{"index": 0, "delta": delta or {}, "logprobs": None,
                         "finish_reason": finish}] if choices else [])
    return body


def sse(*events: dict[str, Any] | str, done: bool = True, eol: str = "\n") -> bytes:
    out = []
    for item in events:
        data = item if isinstance(item, str) else json.dumps(item, ensure_ascii=False)
        out.append(f"data: {data}{eol}{eol}")
    if done:
        out.append(f"data: [DONE]{eol}{eol}")
    return "".join(out).encode()


def call(index: int, *, id: str | None = None, name: str | None = None,
         args: str | None = None) -> dict[str, Any]:
    fragment: dict[str, Any] = {"index": index}
    if id is not None:
        fragment.update(id=id, type="function")
    function = {}
    if name is not None:
        function["name"] = name
    if args is not None:
        function["arguments"] = args
    if function:
        fragment["function"] = function
    return {"tool_calls": [fragment]}


TEXT = sse(
    event({"role": "assistant", "content": "", "refusal": None}),
    event({"content": "Hel"}),
    event({"content": "lo, wörld ✓"}),
    event({}, "stop"),
    event(choices=False, usage={"prompt_tokens": 9, "completion_tokens": 4, "total_tokens": 13}),
)

# DeepSeek-style reasoning_content, then an OpenRouter-style "reasoning" event,
# with CRLF line endings, a comment and a JSON event split over two data lines.
REASONING = (
    b": OPENROUTER PROCESSING\r\n\r\n"
    + sse(event({"role": "assistant", "content": None, "reasoning_content": "The user "}),
          event({"reasoning_content": "greets me."}), done=False, eol="\r\n")
    + b'data: {"choices": [{"index": 0,\r\ndata:  "delta": {"reasoning": " Reply."}}]}\r\n\r\n'
    + sse(event({"content": "Hi!"}), event({}, "stop"), eol="\r\n")
)

# Two calls whose fragments interleave by index, after some text.
PARALLEL_CALLS = sse(
    event({"role": "assistant", "content": "Let me look."}),
    event(call(0, id="call_A1", name="Read", args="")),
    event(call(1, id="call_B2", name="Grep", args="")),
    event(call(0, args='{"pa')),
    event(call(1, args='{"pattern":')),
    event(call(0, args='th": "src/a.txt"}')),
    event(call(1, args=' "TODO", "path": "ünï"}')),
    event({}, "tool_calls"),
)

ERROR_401 = json.dumps({"error": {
    "message": "Incorrect API key provided: sk-test-secret. You can find your API key at "
               "https://platform.openai.com/account/api-keys.",
    "type": "invalid_request_error", "param": None, "code": "invalid_api_key"}}).encode()
