"""Dispatch overhead and encode/decode per message, in process, so regressions show.

Each sample is the mean of a batch of operations, in microseconds. The dispatch
layer (``runtime.link.dispatch.dispatch_request``) is timed around a handler that
returns at once, driven without an event loop (the handler never suspends), minus
the same handler called directly: what the layer itself adds per request. The
messages are the hot path's: a ``tools.execute`` request (a ``Read``) and its
``ToolResult`` answer; stdlib ``json`` on the same bytes is the reference. The
thread hop is what a read-only tool paid to run in an abandonable worker thread with
trio's ``to_thread``; the reader hop is what ``Read`` pays now (``host.tools.readers``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Coroutine
from typing import Any

import trio

from benchlib.stats import Series
from host.tools.readers import Readers
from protocol.envelope import IncomingRequest, IncomingResponse, encode_request, parse_frame
from protocol.framing import FrameDecoder, encode_frame
from protocol.messages.common import Empty
from protocol.messages.host import ToolsExecuteParams
from protocol.methods import HOST_TO_RUNTIME, RUNTIME_TO_HOST
from protocol.tools import ok_result
from runtime.link.dispatch import dispatch_request, encode_response

BATCH = 2000

_PARAMS = ToolsExecuteParams("0f3c9a7e5d2b4c1a", "t-3.call_7", "Read", {"path": "one"})
_RESULT = ok_result("     1\tx\n", details={"path": "one", "startLine": 1, "lines": 1,
                                            "truncated": False, "more": False})


def _run(coro: Coroutine[Any, Any, Any]) -> Any:
    """Drive a coroutine that never suspends."""
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value
    raise RuntimeError("the coroutine suspended")


def _timed(fn: Callable[[], object], batches: int) -> list[float]:
    samples = []
    for _ in range(batches):
        start = time.perf_counter()
        for _ in range(BATCH):
            fn()
        samples.append((time.perf_counter() - start) / BATCH * 1e6)
    return samples


async def _thread_hops(batches: int) -> list[float]:
    samples = []
    for _ in range(batches):
        start = time.perf_counter()
        for _ in range(BATCH // 10):
            await trio.to_thread.run_sync(_noop, abandon_on_cancel=True)
        samples.append((time.perf_counter() - start) / (BATCH // 10) * 1e6)
    return samples


def _noop() -> None:
    return None


async def _reader_hops(batches: int) -> list[float]:
    readers = Readers()
    samples = []
    for _ in range(batches):
        start = time.perf_counter()
        for _ in range(BATCH // 10):
            await readers.run(_noop_work)
        samples.append((time.perf_counter() - start) / (BATCH // 10) * 1e6)
    return samples


def _noop_work(cancelled: object) -> None:
    return None


async def micro(batches: int) -> list[Series]:
    request_bytes = encode_request(7, "tools.execute", _PARAMS)
    answer = encode_response(7, _RESULT)
    incoming = parse_frame(request_bytes, RUNTIME_TO_HOST)
    assert isinstance(incoming, IncomingRequest)

    async def handler(params: Any) -> Empty:
        return Empty()

    methods = {"tools.execute": handler}
    decoder = HOST_TO_RUNTIME  # the requester's side: the answer comes back on it
    result_decoder = RUNTIME_TO_HOST.specs["tools.execute"].result_decoder
    frames = FrameDecoder()

    def decode_answer() -> object:
        parsed = parse_frame(answer, decoder)
        assert isinstance(parsed, IncomingResponse) and parsed.result is not None
        return result_decoder.decode(parsed.result)

    rows: list[tuple[str, str, Callable[[], object]]] = [
        ("micro-dispatch", "dispatch layer per request (`dispatch_request` minus the "
         "handler)", lambda: _run(dispatch_request(methods, incoming))),
        ("micro-handler", "the same handler called directly (subtracted above)",
         lambda: _run(handler(None))),
        ("micro-encode-request", "encode a `tools.execute` request (+ frame)",
         lambda: encode_frame(encode_request(7, "tools.execute", _PARAMS))),
        ("micro-decode-request", "frame + parse + decode a `tools.execute` request "
         "(one `Decoder` per direction)",
         lambda: [parse_frame(f.data, RUNTIME_TO_HOST)  # type: ignore[union-attr]
                  for f in frames.feed(request_bytes + b"\n")]),
        ("micro-encode-result", "encode a `Read` result answer (+ frame)",
         lambda: encode_frame(encode_response(7, _RESULT))),
        ("micro-decode-result", "parse + decode that answer at the requester",
         decode_answer),
        ("micro-json-request", "reference: stdlib `json.loads` + `json.dumps` of the "
         "request", lambda: json.dumps(json.loads(request_bytes)).encode()),
    ]
    out = []
    for key, title, fn in rows:
        out.append(Series(key, title, _timed(fn, batches), unit="µs"))
    out.append(Series("micro-thread-hop", "trio `to_thread.run_sync` of a no-op "
                      "(`abandon_on_cancel`, as a read-only tool's worker; a thread in this "
                      "process's own loop)", await _thread_hops(batches), unit="µs"))
    out.append(Series("micro-reader-hop", "the host's reader threads (`host/tools/readers.py`, "
                      "what `Read` uses now) running a no-op, one at a time",
                      await _reader_hops(batches), unit="µs"))
    layer, direct = out[0], out[1]
    layer.extra["netUs"] = [a - b for a, b in zip(layer.samples, direct.samples, strict=True)]
    return out
