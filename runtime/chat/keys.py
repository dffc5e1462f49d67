"""The chat's keys, as prompt_toolkit key bindings (no signals while the UI runs).

Esc and a first Ctrl-C stop the turn; a second Ctrl-C within a second quits
(after the stop settles); Enter submits the line; Ctrl-D on an empty line quits;
while a permission prompt is shown, y / a / n / d answer it. The bindings only build
commands: the controller acts on them.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from prompt_toolkit.buffer import Buffer
from prompt_toolkit.filters import Condition
from prompt_toolkit.key_binding import KeyBindings, KeyPressEvent
from prompt_toolkit.keys import Keys

from runtime.chat.commands import Answer, Command, Decision, Quit, Stop, parse_line

DOUBLE_PRESS_S = 1.0

ANSWER_KEYS: dict[str, Decision] = {"y": "allow-once", "a": "allow-session", "n": "deny",
                                    "d": "deny-session"}


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
        asking = Condition(lambda: self._shown_permission() is not None)

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
            command = parse_line(self._buffer.text)
            self._buffer.reset(append_to_history=True)
            if command is not None:
                self._post(command)

        for key, decision in ANSWER_KEYS.items():
            self._add_answer(kb, asking, key, decision)
        return kb

    def _add_answer(self, kb: KeyBindings, asking: Condition, key: str,
                    decision: Decision) -> None:
        @kb.add(key, filter=asking)
        def _answer(event: KeyPressEvent) -> None:
            request_id = self._shown_permission()
            if request_id is not None:
                self._post(Answer(request_id, decision))
