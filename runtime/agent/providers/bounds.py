"""What one model response may make the runtime hold: its tool calls, and its text.

A provider collects a tool call's fragments until the call is complete (``base``), so a
server that streams fragments without end, or a name that never stops growing, would grow
the runtime without bound (400 MB of fragments once took it to 435 MB). A
:class:`CallBudget` per response counts what the decoders hold: past a bound the response
is a :class:`ProviderError` naming the call and the bound, and the turn ends with it.

The bounds: a tool name of at most :data:`MAX_TOOL_NAME` characters (vendors' own limit
is 64 to 128); at most :data:`MAX_TOOL_CALLS` calls in one response; at most
:data:`MAX_CALL_ARGUMENTS` characters of arguments (and of thinking signatures) in one
response, its calls together: more could not reach the host anyway, whose link carries
a call's arguments in one frame (8 MiB by default, JSON-escaped). And at most
:data:`MAX_RESPONSE_TEXT` characters of text and reasoning in one response (the turn keeps
them: a server that never stops sending would grow the runtime too); that is some four
million tokens, far beyond any model's output limit.
"""

from __future__ import annotations

from runtime.agent.providers.base import ProviderError

MAX_TOOL_NAME = 256
MAX_TOOL_CALLS = 128
MAX_CALL_ARGUMENTS = 4 * 1024 * 1024
MAX_RESPONSE_TEXT = 16 * 1024 * 1024


class CallBudget:
    """The tool-call fragments one response has streamed so far, against the bounds."""

    def __init__(self, vendor: str) -> None:
        self._vendor = vendor
        self._held = 0
        self._text = 0

    def name(self, name: str, call: str) -> None:
        if len(name) > MAX_TOOL_NAME:
            raise ProviderError(
                f"{self._vendor}: the tool name of call {call} is longer than "
                f"{MAX_TOOL_NAME} characters ({name[:64]!r}...): the response is refused")

    def calls(self, count: int) -> None:
        if count > MAX_TOOL_CALLS:
            raise ProviderError(f"{self._vendor}: the response has more than "
                                f"{MAX_TOOL_CALLS} tool calls: refused")

    def take(self, size: int, call: str) -> None:
        """``size`` more characters of ``call``'s arguments (or a signature) held."""
        self._held += size
        if self._held > MAX_CALL_ARGUMENTS:
            raise ProviderError(
                f"{self._vendor}: the tool-call arguments of this response exceed "
                f"{MAX_CALL_ARGUMENTS} characters (at call {call}): the response is refused")

    def text(self, size: int) -> None:
        """``size`` more characters of text or reasoning streamed."""
        self._text += size
        if self._text > MAX_RESPONSE_TEXT:
            raise ProviderError(
                f"{self._vendor}: the response's text exceeds {MAX_RESPONSE_TEXT} characters "
                "(a server that does not stop sending): the response is refused")
