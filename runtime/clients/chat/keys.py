"""The chat's keys, as prompt_toolkit key bindings (no signals while the UI runs).

Esc and a first Ctrl-C stop the turn; a second Ctrl-C within a second quits
(after the stop settles); Enter submits the line; Ctrl-D on an empty line quits.

Permission prompts are never answered by typing alone: while one is shown, every key
types into the input line as usual, and only Enter on a line that is exactly one
answer letter (y / a / n / d) decides. Any other line is refused with a notice and
stays in the input line (slash commands still work), so a sentence typed at a prompt
("wait, do not do that") neither answers it nor is lost. The input line's marker
says which of the two Enter does. The bindings only build commands: the controller
acts on them.

A line is *bound* to what the screen showed when its first key was typed (the buffer
going from empty to non-empty): the prompt then first on screen, or none. Enter
answers only the prompt the line is bound to, and only if that prompt is still the
first one and had been drawn for :data:`SEEN_S` before the line's first key. Otherwise
Enter refuses, keeps the line, says why, and binds the line to what shows now, so a
second Enter (after reading the notice, and once the prompt has been on screen for
:data:`SEEN_S`) is the deliberate decision: a `y` typed as a
reply to the model while a Bash prompt appears, a prompt not yet drawn, a prompt
replaced by the next one after a timeout, and a line typed for a prompt since
withdrawn (kept, not sent to the model) are each refused once.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from prompt_toolkit.buffer import Buffer
from prompt_toolkit.key_binding import KeyBindings, KeyPressEvent
from prompt_toolkit.keys import Keys

from runtime.clients.chat.commands import Answer, Command, Quit, Stop, parse_answer, parse_line

DOUBLE_PRESS_S = 1.0
SEEN_S = 0.3  # a prompt on screen for less than this before a line began was not read
REFUSED = ("a permission prompt is open: answer it with a line of one letter and Enter "
           "(y allow once, a allow for the session, n deny, d deny for the session) or "
           "press Esc to stop the turn; your text stays in the input line")
APPEARED = ("a permission prompt appeared while you typed: nothing was answered or sent; "
            "press Enter again to answer it with this line")
CHANGED = ("the permission prompt changed while you typed: nothing was answered; "
           "read the new one, then press Enter again to answer it with this line")
GONE = ("the permission prompt you typed for is gone (answered, timed out or withdrawn): "
        "nothing was sent; press Enter again to send this line to the model")

# The prompt first on screen: its request id and when it was first drawn (None: not yet).
Shown = tuple[str, float | None]


class ChatKeys:
    def __init__(self, buffer: Buffer, post: Callable[[Command], None],
                 shown_permission: Callable[[], Shown | None],
                 notice: Callable[[str], None],
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._buffer = buffer
        self._post = post
        self._shown_permission = shown_permission
        self._notice = notice
        self._clock = clock
        self._last_interrupt = -DOUBLE_PRESS_S * 2
        # What the current line is bound to: (prompt id or None, when), None while empty.
        self._bound: tuple[str | None, float] | None = None
        buffer.on_text_changed += self._text_changed
        self.bindings = self._build()

    def _text_changed(self, buffer: Buffer) -> None:
        if not buffer.text:
            self._bound = None
        elif self._bound is None:
            self._bound = (self._seen(self._clock()), self._clock())

    def _seen(self, at: float) -> str | None:
        """The prompt first on screen at ``at`` that had been drawn long enough to read."""
        shown = self._shown_permission()
        if shown is None:
            return None
        request_id, drawn = shown
        return request_id if drawn is not None and at - drawn >= SEEN_S else None

    def _reset(self, *, append_to_history: bool = False) -> None:
        self._buffer.reset(append_to_history=append_to_history)
        self._bound = None

    def interrupt(self) -> None:
        """Ctrl-C: the first stops the turn, a second within a second quits."""
        now = self._clock()
        if now - self._last_interrupt <= DOUBLE_PRESS_S:
            self._post(Quit())
            return
        self._last_interrupt = now
        self._reset()
        self._notice("(Ctrl-C again within a second to quit)")
        self._post(Stop(via="Ctrl-C"))

    def _build(self) -> KeyBindings:
        kb = KeyBindings()

        # eager: fire at once, not after waiting to see if Esc starts a longer sequence.
        @kb.add("escape", eager=True)
        def _stop(event: KeyPressEvent) -> None:
            self._post(Stop(via="Esc"))

        @kb.add("c-c")
        @kb.add(Keys.SIGINT)  # a SIGINT while the terminal is briefly in cooked mode
        def _interrupt(event: KeyPressEvent) -> None:
            self.interrupt()

        @kb.add("c-d")
        def _eof(event: KeyPressEvent) -> None:
            if not self._buffer.text:
                self._post(Quit())

        @kb.add("enter")
        def _submit(event: KeyPressEvent) -> None:
            self.submit()

        return kb

    def submit(self) -> None:
        """Enter: the line as a command, or as the answer to the prompt it was typed for."""
        text = self._buffer.text
        shown = self._shown_permission()
        current = shown[0] if shown is not None else None
        if text.lstrip().startswith("/") or (current is None and self._bound is None):
            self._command(text)
            return
        if current is not None and not text.strip():
            self._notice(REFUSED)  # an empty line answers nothing
            return
        now = self._clock()
        drawn = shown[1] if shown is not None else None
        bound = self._bound[0] if self._bound is not None else None
        if bound != current:
            # Typed for another prompt, or for none: refused, and bound to what shows now,
            # so the next Enter (after this notice) is the decision.
            self._notice(GONE if current is None else APPEARED if bound is None else CHANGED)
            self._bound = (current if drawn is not None else None, now)
            return
        if current is None:
            self._command(text)
            return
        if drawn is None or now - drawn < SEEN_S:  # bound by a refusal, but not yet read
            self._notice(APPEARED)
            return
        decision = parse_answer(text)
        if decision is None:
            self._notice(REFUSED)  # the line stays where it is
            return
        self._reset()
        self._post(Answer(current, decision))

    def _command(self, text: str) -> None:
        command = parse_line(text)
        self._reset(append_to_history=True)
        if command is not None:
            self._post(command)
