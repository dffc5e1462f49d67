"""The screen: an inline prompt_toolkit application, with rich rendering the lines.

Committed lines are rendered by rich to ANSI text and printed above the
application inside prompt_toolkit's ``in_terminal`` (it erases the live part,
the text scrolls up, the live part is drawn again below); the live part (the
view's spinners, progress and permission question) and the input line are the
application's layout. prompt_toolkit owns the terminal: nothing else writes to it
while the application runs.
"""

from __future__ import annotations

import collections
import io
import sys
from collections.abc import Callable, Sequence

from prompt_toolkit.application import Application, in_terminal
from prompt_toolkit.application.current import set_app
from prompt_toolkit.buffer import Buffer
from prompt_toolkit.filters import Condition
from prompt_toolkit.formatted_text import ANSI, StyleAndTextTuples
from prompt_toolkit.key_binding import (
    DynamicKeyBindings,
    KeyBindingsBase,
    merge_key_bindings,
)
from prompt_toolkit.key_binding.defaults import load_key_bindings
from prompt_toolkit.layout import (
    BufferControl,
    ConditionalContainer,
    FormattedTextControl,
    HSplit,
    Layout,
    Window,
)
from prompt_toolkit.layout.processors import BeforeInput
from rich.console import Console
from rich.text import Text

# How long prompt_toolkit waits after a lone Esc byte for the rest of an escape
# sequence: short, so Esc stops at once (arrow keys arrive in one read anyway).
ESC_TIMEOUT_S = 0.05
MIN_REDRAW_S = 0.05
RECENT_LINES = 200  # committed lines kept to print again after a resize


def to_ansi(lines: Sequence[Text], width: int, *, wrap: bool) -> str:
    """Lines as ANSI text for a terminal ``width`` columns wide: wrapped, or (``wrap``
    false: the live part) each cut to one row, unless the line was made with
    ``no_wrap=False`` (the permission question, which must never be cut)."""
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, color_system="standard", width=width,
                      highlight=False, emoji=False, markup=False, legacy_windows=False)
    for line in lines:
        if wrap or line.no_wrap is False:  # a line that asks to wrap (a permission's call)
            console.print(line)
        else:
            console.print(line, no_wrap=True, overflow="ellipsis")
    return out.getvalue()


class _ChatApplication(Application[None]):
    """The application, redrawn whole on a resize.

    prompt_toolkit erases its previous drawing on a resize by moving the cursor up as many
    rows as it drew; a terminal that re-wraps its lines to the new width (tmux, VTE, most
    today) has moved them, so rows of the old live part (a spinner, an output tail) stay
    on screen. Instead, the visible screen is cleared and the end of what was committed is
    printed again at the new width (the rows above it are in the terminal's scrollback,
    as they were), then the live part is drawn below it.
    """

    reprint: Callable[[], None] = staticmethod(lambda: None)

    def _on_resize(self) -> None:
        self.output.write_raw("\x1b[2J\x1b[H")  # clear the visible screen, cursor home
        self.reprint()
        self.renderer.reset(leave_alternate_screen=False)  # the old drawing is gone
        self._request_absolute_cursor_position()
        self._redraw()


class Terminal:
    def __init__(self, live: Callable[[], list[Text]],
                 asking: Callable[[], bool] = lambda: False) -> None:
        self._live = live
        self._asking = asking
        self._pending: list[Sequence[Text]] = []
        self._printing = False
        # What was printed last, to print again after a resize (a screenful at most).
        self._recent: collections.deque[Text] = collections.deque(maxlen=RECENT_LINES)
        self.buffer = Buffer(multiline=False)
        self.key_bindings: KeyBindingsBase | None = None  # the chat's keys, set by the caller
        live_window = ConditionalContainer(
            Window(FormattedTextControl(self._live_text), dont_extend_height=True,
                   wrap_lines=False),
            filter=Condition(lambda: bool(self._live())))
        # The input line's marker says what Enter does: send a prompt, or (while a
        # permission prompt shows) answer it with the one letter typed.
        input_window = Window(BufferControl(self.buffer, input_processors=[
            BeforeInput(self._marker)]), height=1)
        self.app: _ChatApplication = _ChatApplication(
            layout=Layout(HSplit([live_window, input_window]), focused_element=input_window),
            key_bindings=merge_key_bindings([
                load_key_bindings(), DynamicKeyBindings(lambda: self.key_bindings)]),
            full_screen=False, erase_when_done=True, mouse_support=False,
            # A flood of progress redraws the live part at most 20 times a second.
            min_redraw_interval=MIN_REDRAW_S)
        self.app.ttimeoutlen = ESC_TIMEOUT_S
        self.app.reprint = self._reprint

    def _marker(self) -> StyleAndTextTuples:
        if self._asking():
            return [("bold ansimagenta", "answer y/a/n/d> ")]
        return [("bold ansicyan", "> ")]

    @property
    def width(self) -> int:
        return max(20, self.app.output.get_size().columns)

    def _live_text(self) -> ANSI:
        return ANSI(to_ansi(self._live(), self.width, wrap=False).rstrip("\n"))

    # -- the Screen port of the controller ----------------------------------------------

    def commit(self, lines: Sequence[Text]) -> None:
        if not lines:
            return
        self._pending.append(list(lines))
        if self.app.is_running and not self._printing:
            self._printing = True
            # in_terminal finds the application through prompt_toolkit's context variable;
            # this code runs in a trio task (guest mode), whose context lacks it.
            with set_app(self.app):
                self.app.create_background_task(self._print_pending())

    def refresh(self) -> None:
        if self.app.is_running:
            self.app.invalidate()

    async def _print_pending(self) -> None:
        try:
            while self._pending:
                async with in_terminal():
                    batch, self._pending = self._pending, []
                    for lines in batch:
                        self._recent.extend(lines)
                    text = "".join(to_ansi(lines, self.width, wrap=True) for lines in batch)
                    self.app.output.write_raw(text.replace("\n", "\r\n"))
                    self.app.output.flush()
        finally:
            self._printing = False

    def _reprint(self) -> None:
        """After the screen was cleared by a resize: the last committed lines that fit
        above the live part, wrapped at the new width."""
        size = self.app.output.get_size()
        room = max(0, size.rows - len(self._live()) - 2)
        rows = to_ansi(list(self._recent), max(20, size.columns), wrap=True).splitlines()
        if room and rows:
            self.app.output.write_raw("\r\n".join(rows[-room:]) + "\r\n")

    def print_leftovers(self) -> None:
        """After the application ended: what it had no time to print."""
        batch, self._pending = self._pending, []
        width = self.app.output.get_size().columns if sys.stdout.isatty() else 100
        for lines in batch:
            sys.stdout.write(to_ansi(lines, width, wrap=True))
        sys.stdout.flush()
