"""What every HTTP streaming provider shares: the request, the stream, the error mapping.

A vendor module supplies the URL, headers, body and a sans-IO decoder (bytes in,
:data:`StreamChunk` s out); :func:`post_stream` does the I/O, the same for every
vendor:

* it POSTs with httpx (its trio backend), one short-lived client per stream unless
  the caller passes one, and maps every httpx failure to :class:`ProviderError` in
  one place, :func:`http_errors`;
* an answer that is not a 2xx event stream is a :class:`ProviderError` naming the
  HTTP status, its reason and what the body says (:func:`status_error`), read from
  at most the first 64 KiB of the body; the vendor's ``error_text`` reads its own
  error shape;
* leaving the context, normally or because a stop cancelled the consumer, closes
  the response and its connection at once: the part-read body is unwound by
  cancellation (:func:`unwind`), httpcore closes an unfinished HTTP/1.1 connection
  instead of pooling it (under its own shield), and closing a trio socket (or a TLS
  stream, which httpcore opens in ``https_compatible`` mode) does not wait on the
  peer. A stop that lands while the consumer awaits the next chunk is a
  ``Cancelled`` inside httpcore's read, which closes the connection the same way.

Secrets (API keys) go only into headers; every error text passes through
:func:`mask` so a body that echoes a key never carries it further.
"""

from __future__ import annotations

import functools
import logging
import ssl
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager, contextmanager
from typing import Protocol

import httpx
import trio

from runtime.agent.providers.base import ProviderError, StreamChunk

__all__ = [
    "StreamDecoder",
    "excerpt",
    "http_errors",
    "mask",
    "post_stream",
    "status_error",
    "unwind",
]

_log = logging.getLogger(__name__)

EXCERPT_CHARS = 300
ERROR_BODY_BYTES = 64 * 1024

# What a status means when the vendor's body does not say (or says it tersely).
_STATUS_HINTS = {
    400: "the request was refused as invalid",
    401: "the API key is missing or was refused",
    403: "the API key may not use this model or endpoint",
    404: "no such endpoint or model (check the base URL and the model name)",
    413: "the request is too large",
    429: "rate limited: too many requests or tokens; try again later",
    500: "the server failed",
    502: "a gateway in front of the server failed",
    503: "the server is unavailable",
    529: "the API is overloaded; try again later",
}


def excerpt(text: str, limit: int = EXCERPT_CHARS) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit] + "…"


def mask(text: str, secrets: Sequence[str | None]) -> str:
    for secret in secrets:
        if secret:
            text = text.replace(secret, "***")
    return text


def status_error(vendor: str, status: int, reason: str, url: str, detail: str) -> ProviderError:
    """The one wording of an HTTP failure: status, reason, what it means, what it says."""
    hint = _STATUS_HINTS.get(status)
    head = f"{vendor}: HTTP {status}{' ' + reason if reason else ''} from {url}"
    if hint:
        head += f" ({hint})"
    return ProviderError(f"{head}: {detail}")


class StreamDecoder(Protocol):
    """A vendor's sans-IO stream decoder."""

    @property
    def done(self) -> bool:
        """The response finished: nothing after this is read."""
        ...

    def feed(self, data: bytes) -> list[StreamChunk]: ...

    def end(self) -> list[StreamChunk]:
        """The body ended; return what it finished, or raise if it was cut short."""
        ...


@functools.cache
def _ssl_context() -> ssl.SSLContext:
    # Building a context costs ~50 ms; every per-stream client shares this one.
    return httpx.create_ssl_context()


@contextmanager
def http_errors(vendor: str, url: str) -> Iterator[None]:
    """The one place httpx failures become :class:`ProviderError`."""
    try:
        yield
    except httpx.TimeoutException as exc:
        raise ProviderError(f"{vendor}: {url}: timed out ({type(exc).__name__})") from exc
    except (httpx.HTTPError, httpx.InvalidURL, httpx.StreamError) as exc:
        raise ProviderError(f"{vendor}: {url}: {type(exc).__name__}: "
                            f"{excerpt(str(exc)) or 'no detail'}") from exc


async def unwind(body: AsyncIterator[bytes]) -> None:
    """Finish a response body iterator that was left part-read.

    httpx 0.28 and httpcore 1.0 read a body through a chain of nested async
    generators; ``aclose()`` reaches only the outermost, and the inner ones,
    left suspended, are finalized later by trio's garbage-collection hook, which
    warns (encode/httpx#3686). Resuming the chain inside a cancelled scope runs
    it to its next checkpoint, where ``Cancelled`` unwinds every layer and
    httpcore closes the unfinished connection on the way out (shielded). Data
    already buffered is consumed without a checkpoint, hence the loop; if the
    body had in fact ended, the connection is released normally.
    """
    with trio.CancelScope() as scope:
        scope.cancel()
        try:
            while True:
                await body.__anext__()
        except StopAsyncIteration:
            pass
        except (httpx.HTTPError, httpx.StreamError) as exc:
            _log.debug("discarding the rest of a response failed: %r", exc)


class ChunkStream:
    """The stream a step consumes: body bytes pulled on demand and decoded.

    An async iterator, not an async generator, so that nothing of ours is left
    for a finalizer either: :meth:`aclose` (run when the stream's context is
    left) unwinds the body."""

    def __init__(self, body: AsyncIterator[bytes], decoder: StreamDecoder, vendor: str,
                 url: str) -> None:
        self._body = body
        self._decoder = decoder
        self._vendor = vendor
        self._url = url
        self._ready: deque[StreamChunk] = deque()
        self._ended = False

    def __aiter__(self) -> ChunkStream:
        return self

    async def __anext__(self) -> StreamChunk:
        while not self._ready:
            if self._ended:
                raise StopAsyncIteration
            try:
                with http_errors(self._vendor, self._url):
                    data = await self._body.__anext__()
            except StopAsyncIteration:
                self._ended = True
                self._ready.extend(self._decoder.end())
                continue
            self._ready.extend(self._decoder.feed(data))
            self._ended = self._decoder.done
        return self._ready.popleft()

    async def aclose(self) -> None:
        self._ended = True
        self._ready.clear()
        await unwind(self._body)


ErrorText = Callable[[bytes], str | None]
"""What a vendor's error body says, or None when it is not the vendor's error shape."""


@asynccontextmanager
async def post_stream(*, vendor: str, url: str, body: bytes, headers: Mapping[str, str],
                      http_timeout: httpx.Timeout, decoder: StreamDecoder,
                      error_text: ErrorText,
                      secrets: Sequence[str | None] = (),
                      client: httpx.AsyncClient | None = None) -> AsyncIterator[ChunkStream]:
    """POST ``body`` and yield its decoded event stream (see the module docstring)."""
    async with AsyncExitStack() as stack:
        if client is None:
            client = await stack.enter_async_context(
                httpx.AsyncClient(verify=_ssl_context(), timeout=http_timeout))
        with http_errors(vendor, url):
            response = await stack.enter_async_context(client.stream(
                "POST", url, content=body, headers=dict(headers), timeout=http_timeout))
        await _check(response, vendor, url, error_text, secrets)
        chunks = ChunkStream(response.aiter_bytes(), decoder, vendor, url)
        # Unwound before the response closes (an exit stack runs last in, first out).
        stack.push_async_callback(chunks.aclose)
        yield chunks


async def _check(response: httpx.Response, vendor: str, url: str, error_text: ErrorText,
                 secrets: Sequence[str | None]) -> None:
    status = response.status_code
    media = response.headers.get("content-type", "").split(";")[0].strip().lower()
    if 200 <= status < 300 and media in ("", "text/event-stream"):
        return
    body = await _error_body(response, vendor, url)
    said = error_text(body)
    detail = mask(said if said is not None
                  else excerpt(body.decode("utf-8", errors="replace")) or "empty body", secrets)
    if not 200 <= status < 300:
        raise status_error(vendor, status, response.reason_phrase, url, detail)
    raise ProviderError(f"{vendor}: {url} answered {media}, not an event stream: {detail}")


async def _error_body(response: httpx.Response, vendor: str, url: str) -> bytes:
    """At most the first 64 KiB of an unusable answer's body."""
    body = bytearray()
    pieces = response.aiter_bytes()
    try:
        with http_errors(vendor, url):
            while len(body) < ERROR_BODY_BYTES:
                body += await pieces.__anext__()
    except StopAsyncIteration:
        pass
    finally:
        await unwind(pieces)
    return bytes(body)
