"""One side of a JSON-RPC link over a pair of byte streams, under trio.

Framing and envelopes come from ``protocol`` (sans-IO); this module adds the
I/O: a reader task, and the link's parts it composes: the single writer task
(``writer.py``: two tasks writing one stream raise ``BusyResourceError``, and a cancelled
``send_all`` could tear a frame), and id correlation for the requests this side sends
(``correlation.py``).

Requests take effect in wire order: the reader hands each request to
``nursery.start`` and reads the next frame once the handler has taken its effect
(as its registration declares it, ``runtime.link.effects``); what the handler then waits for runs in
its own task, so a later ``tools.abort`` is read while earlier requests still
run, and answers come back in any order. A request whose method has an instant
handler that answers (``add_instant_handler``) is answered in the reader itself, with
no task: its effect is taken before the next frame is read, trivially. A batch's
members are started the same way, one after the other, and answered together (split
over several frames if one would be too large). Notifications are handled inline by synchronous
handlers, so their order on the wire is the order they are handled in
(``tools.output`` relies on it).

Output waiting for a slow peer can be bounded (``max_queued``; the client link's and the
ops socket's are): once more than a quarter of it is queued the reader takes no next
frame until the writer is down to an eighth (backpressure: a peer that does not read gets
no more of its requests served), and past it the peer is taken as gone: its output is
dropped and the link ends as if it had closed (on the daemon's stdio, the end of input:
every turn stopped, the daemon exits). The bound is kept by the writer (``writer.py``).

Nothing is written over the frame limit: an answer that would be is an error
answer, a notification that would be has its longest strings shortened
(``protocol.bounds.shorten``), and a request that would be raises
:class:`OversizedMessage` (``fitting.py``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import msgspec
import trio

from protocol.envelope import (
    Batch,
    Incoming,
    IncomingNotification,
    IncomingRequest,
    IncomingResponse,
    InvalidMessage,
    encode_message,
    encode_notification,
    encode_request,
    error_response,
    parse_frame,
)
from protocol.errors import ERROR_MESSAGES, ErrorCode
from protocol.framing import DEFAULT_MAX_FRAME_SIZE, Frame, FrameDecoder
from protocol.methods import Direction, RequestId
from runtime.link.batch import BatchReply
from runtime.link.correlation import Correlation, NotSent, SentRequest
from runtime.link.dispatch import (
    InstantHandler,
    NotificationHandler,
    dispatch_now,
    dispatch_request,
)
from runtime.link.effects import Effect, Handler, start_in_order
from runtime.link.fitting import OversizedMessage, fitted, shortened
from runtime.link.writer import Writer

log = logging.getLogger(__name__)

READ_CHUNK = 65536
SLOW_EFFECT = 0.5
"""A handler that takes longer to take its effect (the reader waits for it) is logged."""


class Endpoint:
    def __init__(
        self,
        name: str,
        receive: trio.abc.ReceiveStream,
        send: trio.abc.SendStream,
        *,
        incoming: Direction,
        outgoing: Direction,
        handlers: Mapping[str, Handler] | None = None,
        notification_handlers: Mapping[str, NotificationHandler] | None = None,
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
        max_read_frame_size: int | None = None,
        max_queued: int | None = None,
    ) -> None:
        """``max_frame_size``: the limit of what is written, and of what is read unless
        ``max_read_frame_size`` gives a smaller one (the ops socket's). ``max_queued``:
        bytes of output held for the peer (None: no bound, the host link's, whose two
        ends read each other)."""
        self.name = name
        self._receive = receive
        self._incoming = incoming
        self._outgoing = outgoing
        self._handlers: dict[str, Handler] = dict(handlers or {})
        self._instant: dict[str, InstantHandler] = {}
        self._notification_handlers = dict(notification_handlers or {})
        self._max_frame_size = max_frame_size
        self._max_read_frame_size = max_read_frame_size or max_frame_size
        self._correlation = Correlation(name)
        self._writer = Writer(name, send, max_queued, self.stop_reading)
        self._pauses = 0
        self._nursery: trio.Nursery | None = None
        self._reading = True
        self._receive_scope: trio.CancelScope | None = None
        self._idle = trio.Event()  # set while the reader waits for bytes (or has ended)
        self.closed = trio.Event()
        self.frames_in = 0

    @property
    def queued(self) -> int:
        """Bytes of output not written yet."""
        return self._writer.queued

    @property
    def frames_out(self) -> int:
        """Frames written to the peer."""
        return self._writer.frames_out

    def add_handler(self, method: str, handler: Handler) -> None:
        """Serve ``method``; when its effect is taken is ``handler``'s declaration's
        (``runtime.link.effects``: by default, when it answers)."""
        self._handlers[method] = handler

    def add_instant_handler(self, method: str, handler: InstantHandler) -> None:
        """Answer ``method`` in the reader when ``handler`` can (no task, no wake-up): its
        ``Handler`` runs only when it declines."""
        self._instant[method] = handler

    def add_notification_handler(self, method: str, handler: NotificationHandler) -> None:
        self._notification_handlers[method] = handler

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Serve until the peer closes its side and every running handler has answered."""
        async with trio.open_nursery() as outer:
            outer.start_soon(self._writer.run)
            async with trio.open_nursery() as handlers:
                self._nursery = handlers
                task_status.started()
                try:
                    await self._read_loop()
                finally:
                    # Also when the link is cancelled: nobody may wait for an answer forever.
                    self._on_closed()
            self._writer.close()

    def stop_reading(self) -> None:
        """Read no more; ``run`` returns once running handlers answered and output drained.
        (A handler still taking its effect is not cancelled: it runs on like the others.)"""
        self._reading = False
        if self._receive_scope is not None:
            self._receive_scope.cancel()

    async def caught_up(self) -> None:
        """Return once every frame already read has been taken (its effect, for a request):
        at once if the reader is waiting for bytes, else when it next does."""
        await self._idle.wait()

    def _on_closed(self) -> None:
        self._idle.set()
        self.closed.set()
        self._correlation.close()

    async def request(self, method: str, params: msgspec.Struct, *,
                      request_id: RequestId | None = None) -> Any:
        """Send a request and wait for its typed result; raise RemoteError on an error.

        ``request_id``: a caller-chosen id (a string: never one of the counter's), for a
        caller that must name the request later (MCP's ``notifications/cancelled``).
        """
        return await self.send_request(method, params, request_id=request_id).result()

    def send_request(self, method: str, params: msgspec.Struct, *,
                     request_id: RequestId | None = None) -> SentRequest:
        """Queue a request now (so it keeps its place among what this task sends next);
        its answer is awaited with :meth:`SentRequest.result`. Raise ``NotSent`` if the
        link is closed, :class:`OversizedMessage` if it would not fit a frame."""
        spec = self._outgoing.specs[method]
        assert not spec.is_notification, method
        if self.closed.is_set():
            raise NotSent(f"{self.name}: link closed")
        if request_id is None:
            request_id = next(self._correlation.ids)
        payload = encode_request(request_id, method, params)
        if len(payload) > self._max_frame_size:
            raise OversizedMessage(len(payload), self._max_frame_size)
        pending = self._correlation.expect(request_id)
        try:
            self._writer.enqueue(payload)
        except NotSent:
            self._correlation.forget(request_id)
            raise
        return SentRequest(self._correlation, request_id, pending, spec.result_decoder)

    def notify(self, method: str, params: msgspec.Struct) -> None:
        """Queue a notification; never blocks, so it keeps its order among others.

        Also once reading stopped (``closed``): a shutting-down daemon still tells its
        client how each turn ended. Dropped only once the writer is gone."""
        assert self._outgoing.specs[method].is_notification, method
        payload = encode_notification(method, params)
        if len(payload) > self._max_frame_size:
            short = shortened(self.name, method, params, len(payload),
                              self._max_frame_size)
            if short is None:
                return
            payload = short
        self._writer.enqueue_quietly(payload)

    async def _read_loop(self) -> None:
        decoder = FrameDecoder(self._max_read_frame_size)
        while self._reading:
            self._idle.set()
            with trio.CancelScope() as self._receive_scope:
                try:
                    data = await self._receive.receive_some(READ_CHUNK)
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    return
            if self._receive_scope.cancelled_caught or not data:
                return
            self._idle = trio.Event()
            for event in decoder.feed(data):
                if not self._writer.room.is_set():
                    await self._wait_for_room()
                if not self._reading:
                    return
                if isinstance(event, Frame):
                    self.frames_in += 1
                    await self._handle_parsed(parse_frame(event.data, self._incoming))
                else:
                    log.warning("%s: frame of %d bytes exceeds the %d byte limit", self.name,
                                event.size_at_least, event.limit)
                    self._send_error(None, ErrorCode.INVALID_REQUEST,
                                     f"frame exceeds {event.limit} bytes")

    async def _wait_for_room(self) -> None:
        """Backpressure: take no next frame until the peer has read most of its output."""
        self._pauses += 1
        log.log(logging.WARNING if self._pauses == 1 else logging.DEBUG,
                "%s: %d bytes of output unread by the peer; reading paused (%d times)",
                self.name, self.queued, self._pauses)
        # Not idle: frames read and not taken yet wait too (a turn's first step waits for
        # them, so a stop behind its prompt still stops it).
        with trio.CancelScope() as self._receive_scope:  # stop_reading() ends the wait
            await self._writer.room.wait()
        log.debug("%s: the peer read its output; reading resumed", self.name)

    async def _handle_parsed(self, parsed: Incoming | Batch) -> None:
        """Take the message's effect, in wire order; what a request then waits for runs in
        a task of the endpoint's nursery."""
        assert self._nursery is not None
        if isinstance(parsed, Batch):
            reply = BatchReply(self._max_frame_size, self._writer.enqueue_quietly)
            for item in parsed.items:
                await self._handle_member(item, reply)
            reply.close()
        elif isinstance(parsed, IncomingRequest):
            if self._instant and (now := self._answer_now(parsed)) is not None:
                self._writer.enqueue_quietly(now)
                return
            started = trio.current_time()
            await start_in_order(self._nursery, self._serve_request, parsed)
            if trio.current_time() - started > SLOW_EFFECT:
                log.warning("%s: %s held the reader %.3f s before taking its effect",
                            self.name, parsed.method, trio.current_time() - started)
        elif isinstance(parsed, IncomingNotification):
            self._handle_notification(parsed)
        elif isinstance(parsed, IncomingResponse):
            self._correlation.resolve(parsed)
        elif parsed.respond:
            self._send_error(parsed.id, parsed.code, parsed.data)
        else:
            log.warning("%s: dropped bad notification: %s", self.name, parsed.detail)

    async def _handle_member(self, item: Incoming, reply: BatchReply) -> None:
        assert self._nursery is not None
        if isinstance(item, IncomingRequest):
            if self._instant and (now := self._answer_now(item, room=2)) is not None:
                reply.add(now)
                return
            await start_in_order(self._nursery, self._serve_member, item, reply)
        elif isinstance(item, InvalidMessage):
            if item.respond:
                reply.add(encode_message(error_response(
                    item.id, int(item.code), ERROR_MESSAGES[item.code], item.data)))
        elif isinstance(item, IncomingNotification):
            self._handle_notification(item)
        else:
            self._correlation.resolve(item)

    def _handle_notification(self, note: IncomingNotification) -> None:
        handler = self._notification_handlers.get(note.method)
        if handler is None:
            log.debug("%s: no handler for notification %s", self.name, note.method)
            return
        try:
            handler(note.params)
        except Exception:  # a notification gets no answer: its failure must not end the link
            log.exception("%s: handler of notification %s failed; dropped", self.name,
                          note.method)

    def _send_error(self, request_id: RequestId | None, code: ErrorCode, data: Any) -> None:
        message = error_response(request_id, int(code), ERROR_MESSAGES[code], data)
        self._writer.enqueue_quietly(encode_message(message))

    def _answer_now(self, request: IncomingRequest, room: int = 0) -> bytes | None:
        """The encoded answer of the request's instant handler, if it answers."""
        started = trio.current_time()
        response = dispatch_now(self._instant, request)
        if trio.current_time() - started > SLOW_EFFECT:  # it held the whole loop
            log.warning("%s: the instant handler of %s took %.3f s", self.name,
                        request.method, trio.current_time() - started)
        return None if response is None else fitted(self.name, request, response, room,
                                                     self._max_frame_size)

    async def _answer(self, request: IncomingRequest, effect: Effect, room: int = 0) -> bytes:
        """The encoded answer; ``room``: bytes the frame needs besides it (a batch's ``[]``)."""
        response = await dispatch_request(self._handlers, request, effect)
        return fitted(self.name, request, response, room, self._max_frame_size)

    async def _serve_request(self, request: IncomingRequest, effect: Effect) -> None:
        self._writer.enqueue_quietly(await self._answer(request, effect))

    async def _serve_member(self, request: IncomingRequest, reply: BatchReply,
                            effect: Effect) -> None:
        reply.expect()
        reply.add(await self._answer(request, effect, room=2), answered=True)
