"""What the chat shows, as a pure function of what happened: events in, lines out.

The view keeps the state the screen needs (calls in flight with their output tail,
pending permission prompts, a stop being settled) and turns each input (a session
event, a stop sent or answered, a prompt asked or withdrawn) into *committed* lines,
printed once above the input, while :meth:`ChatView.live` renders the part that
changes in place (spinners, progress, the permission question). No terminal, no
clock and no I/O here: the caller passes ``now`` (monotonic seconds), so the tests
feed events and read lines.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field

from rich.text import Text

from protocol.messages.client import AgentAbortResult
from protocol.messages.events import (
    NO_PROVIDER_ERROR,
    AnnouncedEvent,
    AssistantDeltaEvent,
    AssistantMessageEvent,
    HookDecisionEvent,
    SessionMeta,
    StopWaitingEvent,
    ToolAbortEvent,
    ToolCallEvent,
    ToolProgressEvent,
    ToolResultEvent,
    ToolStartedEvent,
    TurnEnd,
    TurnStart,
    UserMessageEvent,
)
from runtime.clients.chat.commands import CHOOSE_MODEL
from runtime.clients.chat.maintenance import maintenance_lines, turn_usage_lines
from runtime.clients.chat.permission_view import PermissionView, printed_call, question_lines
from runtime.clients.chat.timeline import StopTimeline, ms
from runtime.clients.eventrender import render
from runtime.clients.eventrender import summarize_args as summarize_args

SPINNER = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"
TAIL_LINES = 3
STREAM_LINES = 6  # of the response streaming in, shown live until its message lands

Lines = list[Text]


@dataclass
class CallView:
    call_id: str
    tool: str
    tool_class: str
    summary: str
    started: float | None = None  # when its body started (tool/started), if it did
    asking: bool = False  # a permission prompt for it is open
    tail: collections.deque[str] = field(
        default_factory=lambda: collections.deque(maxlen=TAIL_LINES))
    chunks: int = 0

    def elapsed(self, now: float) -> str:
        """How long its body has run; not a timer while it waits to start."""
        if self.started is not None:
            return f"{now - self.started:.1f}s"
        return "waiting for permission" if self.asking else "waiting to start"


def _took(event: ToolResultEvent, call: CallView | None, now: float) -> str:
    """How long the call's body ran: the host's measure when it gives one, else from its
    tool/started (a replayed call has none: no made-up 0.0s), else nothing."""
    duration = event.details.get("durationMs")
    if isinstance(duration, int | float) and not isinstance(duration, bool):
        return f"{duration / 1000:.1f}s"
    if call is not None and call.started is not None:
        return f"{now - call.started:.1f}s"
    return ""


class ChatView:
    def __init__(self) -> None:
        self.calls: dict[str, CallView] = {}
        self.permissions: collections.OrderedDict[str, PermissionView] = (
            collections.OrderedDict())
        self.stop: StopTimeline | None = None
        self.turn_id: str | None = None
        self.queued = 0  # prompts sent and not yet begun (the daemon's inbox)
        self.streaming: list[tuple[str, str]] = []  # (type, text) of the step streaming in

    # -- the agent's events -------------------------------------------------------------

    def event(self, event: AnnouncedEvent, now: float) -> Lines:
        """The lines to print for an event; while a stop settles, none: it holds them."""
        lines = self._event(event, now)
        if self.stop is None:
            return lines
        self.stop.hold(lines)
        return []

    def hold(self, lines: Lines) -> Lines:
        """Lines to print, unless a stop is settling: then they wait for its block."""
        if self.stop is None:
            return lines
        self.stop.hold(lines)
        return []

    def _event(self, event: AnnouncedEvent, now: float) -> Lines:
        stop = self.stop
        if isinstance(event, SessionMeta):
            return [Text(f"session {event.session_id} · {event.workspace} · "
                         f"{event.permission_mode}", style="dim")]
        if isinstance(event, TurnStart):
            self.turn_id = event.turn_id
            return []
        if isinstance(event, UserMessageEvent):
            return [Text.assemble(("> ", "bold cyan"), (event.text, "bold"))]
        if isinstance(event, AssistantDeltaEvent):
            if self.streaming and self.streaming[-1][0] == event.type:
                self.streaming[-1] = (event.type, self.streaming[-1][1] + event.text)
            else:
                self.streaming.append((event.type, event.text))
            return []
        if isinstance(event, AssistantMessageEvent):
            self.streaming.clear()  # the record replaces what streamed
            return self._message(event)
        if isinstance(event, ToolCallEvent):
            return self._call(event, now)
        if isinstance(event, ToolStartedEvent):
            started = self.calls.get(event.call_id)
            if started is not None:
                started.started, started.asking = now, False
            return []
        if isinstance(event, ToolProgressEvent):
            call = self.calls.get(event.call_id)
            if call is not None:
                call.chunks += 1
                call.tail.extend(line for line in event.text.splitlines() if line.strip())
            return []
        if isinstance(event, ToolAbortEvent):
            found = render(event).host_found
            if stop is None:  # an operator's stop: shown, without a timeline of ours
                return [Text(f"  ■ {found}", style="yellow")]
            stop.calls.add(event.call_id)
            body = ", body running" if event.body_invoked else ", body never started"
            stop.at(now, f"{found}{body}")
            return []
        if isinstance(event, ToolResultEvent):
            return self._result(event, now)
        if isinstance(event, HookDecisionEvent):
            return self._hook(event)
        if isinstance(event, StopWaitingEvent):
            return self._waiting(event, now)
        if isinstance(event, TurnEnd):
            return self._turn_end(event, now) + turn_usage_lines(event)
        return maintenance_lines(event)

    def _waiting(self, event: StopWaitingEvent, now: float) -> Lines:
        """What the stop waits on, as it changes: a timeline entry (a line of its own when
        the stop is an operator's, with no timeline of ours)."""
        waits = ", ".join(f"{c.call_id} ({c.tool}, {c.tool_class}, {c.state})"
                          for c in event.calls)
        text = f"waiting on {waits}" if waits else "waiting on no call any more"
        if self.stop is None:
            return [Text(f"  ■ stop {text}", style="yellow")]
        self.stop.at(now, text)
        return []

    def _hook(self, event: HookDecisionEvent) -> Lines:
        """A hook that did more than allow is shown under its call."""
        if event.decision == "allow":
            return []
        reason = f": {event.reason}" if event.reason else ""
        return ([Text(f"  ⚑ {event.event} hook {event.decision}{reason}",
                      style="yellow")])

    def _message(self, event: AssistantMessageEvent) -> Lines:
        lines: Lines = []
        for block in event.blocks:
            if block.type == "reasoning":
                lines.append(Text(f"  {block.text}", style="dim italic"))
            else:
                lines.append(Text(block.text))
        if event.interrupted and lines:
            lines[-1].append(" [interrupted]", style="bold yellow")
        return lines

    def _call(self, event: ToolCallEvent, now: float) -> Lines:
        subject = render(event).subject
        self.calls[event.call_id] = CallView(event.call_id, event.tool, event.tool_class,
                                             subject)
        return [Text.assemble(("● ", "cyan"), (event.tool, "bold"),
                              (f" ({event.tool_class}) ", "dim"), subject,
                              (f"  [{event.call_id}]", "dim"))]

    def _result(self, event: ToolResultEvent, now: float) -> Lines:
        call = self.calls.pop(event.call_id, None)
        tool = call.tool if call is not None else "?"
        record = render(event)
        code, note = record.code, record.stop_note
        stop = self.stop
        if stop is not None and (event.call_id in stop.calls or event.is_error):
            stop.calls.add(event.call_id)
            stop.at(now, f"{event.call_id} ({tool}): {code}" + (f", {note}" if note else ""))
            return []
        took = _took(event, call, now)
        took = f" {took}" if took else ""
        mark, style = ("✓", "green") if not event.is_error else ("✗", "red")
        detail = note or ("" if not event.is_error else record.first_line)
        line = Text.assemble((f"{mark} ", style), (tool, "bold"), f" {code}",
                             (took, "dim"), (f"  [{event.call_id}]", "dim"))
        if detail:
            line.append(f"  {detail}", style="dim")
        return [line]

    def _turn_end(self, event: TurnEnd, now: float) -> Lines:
        self.turn_id = None
        self.calls.clear()
        self.streaming.clear()  # a stop that left nothing visible records no message
        end = event.end
        stop = self.stop
        if end.kind == "aborted":
            cause = render(event).cause
            if stop is not None and not stop.turn_ended:
                stop.at(now, f"turn/end aborted ({cause}) on disk")
                stop.turn_ended = True
                return []
            return [Text(f"■ turn stopped ({cause})", style="yellow")]
        if end.kind == "error":
            if (end.error or "").startswith(NO_PROVIDER_ERROR):  # said for a chat's user
                return [Text("✗ no model is configured. " + CHOOSE_MODEL, style="bold red")]
            return [Text(f"✗ the turn ended with an error: {end.error}", style="bold red")]
        if end.kind == "interrupted":
            return [Text("■ this turn was interrupted (the runtime died during it)",
                         style="yellow")]
        if event.stop_reason == "max_steps":
            return [Text("the turn reached its step limit", style="dim")]
        return []

    # -- stops ---------------------------------------------------------------------------

    def stop_sent(self, now: float, *, keep_inbox: bool, via: str,
                  processes_before: int) -> Lines:
        """A stop sent: its timeline begins (printed once it settles, live till then)."""
        self.stop = StopTimeline(now, keep_inbox, via, processes_before)
        return []

    def stop_answered(self, result: AgentAbortResult, now: float, *,
                      processes_alive: int) -> Lines:
        """The stop settled: its whole block, in order (``runtime.clients.chat.timeline``)."""
        stop = self.stop
        self.stop = None
        if stop is None:
            return []
        if result.outcome == "idle":
            return [*stop.before,
                    Text("  nothing was running: the stop was a no-op", style="yellow"),
                    *stop.after]
        answer = [Text(f"  {ms(now - stop.sent)}  turn settled in {result.settled_ms:.1f} ms "
                       f"(agent.abort answered: {result.outcome})", style="bold yellow")]
        if result.error is not None:
            answer.append(Text(f"  the turn ended with an error: {result.error}", style="red"))
        for c in result.tool_calls:
            answer.append(Text(f"               {c.call_id:10} {c.tool:8} {c.tool_class:9} "
                               f"{c.code or 'ok'}", style="yellow"))
        before = stop.processes_before
        if before or processes_alive:
            style = "bold red" if processes_alive else "yellow"
            answer.append(Text(f"  process tree: {before} tool processes before the stop, "
                               f"{processes_alive} alive after it settled", style=style))
        return stop.block(answer)

    def stop_failed(self) -> Lines:
        """The stop's answer never came (the link failed): what it held, unsorted loss-free."""
        stop = self.stop
        self.stop = None
        return [] if stop is None else stop.block([])

    # -- permission prompts --------------------------------------------------------------

    def permission_asked(self, request_id: str, tool: str, preview: str, risk: str,
                         call_id: str | None = None) -> Lines:
        """A prompt opened. The lines to print at once: none when the live part can show
        its whole call, else the whole call (see
        :func:`runtime.clients.chat.permission_view.printed_call`), never cut."""
        self.permissions[request_id] = PermissionView(request_id, tool, preview, risk, call_id)
        if call_id is not None and call_id in self.calls:
            self.calls[call_id].asking = True
        return printed_call(tool, preview, call_id)

    def permission_answered(self, request_id: str, decision: str) -> Lines:
        asked = self.permissions.pop(request_id, None)
        call = self.calls.get(asked.call_id or "") if asked is not None else None
        if call is not None:
            call.asking = False
        tool = asked.tool if asked is not None else "?"
        return [Text(f"  permission for {tool}: {decision}", style="cyan")]

    def permission_withdrawn(self, request_id: str, now: float) -> Lines:
        asked = self.permissions.pop(request_id, None)
        if asked is None:
            return []
        call = self.calls.get(asked.call_id or "")
        if call is not None:
            call.asking = False
        if self.stop is not None:
            self.stop.at(now, f"permission prompt for {asked.tool} withdrawn by the stop "
                         "(the call never ran)")
            return []
        # Not our stop: the host gave up waiting (the call is denied) or an operator
        # stopped the turn; either way the call never ran.
        return [Text(f"  permission prompt for {asked.tool} withdrawn unanswered (it timed "
                     "out and the call was denied, or an operator stopped the turn)",
                     style="yellow")]

    def shown_permission(self) -> tuple[str, float | None] | None:
        """The prompt first on screen (the one Enter answers), and when it was first drawn."""
        first = next(iter(self.permissions.values()), None)
        return None if first is None else (first.request_id, first.drawn)

    # -- the part that changes in place --------------------------------------------------

    def live(self, now: float) -> Lines:
        frame = SPINNER[int(now * 10) % len(SPINNER)]
        lines: Lines = []
        streamed: Lines = []
        for kind, text in self.streaming:
            style = "dim italic" if kind == "reasoning" else ""
            indent = "  " if kind == "reasoning" else ""
            streamed.extend(Text(f"{indent}{line}", style=style) for line in text.splitlines())
        lines.extend(streamed[-STREAM_LINES:])
        for call in self.calls.values():
            lines.append(Text.assemble((f"{frame} ", "cyan"), (call.tool, "bold"),
                                       (f" ({call.tool_class}) ", "dim"), call.summary,
                                       (f"  {call.elapsed(now)}", "dim")))
            lines.extend(Text(f"    │ {line[:100]}", style="dim") for line in call.tail)
        if self.permissions:
            first = next(iter(self.permissions.values()))
            if first.drawn is None:
                first.drawn = now
            lines.extend(question_lines(first))
            if len(self.permissions) > 1:
                more = len(self.permissions) - 1
                lines.append(Text(f"  ({more} more permission prompt{'s' if more > 1 else ''}"
                                  " waiting after this one)", style="magenta"))
        if self.stop is not None:
            lines.extend(self.stop.live())
            lines.append(Text(f"{frame} stopping… {(now - self.stop.sent) * 1000:.0f} ms",
                              style="yellow"))
        elif self.turn_id is not None and not self.calls and not self.permissions:
            lines.append(Text(f"{frame} working…", style="dim"))
        if self.queued:
            lines.append(Text(f"  {self.queued} prompt(s) queued (/stop-keep keeps them on a "
                              "stop)", style="dim"))
        return lines

    @property
    def animating(self) -> bool:
        return bool(self.calls or self.stop is not None or self.turn_id is not None)
