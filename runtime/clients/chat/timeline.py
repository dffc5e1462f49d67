"""A stop's timeline: what stopping did, printed as one block once the stop settles.

Everything the chat would print while a stop is being settled is held here instead:
the timeline's own entries (the abort sent, each ``tool/abort`` and stopped call's
result, a withdrawn prompt, ``turn/end``), each with its time since the abort was
sent; the stopped turn's other output (its interrupted message, a permission
answered); and whatever came after the stopped turn ended (with ``keepInbox``, the
next turn's output). When ``agent.abort`` is answered, :meth:`StopTimeline.block`
gives them in that order: the stopped turn's output, then the timeline sorted by
time, then the answer, then the next turn. While it settles, the live part shows the
entries so far (:meth:`StopTimeline.live`). Pure, like the view.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rich.text import Text

Lines = list[Text]
LIVE_HELD = 6  # of the stopped turn's held output, shown live while the stop settles


def ms(seconds: float) -> str:
    return f"{seconds * 1000:+9.1f} ms"


@dataclass
class StopTimeline:
    """A stop the user asked for: the timeline's origin and what it has seen."""

    sent: float
    keep_inbox: bool
    via: str
    processes_before: int
    calls: set[str] = field(default_factory=set)
    entries: list[tuple[float, int, Text]] = field(default_factory=list)
    before: Lines = field(default_factory=list)  # the stopped turn's own output
    after: Lines = field(default_factory=list)  # after the stopped turn ended
    turn_ended: bool = False

    def at(self, now: float, text: str, style: str = "yellow") -> None:
        """A timeline entry, ``now`` (monotonic seconds) after nothing in particular."""
        since = now - self.sent
        self.entries.append((since, len(self.entries), Text(f"  {ms(since)}  {text}",
                                                            style=style)))

    def hold(self, lines: Lines) -> None:
        """Output that is not the timeline's: kept in place, printed with the block."""
        (self.after if self.turn_ended else self.before).extend(lines)

    def timeline(self) -> Lines:
        keep = ", keeping queued prompts" if self.keep_inbox else ""
        return [Text(f"■ Stop ({self.via}): stop timeline", style="bold yellow"),
                Text(f"  {ms(0.0)}  agent.abort sent (cause user{keep})", style="yellow"),
                *(text for _, _, text in sorted(self.entries, key=lambda e: e[:2]))]

    def block(self, answer: Lines) -> Lines:
        return [*self.before, *self.timeline(), *answer, *self.after]

    def live(self) -> Lines:
        return [*self.before[-LIVE_HELD:], *self.timeline()]
