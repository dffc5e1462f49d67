"""The openai provider: an OpenAI-compatible Chat Completions streaming client.

One step is one ``POST {base_url}/chat/completions`` with ``"stream": true``;
the answer is a server-sent event stream of ``chat.completion.chunk`` objects,
ended by ``data: [DONE]``. Three layers, each separate:

* request encoding (sans-IO): :func:`encode_request` turns a
  :class:`ModelRequest` into the JSON body;
* response decoding (sans-IO): :class:`ChatStreamDecoder` takes the response
  body's bytes in any pieces and returns stream chunks: ``delta.content`` and
  ``delta.refusal`` become :class:`TextDelta`, ``delta.reasoning_content`` (or,
  when a server sends none, ``delta.reasoning``) becomes
  :class:`ReasoningDelta`, and ``delta.tool_calls`` fragments are assembled by
  ``index`` and released as complete :class:`ToolCallChunk` s, in index order,
  when the choice's ``finish_reason`` arrives (or at ``[DONE]`` if it never
  does). Calls may interleave, so a call is never released early;
* I/O: :class:`OpenAIProvider` runs httpx (its trio backend) and maps every
  httpx failure to :class:`ProviderError` in one place, :func:`_http_errors`.

Tool-call arguments that are not a JSON object are a :class:`ProviderError`
naming the call: a call is never dispatched with arguments the model did not
write (empty arguments mean ``{}``). A stream that ends before a
``finish_reason`` or ``[DONE]`` is an error, not a short answer.

Leaving :meth:`OpenAIProvider.stream`'s context, normally or because a stop
cancelled the consumer, closes the response and its connection at once: the
part-read body is unwound by cancellation (:func:`_unwind`), httpcore closes an
unfinished HTTP/1.1 connection instead of pooling it (under its own shield),
and closing a trio socket (or a TLS stream, which httpcore opens in
``https_compatible`` mode) does not wait on the peer. A stop that lands while
the consumer awaits the next chunk is a ``Cancelled`` inside httpcore's read,
which closes the connection the same way.

The API key goes only into the ``Authorization`` header; it is kept out of
reprs and log lines, and masked if an HTTP error body echoes it.
"""

from __future__ import annotations

import functools
import logging
import os
import ssl
from collections import deque
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import AsyncExitStack, asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal

import httpx
import msgspec
import trio

from protocol.messages.client import OpenAIProviderConfig
from runtime.providers.base import (
    AssistantMessage,
    ModelRequest,
    ProviderError,
    ReasoningDelta,
    StreamChunk,
    TextDelta,
    ToolCallChunk,
    ToolMessage,
    UserMessage,
)
from runtime.providers.sse import DEFAULT_MAX_EVENT_BYTES, SSEDecoder, SSEError

__all__ = [
    "DEFAULT_BASE_URL",
    "ChatStreamDecoder",
    "OpenAIConfig",
    "OpenAIProvider",
    "encode_request",
    "provider_from_config",
]

_log = logging.getLogger(__name__)

DEFAULT_BASE_URL = "https://api.openai.com/v1"
_EXCERPT_CHARS = 300
_ERROR_BODY_BYTES = 64 * 1024


def _excerpt(text: str, limit: int = _EXCERPT_CHARS) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit] + "…"


# --- configuration -----------------------------------------------------------------


@dataclass(frozen=True)
class OpenAIConfig:
    """Where to stream from. ``timeout`` is the longest silence accepted while
    sending or streaming (seconds), not a cap on a whole response;
    ``connect_timeout`` bounds connecting."""

    model: str
    base_url: str = DEFAULT_BASE_URL
    api_key: str | None = field(default=None, repr=False)
    timeout: float = 600.0
    connect_timeout: float = 10.0
    headers: Mapping[str, str] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if not self.model:
            raise ValueError("openai: a model is required")
        if not self.base_url.startswith(("http://", "https://")):
            raise ValueError(f"openai: base URL must be http(s), got {self.base_url!r}")
        if self.timeout <= 0 or self.connect_timeout <= 0:
            raise ValueError("openai: timeouts must be positive")
        object.__setattr__(self, "base_url", self.base_url.rstrip("/"))
        object.__setattr__(self, "headers", MappingProxyType(dict(self.headers)))

    @property
    def url(self) -> str:
        return f"{self.base_url}/chat/completions"

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> OpenAIConfig:
        """``OPENAI_BASE_URL`` (default the OpenAI API), ``OPENAI_MODEL`` (required),
        ``OPENAI_API_KEY`` (optional: local servers often need none)."""
        env = os.environ if environ is None else environ
        model = env.get("OPENAI_MODEL", "")
        if not model:
            raise ValueError("openai: OPENAI_MODEL is not set")
        return cls(model=model,
                   base_url=env.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL,
                   api_key=env.get("OPENAI_API_KEY") or None)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any],
                  environ: Mapping[str, str] | None = None) -> OpenAIConfig:
        """Session config ``{"kind": "openai", "baseUrl"?, "model"?, "apiKeyEnv"?,
        "timeout"?, "connectTimeout"?, "headers"?}``. Missing ``baseUrl`` and
        ``model`` come from the environment as in :meth:`from_env`. The key is
        never in the config (it would land in session logs): ``apiKeyEnv`` names
        the variable holding it (default ``OPENAI_API_KEY``, which may be unset;
        a variable named explicitly must be set)."""
        try:
            raw = msgspec.convert(dict(data), _ConfigDict)
        except msgspec.ValidationError as exc:
            raise ValueError(f"openai: invalid provider config: {exc}") from exc
        return cls.resolve(base_url=raw.base_url, model=raw.model, api_key_env=raw.api_key_env,
                           timeout=raw.timeout, connect_timeout=raw.connect_timeout,
                           headers=raw.headers, environ=environ)

    @classmethod
    def resolve(cls, *, base_url: str | None = None, model: str | None = None,
                api_key_env: str | None = None, timeout: float = 600.0,
                connect_timeout: float = 10.0, headers: Mapping[str, str] | None = None,
                environ: Mapping[str, str] | None = None) -> OpenAIConfig:
        """Fill what a config leaves out from the environment (see :meth:`from_dict`)."""
        env = os.environ if environ is None else environ
        model = model or env.get("OPENAI_MODEL", "")
        if not model:
            raise ValueError("openai: no model in the provider config and OPENAI_MODEL is unset")
        key_env = api_key_env or "OPENAI_API_KEY"
        api_key = env.get(key_env) or None
        if api_key_env is not None and api_key is None:
            raise ValueError(f"openai: apiKeyEnv names {key_env}, which is not set")
        return cls(model=model,
                   base_url=base_url or env.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL,
                   api_key=api_key, timeout=timeout, connect_timeout=connect_timeout,
                   headers=headers or {})


class _ConfigDict(msgspec.Struct, frozen=True, forbid_unknown_fields=True, rename="camel"):
    kind: Literal["openai"]
    base_url: str | None = None
    model: str | None = None
    api_key_env: str | None = None
    timeout: float = 600.0
    connect_timeout: float = 10.0
    headers: dict[str, str] = msgspec.field(default_factory=dict)


# --- request encoding (sans-IO) ----------------------------------------------------


class _WireFunctionCall(msgspec.Struct, frozen=True):
    name: str
    arguments: str


class _WireToolCall(msgspec.Struct, frozen=True):
    id: str
    function: _WireFunctionCall
    type: str = "function"


class _SystemMsg(msgspec.Struct, frozen=True, tag_field="role", tag="system"):
    content: str


class _UserMsg(msgspec.Struct, frozen=True, tag_field="role", tag="user"):
    content: str


class _AssistantMsg(msgspec.Struct, frozen=True, tag_field="role", tag="assistant",
                    omit_defaults=True):
    content: str | None = None
    tool_calls: tuple[_WireToolCall, ...] = ()


class _ToolMsg(msgspec.Struct, frozen=True, tag_field="role", tag="tool"):
    tool_call_id: str
    content: str


class _WireFunction(msgspec.Struct, frozen=True):
    name: str
    description: str
    parameters: dict[str, Any]


class _WireTool(msgspec.Struct, frozen=True):
    function: _WireFunction
    type: str = "function"


class _Body(msgspec.Struct, frozen=True, omit_defaults=True):
    model: str
    messages: list[_SystemMsg | _UserMsg | _AssistantMsg | _ToolMsg]
    stream: bool
    tools: list[_WireTool] = msgspec.field(default_factory=list)


_json_encoder = msgspec.json.Encoder()


def encode_request(model: str, request: ModelRequest) -> bytes:
    """The Chat Completions body for one streamed step.

    Reasoning in earlier assistant messages is not sent back (Chat Completions
    has no input field for it, and some servers refuse one). A tool result's
    ``is_error`` has no wire field either: its text says so."""
    messages: list[_SystemMsg | _UserMsg | _AssistantMsg | _ToolMsg] = []
    if request.system:
        messages.append(_SystemMsg(request.system))
    for message in request.messages:
        if isinstance(message, UserMessage):
            messages.append(_UserMsg(message.text))
        elif isinstance(message, AssistantMessage):
            calls = tuple(
                _WireToolCall(call.call_id, _WireFunctionCall(
                    call.name, _json_encoder.encode(call.args).decode()))
                for call in message.tool_calls)
            # An assistant message needs content or tool calls; null content is
            # the documented form when it only calls tools.
            content = message.text if message.text or not calls else None
            messages.append(_AssistantMsg(content, calls))
        elif isinstance(message, ToolMessage):
            messages.append(_ToolMsg(message.call_id, message.text))
    # OpenAI refuses an empty "tools" list, so none is sent when there are no tools.
    tools = [_WireTool(_WireFunction(t.name, t.description, t.parameters))
             for t in request.tools]
    return _json_encoder.encode(_Body(model, messages, True, tools))


# --- response decoding (sans-IO) ---------------------------------------------------


class _FunctionDelta(msgspec.Struct, frozen=True):
    name: str | None = None
    arguments: str | None = None


class _ToolCallDelta(msgspec.Struct, frozen=True):
    index: int | None = None
    id: str | None = None
    function: _FunctionDelta | None = None


class _Delta(msgspec.Struct, frozen=True):
    content: str | None = None
    refusal: str | None = None
    reasoning_content: str | None = None
    reasoning: str | None = None
    tool_calls: list[_ToolCallDelta] | None = None


class _Choice(msgspec.Struct, frozen=True):
    index: int = 0
    delta: _Delta = msgspec.field(default_factory=_Delta)
    finish_reason: str | None = None


class _ErrorBody(msgspec.Struct, frozen=True):
    message: str | None = None
    type: str | None = None
    code: str | int | None = None


class _Event(msgspec.Struct, frozen=True):
    choices: list[_Choice] = msgspec.field(default_factory=list)
    error: _ErrorBody | str | None = None


_event_decoder = msgspec.json.Decoder(_Event)
_args_decoder = msgspec.json.Decoder(dict[str, Any])


def _error_text(error: _ErrorBody | str) -> str:
    if isinstance(error, str):
        return _excerpt(error)
    parts = [p for p in (error.type, str(error.code) if error.code is not None else None)
             if p]
    suffix = f" ({', '.join(parts)})" if parts else ""
    return _excerpt(error.message or "no message") + suffix


@dataclass
class _PendingCall:
    index: int
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)

    def add(self, delta: _ToolCallDelta) -> None:
        if delta.id and not self.id:
            self.id = delta.id
        function = delta.function
        if function is None:
            return
        # OpenAI sends a call's name whole, once; some servers repeat it in
        # every fragment, which must not double it.
        if function.name and function.name != self.name:
            self.name += function.name
        if function.arguments:
            self.arguments.append(function.arguments)

    def complete(self) -> ToolCallChunk:
        if not self.id or not self.name:
            raise ProviderError(f"openai: tool call at index {self.index} ended without "
                                f"{'an id' if not self.id else 'a name'}")
        text = "".join(self.arguments)
        if not text.strip():
            return ToolCallChunk(self.id, self.name, {})
        try:
            args = _args_decoder.decode(text)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise ProviderError(
                f"openai: tool call {self.id} ({self.name}) has arguments that are not a "
                f"JSON object ({exc}): {_excerpt(text)!r}") from exc
        return ToolCallChunk(self.id, self.name, args)


class ChatStreamDecoder:
    """Chat Completions stream bytes in, :data:`StreamChunk` s out.

    Only choice 0 is read (the request asks for one). :attr:`done` turns true at
    ``[DONE]``; nothing after it is read. Malformed events, error events and
    unusable tool calls raise :class:`ProviderError`."""

    def __init__(self, max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES) -> None:
        self._sse = SSEDecoder(max_event_bytes)
        self._calls: dict[int, _PendingCall] = {}
        self._finished = False
        self.done = False
        self.finish_reason: str | None = None

    def feed(self, data: bytes) -> list[StreamChunk]:
        if self.done:
            return []
        try:
            events = self._sse.feed(data)
        except SSEError as exc:
            raise ProviderError(f"openai: malformed event stream: {exc}") from exc
        out: list[StreamChunk] = []
        for event in events:
            if event.data.strip() == "[DONE]":
                self.done = True
                out.extend(self._release_calls())
                break
            self._event(event.event, event.data, out)
        return out

    def end(self) -> list[StreamChunk]:
        """The body ended; return the calls it finished, or raise if it was cut short."""
        cut = self._sse.end()
        if self.done:
            return []
        if not self._finished:
            detail = " inside an event" if cut else ""
            raise ProviderError(f"openai: the stream ended{detail} before the response "
                                "finished (no finish_reason, no [DONE])")
        return self._release_calls()

    def _event(self, kind: str, data: str, out: list[StreamChunk]) -> None:
        try:
            event = _event_decoder.decode(data)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            if kind == "error":
                raise ProviderError(f"openai: the server sent an error event: "
                                    f"{_excerpt(data)!r}") from exc
            raise ProviderError(f"openai: malformed stream event ({exc}): "
                                f"{_excerpt(data)!r}") from exc
        if event.error is not None:
            raise ProviderError(f"openai: the server reported an error mid-stream: "
                                f"{_error_text(event.error)}")
        if kind == "error":
            raise ProviderError(f"openai: the server sent an error event: {_excerpt(data)!r}")
        for choice in event.choices:
            if choice.index == 0:
                self._choice(choice, out)

    def _choice(self, choice: _Choice, out: list[StreamChunk]) -> None:
        delta = choice.delta
        reasoning = delta.reasoning_content or delta.reasoning
        if reasoning:
            out.append(ReasoningDelta(reasoning))
        if delta.content:
            out.append(TextDelta(delta.content))
        if delta.refusal:
            out.append(TextDelta(delta.refusal))
        for call_delta in delta.tool_calls or ():
            self._pending(call_delta).add(call_delta)
        if choice.finish_reason is not None:
            self._finished = True
            self.finish_reason = choice.finish_reason
            if choice.finish_reason in ("length", "content_filter"):
                _log.warning("openai: the response was cut short (finish_reason=%s)",
                             choice.finish_reason)
            out.extend(self._release_calls())

    def _pending(self, delta: _ToolCallDelta) -> _PendingCall:
        index = delta.index
        if index is None:
            # Servers that omit the index stream one call at a time: a new id
            # starts a call, anything else continues the last one.
            known = [c for c in self._calls.values() if delta.id and c.id == delta.id]
            if known:
                return known[0]
            if delta.id or not self._calls:
                index = max(self._calls, default=-1) + 1
            else:
                index = max(self._calls)
        call = self._calls.get(index)
        if call is None:
            call = self._calls[index] = _PendingCall(index)
        return call

    def _release_calls(self) -> list[StreamChunk]:
        calls: list[StreamChunk] = [self._calls[i].complete() for i in sorted(self._calls)]
        self._calls.clear()
        return calls


# --- I/O -------------------------------------------------------------------------


@functools.cache
def _ssl_context() -> ssl.SSLContext:
    # Building a context costs ~50 ms; every per-stream client shares this one.
    return httpx.create_ssl_context()


@contextmanager
def _http_errors(url: str) -> Iterator[None]:
    """The one place httpx failures become :class:`ProviderError`."""
    try:
        yield
    except httpx.TimeoutException as exc:
        raise ProviderError(f"openai: {url}: timed out ({type(exc).__name__})") from exc
    except (httpx.HTTPError, httpx.InvalidURL, httpx.StreamError) as exc:
        raise ProviderError(f"openai: {url}: {type(exc).__name__}: "
                            f"{_excerpt(str(exc)) or 'no detail'}") from exc


async def _unwind(body: AsyncIterator[bytes]) -> None:
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
            _log.debug("openai: discarding the rest of a response failed: %r", exc)


class _ChunkStream:
    """The stream a step consumes: body bytes pulled on demand and decoded.

    An async iterator, not an async generator, so that nothing of ours is left
    for a finalizer either: :meth:`aclose` (run when the stream's context is
    left) unwinds the body."""

    def __init__(self, body: AsyncIterator[bytes], decoder: ChatStreamDecoder,
                 url: str) -> None:
        self._body = body
        self._decoder = decoder
        self._url = url
        self._ready: deque[StreamChunk] = deque()
        self._ended = False

    def __aiter__(self) -> _ChunkStream:
        return self

    async def __anext__(self) -> StreamChunk:
        while not self._ready:
            if self._ended:
                raise StopAsyncIteration
            try:
                with _http_errors(self._url):
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
        await _unwind(self._body)


class OpenAIProvider:
    """Streams steps from an OpenAI-compatible server.

    Without ``client``, every stream uses its own short-lived httpx client, so
    no connection outlives a stream. A caller that wants keep-alive across steps
    passes a client and owns its lifetime; a stream still closes its own
    response (and, when unfinished, the connection) when its context is left."""

    def __init__(self, config: OpenAIConfig, *, client: httpx.AsyncClient | None = None,
                 max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES) -> None:
        self._config = config
        self._client = client
        self._max_event_bytes = max_event_bytes
        self._timeout = httpx.Timeout(config.timeout, connect=config.connect_timeout)
        headers = {
            "Content-Type": "application/json",
            "Accept": "text/event-stream",
            # Compressed event streams are buffered by some proxies; ask for none.
            "Accept-Encoding": "identity",
        }
        if config.api_key:
            headers["Authorization"] = f"Bearer {config.api_key}"
        headers.update(config.headers)
        self._headers = headers

    @property
    def config(self) -> OpenAIConfig:
        return self._config

    @asynccontextmanager
    async def stream(self, request: ModelRequest) -> AsyncIterator[AsyncIterator[StreamChunk]]:
        url = self._config.url
        body = encode_request(self._config.model, request)
        _log.debug("openai: POST %s model=%s messages=%d tools=%d", url,
                   self._config.model, len(request.messages), len(request.tools))
        async with AsyncExitStack() as stack:
            client = self._client
            if client is None:
                client = await stack.enter_async_context(
                    httpx.AsyncClient(verify=_ssl_context(), timeout=self._timeout))
            with _http_errors(url):
                response = await stack.enter_async_context(client.stream(
                    "POST", url, content=body, headers=self._headers, timeout=self._timeout))
            await self._check(response)
            chunks = _ChunkStream(response.aiter_bytes(),
                                  ChatStreamDecoder(self._max_event_bytes), url)
            # Unwound before the response closes (an exit stack runs last in, first out).
            stack.push_async_callback(chunks.aclose)
            yield chunks

    async def _check(self, response: httpx.Response) -> None:
        url = self._config.url
        status = response.status_code
        media = response.headers.get("content-type", "").split(";")[0].strip().lower()
        if 200 <= status < 300 and media in ("", "text/event-stream"):
            return
        detail = await self._error_detail(response)
        if not 200 <= status < 300:
            raise ProviderError(f"openai: HTTP {status} {response.reason_phrase} from {url}: "
                                f"{detail}")
        raise ProviderError(f"openai: {url} answered {media}, not an event stream: {detail}")

    async def _error_detail(self, response: httpx.Response) -> str:
        """What an unusable answer says, from at most the first 64 KiB of its body."""
        body = bytearray()
        pieces = response.aiter_bytes()
        try:
            with _http_errors(self._config.url):
                while len(body) < _ERROR_BODY_BYTES:
                    body += await pieces.__anext__()
        except StopAsyncIteration:
            pass
        finally:
            await _unwind(pieces)
        try:
            error = msgspec.json.decode(bytes(body), type=_Event).error
        except (msgspec.DecodeError, msgspec.ValidationError):
            error = None
        text = (_error_text(error) if error is not None
                else _excerpt(body.decode("utf-8", errors="replace")) or "empty body")
        if self._config.api_key:
            text = text.replace(self._config.api_key, "***")
        return text


def provider_from_config(config: OpenAIProviderConfig,
                         environ: Mapping[str, str] | None = None) -> OpenAIProvider:
    """The provider a session's (or the daemon's) ``{"kind": "openai", ...}`` names.

    Raises :class:`ValueError` when the config and environment name no model or
    name an unset key variable."""
    return OpenAIProvider(OpenAIConfig.resolve(
        base_url=config.base_url, model=config.model, api_key_env=config.api_key_env,
        environ=environ))
