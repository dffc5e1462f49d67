"""Server-sent events, sans-IO: bytes in, events out.

Follows the event-stream interpretation of the WHATWG HTML standard (section
"Server-sent events"): lines end with CRLF, LF or CR (a CR at the end of one
chunk and an LF at the start of the next are one line ending); a leading UTF-8
BOM is dropped; lines starting with ``:`` are comments; ``field: value`` drops
one space after the colon; ``data`` lines of one event are joined with ``\\n``;
a blank line dispatches the event, and an event with no ``data`` line is not
dispatched. What is left unfinished when the stream ends is discarded, as the
standard says; :meth:`SSEDecoder.end` reports whether anything was.

No I/O happens here: the caller feeds whatever bytes arrived, in whatever
pieces, and gets the events those bytes completed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_EOL = re.compile(rb"\r\n|\r|\n")
_BOM = "\ufeff"

DEFAULT_MAX_EVENT_BYTES = 8 * 1024 * 1024


class SSEError(Exception):
    """The byte stream cannot be an event stream (an event or a line is too long)."""


@dataclass(frozen=True)
class ServerSentEvent:
    data: str
    event: str = "message"
    id: str | None = None


class SSEDecoder:
    def __init__(self, max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES) -> None:
        self._max = max_event_bytes
        self._buf = bytearray()
        self._pending_cr = False
        self._first_line = True
        self._data: list[str] = []
        self._data_size = 0
        self._event = ""
        self._last_id: str | None = None

    def feed(self, data: bytes) -> list[ServerSentEvent]:
        """Take the next bytes of the stream; return the events they complete."""
        if not data:
            return []
        if self._pending_cr:
            self._pending_cr = False
            if data.startswith(b"\n"):
                data = data[1:]
        scan_from = len(self._buf)  # the buffer holds no line ending yet
        self._buf += data
        events: list[ServerSentEvent] = []
        start = 0
        end = None
        for match in _EOL.finditer(self._buf, scan_from):
            self._line(bytes(self._buf[start:match.start()]), events)
            start = end = match.end()
        if end is not None:
            self._pending_cr = end == len(self._buf) and self._buf.endswith(b"\r")
            del self._buf[:start]
        if len(self._buf) > self._max:
            raise SSEError(f"an event stream line is longer than {self._max} bytes")
        return events

    def end(self) -> bool:
        """The stream ended: discard what is unfinished; say whether anything was."""
        unfinished = bool(self._buf) or bool(self._data)
        self._buf.clear()
        self._data.clear()
        self._data_size = 0
        self._event = ""
        return unfinished

    def _line(self, raw: bytes, events: list[ServerSentEvent]) -> None:
        line = raw.decode("utf-8", errors="replace")
        if self._first_line:
            self._first_line = False
            line = line.removeprefix(_BOM)
        if not line:
            self._dispatch(events)
            return
        if line.startswith(":"):
            return
        name, colon, value = line.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        if name == "data":
            self._data_size += len(value) + 1
            if self._data_size > self._max:
                raise SSEError(f"an event stream event is longer than {self._max} bytes")
            self._data.append(value)
        elif name == "event":
            self._event = value
        elif name == "id":
            if "\0" not in value:
                self._last_id = value
        # "retry" and unknown fields are ignored: reconnection is not ours to do.

    def _dispatch(self, events: list[ServerSentEvent]) -> None:
        if self._data:
            events.append(ServerSentEvent("\n".join(self._data), self._event or "message",
                                          self._last_id))
        self._data = []
        self._data_size = 0
        self._event = ""
