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
"""

from __future__ import annotations

import time
from collections.abc import Callable

from prompt_toolkit.buffer import Buffer
from prompt_toolkit.key_binding import KeyBindings, KeyPressEvent
from prompt_toolkit.keys import Keys

from runtime.chat.commands import Answer, Command, Quit, Stop, parse_answer, parse_line

DOUBLE_PRESS_S = 1.0
REFUSED = ("a permission prompt is open: answer it with a line of one letter and Enter "
           "(y allow once, a allow for the session, n deny, d deny for the session) or "
           "press Esc to stop the turn; your text stays in the input line")


class ChatKeys:
    def __init__(self, buffer: Buffer, post: Callable[[Command], None],
                 shown_permission: Callable[[], str | None],
                 notice: Callable[[str], None],
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._buffer = buffer
        self._post = post
        self._shown_permission = shown_permission
        self._notice = notice
        self._clock = clock
        self._last_interrupt = -DOUBLE_PRESS_S * 2
        self.bindings = self._build()

    def interrupt(self) -> None:
        """Ctrl-C: the first stops the turn, a second within a second quits."""
        now = self._clock()
        if now - self._last_interrupt <= DOUBLE_PRESS_S:
            self._post(Quit())
            return
        self._last_interrupt = now
        self._buffer.reset()
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
        """Enter: the line as a command, or as the answer to the prompt shown."""
        text = self._buffer.text
        request_id = self._shown_permission()
        if request_id is not None and not text.lstrip().startswith("/"):
            decision = parse_answer(text)
            if decision is None:
                self._notice(REFUSED)  # the line stays where it is
                return
            self._buffer.reset()
            self._post(Answer(request_id, decision))
            return
        command = parse_line(text)
        self._buffer.reset(append_to_history=True)
        if command is not None:
            self._post(command)
