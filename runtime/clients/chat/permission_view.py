"""What the chat shows of a permission prompt: the question and its answers in the live
part, and a call too long for the live part printed whole above it.

The user decides on the whole call, never a cut one: a call up to ``LIVE_PREVIEW_CHARS`` is
shown in the live part on a line that wraps, a longer one is printed whole at once (the
terminal's scrollback holds it) and the question points at it. Pure: no I/O, no clock.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from rich.text import Text

# A permission prompt's call up to this long is shown whole in the live part, wrapped;
# a longer one is printed whole above it (the terminal's scrollback holds it).
LIVE_PREVIEW_CHARS = 600


@dataclass
class PermissionView:
    """One prompt open on screen: the call it asks about, and when the live part drew it."""

    request_id: str
    tool: str
    preview: str
    risk: str
    call_id: str | None = None
    drawn: float | None = None  # when the live part first showed it (None: not yet)


def printed_call(tool: str, preview: str, call_id: str | None) -> list[Text]:
    """The lines a prompt prints at once: none when the live part can show its whole call,
    else the whole call (:func:`whole_call`)."""
    if len(preview) <= LIVE_PREVIEW_CHARS:
        return []
    label = f" [{call_id}]" if call_id else ""
    return [Text.assemble(("? ", "bold magenta"), (tool, "bold"),
                          f"{label} asks to run this call ({len(preview)} characters, "
                          "all shown):"),
            *whole_call(preview)]


def question_lines(asked: PermissionView) -> list[Text]:
    """The question and its answers, each line under 60 columns but the question, which
    holds the whole call and wraps (or points at the call printed whole above)."""
    if len(asked.preview) <= LIVE_PREVIEW_CHARS:
        what = f" wants to run: {asked.preview}"
    else:
        what = (f" wants to run the call printed above in full ({len(asked.preview)} "
                "characters; scroll back to read it)")
    return [Text.assemble(("? ", "bold magenta"), (asked.tool, "bold"), what,
                          (f"  (risk {asked.risk})", "dim"),
                          no_wrap=False, overflow="fold"),
            Text("  answer: type one letter, then Enter · Esc stops the turn",
                 style="bold magenta"),
            Text("    y  allow once          a  allow for the session", style="magenta"),
            Text("    n  deny                d  deny for the session", style="magenta")]


def whole_call(preview: str) -> list[Text]:
    """A call's arguments as lines, nothing left out: an object's fields one by one, a text
    value with its own line breaks; what is not a JSON object, as it came. Each line wraps
    at the terminal's width (``overflow="fold"`` splits a word longer than a row)."""
    try:
        args = json.loads(preview)
    except ValueError:
        args = None
    if not isinstance(args, dict):
        return [Text(f"    {preview}", overflow="fold")]
    lines: list[Text] = []
    for key, value in args.items():
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        rows = text.split("\n")
        lines.append(Text.assemble((f"    {key}: ", "bold"), rows[0], overflow="fold"))
        lines.extend(Text(f"      {row}", overflow="fold") for row in rows[1:])
    return lines
