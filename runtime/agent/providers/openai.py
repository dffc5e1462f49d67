"""The openai provider: an OpenAI-compatible Chat Completions streaming client.

One step is one ``POST {base_url}/chat/completions`` with ``"stream": true``;
the answer is a server-sent event stream of ``chat.completion.chunk`` objects,
ended by ``data: [DONE]``. Its configuration is :mod:`.openai_config`, its wire
format (request encoding, stream decoding) :mod:`.openai_wire`; the I/O, the
close-at-once on a stop and the error mapping are the shared
:func:`runtime.agent.providers.http.post_stream`.

The API key goes only into the ``Authorization`` header; it is kept out of
reprs and log lines, and masked if an HTTP error body echoes it.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager

import httpx

from protocol.messages.client import OpenAIProviderConfig
from runtime.agent.providers.base import ModelRequest, StreamChunk
from runtime.agent.providers.http import post_stream
from runtime.agent.providers.openai_config import DEFAULT_BASE_URL, OpenAIConfig
from runtime.agent.providers.openai_wire import ChatStreamDecoder, encode_request, error_text
from runtime.agent.providers.sse import DEFAULT_MAX_EVENT_BYTES

__all__ = [
    "DEFAULT_BASE_URL",
    "ChatStreamDecoder",
    "OpenAIConfig",
    "OpenAIProvider",
    "encode_request",
    "provider_from_config",
]

_log = logging.getLogger(__name__)


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
        _log.debug("openai: POST %s model=%s messages=%d tools=%d", url,
                   self._config.model, len(request.messages), len(request.tools))
        async with post_stream(vendor="openai", url=url,
                               body=encode_request(self._config, request),
                               headers=self._headers, http_timeout=self._timeout,
                               decoder=ChatStreamDecoder(self._max_event_bytes),
                               error_text=error_text, secrets=(self._config.api_key,),
                               client=self._client) as chunks:
            yield chunks


def provider_from_config(config: OpenAIProviderConfig,
                         environ: Mapping[str, str] | None = None) -> OpenAIProvider:
    """The provider a session's (or the daemon's) ``{"kind": "openai", ...}`` names.

    Raises :class:`ValueError` when the config and environment name no model or
    name an unset key variable."""
    return OpenAIProvider(OpenAIConfig.resolve(config, environ=environ))
