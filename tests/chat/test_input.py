"""Typed lines and keys as commands, without a terminal."""

from __future__ import annotations

from prompt_toolkit.buffer import Buffer

from runtime.clients.chat.commands import (
    Answer,
    Command,
    Help,
    ListSessions,
    Load,
    Prompt,
    Quit,
    Stop,
    Unknown,
    Usage,
    parse_answer,
    parse_line,
)
from runtime.clients.chat.keys import ChatKeys


def test_lines_become_commands() -> None:
    assert parse_line("   ") is None
    assert parse_line("build it ") == Prompt("build it ")
    assert parse_line("/quit") == Quit()
    assert parse_line("/stop-keep") == Stop(keep_inbox=True, via="/stop-keep")
    assert parse_line("/stop") == Stop(via="/stop")
    assert parse_line("/sessions") == ListSessions()
    assert parse_line("/sessions all") == ListSessions(every_workspace=True)
    assert parse_line("/load s-123") == Load("s-123")
    assert isinstance(parse_line("/load"), Usage)
    assert isinstance(parse_line("/load a b"), Usage)
    assert parse_line("/help") == Help()
    assert parse_line("/nope") == Unknown("/nope")


class Keys:
    def __init__(self) -> None:
        self.now = 100.0
        self.posted: list[Command] = []
        self.notices: list[str] = []
        self.shown: tuple[str, float | None] | None = None
        self.buffer = Buffer(multiline=False)
        self.keys = ChatKeys(self.buffer, self.posted.append, lambda: self.shown,
                             self.notices.append, clock=lambda: self.now)

    def show(self, request_id: str | None, ago: float | None = 1.0) -> None:
        """The prompt first on screen now, drawn ``ago`` seconds ago (None: not drawn)."""
        self.shown = (None if request_id is None
                      else (request_id, None if ago is None else self.now - ago))

    def type(self, text: str, after: float = 0.0) -> None:
        self.now += after
        self.buffer.text = text


def test_ctrl_c_once_stops_twice_within_a_second_quits() -> None:
    k = Keys()
    k.buffer.text = "half typed"
    k.keys.interrupt()
    assert k.posted == [Stop(via="Ctrl-C")]
    assert k.buffer.text == ""
    assert k.notices == ["(Ctrl-C again within a second to quit)"]
    k.now += 0.5
    k.keys.interrupt()
    assert k.posted == [Stop(via="Ctrl-C"), Quit()]


def test_ctrl_c_presses_further_apart_each_stop() -> None:
    k = Keys()
    k.keys.interrupt()
    k.now += 1.5
    k.keys.interrupt()
    assert k.posted == [Stop(via="Ctrl-C"), Stop(via="Ctrl-C")]


def test_bindings_cover_the_keys_the_chat_promises() -> None:
    k = Keys()
    keys = {tuple(str(key) for key in b.keys) for b in k.keys.bindings.bindings}
    for wanted in [("Keys.Escape",), ("Keys.ControlC",), ("Keys.SIGINT",), ("Keys.ControlD",),
                   ("Keys.ControlM",)]:
        assert wanted in keys, wanted
    # No letter is bound: a letter typed at a prompt is only ever text.
    assert not [b for b in k.keys.bindings.bindings if str(b.keys[0]).isalpha()
                and len(str(b.keys[0])) == 1]
    escape = next(b for b in k.keys.bindings.bindings if str(b.keys[0]) == "Keys.Escape")
    assert escape.eager()  # Esc acts at once, not after an escape-sequence timeout


def test_only_a_line_of_one_answer_letter_answers() -> None:
    assert parse_answer("y") == "allow-once" and parse_answer(" A ") == "allow-session"
    assert parse_answer("n") == "deny" and parse_answer("d") == "deny-session"
    for sentence in ("hang on", "wait, do not do that", "a b", "yes", "", "ya"):
        assert parse_answer(sentence) is None, sentence


def test_enter_at_a_prompt_answers_or_refuses_and_keeps_the_line() -> None:
    k = Keys()
    k.show("p7")
    k.buffer.text = "wait, do not do that"
    k.keys.submit()
    assert k.posted == [] and k.buffer.text == "wait, do not do that"
    assert "a permission prompt is open" in k.notices[-1]
    k.buffer.text = ""
    k.keys.submit()  # an empty line is no answer either
    assert k.posted == []
    k.buffer.text = "a"
    k.keys.submit()
    assert k.posted == [Answer("p7", "allow-session")] and k.buffer.text == ""
    k.buffer.text = "/stop"  # commands still work while a prompt shows
    k.keys.submit()
    assert k.posted[-1] == Stop(via="/stop")


def test_without_a_prompt_an_answer_letter_is_a_prompt() -> None:
    k = Keys()
    k.buffer.text = "y"
    k.keys.submit()
    assert k.posted == [Prompt("y")]


def test_a_reply_to_the_model_is_no_answer_to_a_prompt_that_appears() -> None:
    k = Keys()
    k.type("y")  # a reply to the model, typed while the turn runs
    k.now += 0.5
    k.show("p7", ago=0.2)  # a Bash prompt appears
    k.keys.submit()
    assert k.posted == [] and k.buffer.text == "y"
    assert "appeared while you typed" in k.notices[-1]
    k.now += 0.5
    k.keys.submit()  # Enter again, after the notice: deliberate
    assert k.posted == [Answer("p7", "allow-once")]


def test_a_prompt_not_yet_drawn_is_not_answered() -> None:
    k = Keys()
    k.show("p7", ago=None)  # asked, but the live part has not been redrawn yet
    k.type("y")
    k.keys.submit()
    assert k.posted == [] and k.buffer.text == "y"
    k.show("p7", ago=0.0)  # drawn now
    k.now += 0.1
    k.keys.submit()  # too soon after it was drawn to have been read
    assert k.posted == []
    k.now += 0.5
    k.keys.submit()
    assert k.posted == [Answer("p7", "allow-once")]


def test_a_prompt_drawn_just_before_the_first_key_is_not_answered() -> None:
    k = Keys()
    k.show("p7", ago=0.1)
    k.type("y")
    k.keys.submit()
    assert k.posted == [] and "appeared while you typed" in k.notices[-1]


def test_a_line_for_a_prompt_replaced_by_the_next_is_refused() -> None:
    k = Keys()
    k.show("p7")
    k.type("y")
    k.now += 2
    k.show("p8", ago=0.5)  # p7 timed out; p8 is first now
    k.keys.submit()
    assert k.posted == [] and k.buffer.text == "y"
    assert "changed while you typed" in k.notices[-1]
    k.now += 0.4
    k.keys.submit()
    assert k.posted == [Answer("p8", "allow-once")]


def test_a_line_for_a_withdrawn_prompt_is_kept_not_sent() -> None:
    k = Keys()
    k.show("p7")
    k.type("a")
    k.show(None)  # withdrawn by the stop or its timeout
    k.keys.submit()
    assert k.posted == [] and k.buffer.text == "a"
    assert "is gone" in k.notices[-1]
    k.keys.submit()  # Enter again: now it is meant for the model
    assert k.posted == [Prompt("a")]


def test_a_line_begun_at_a_read_prompt_answers_it() -> None:
    k = Keys()
    k.show("p7", ago=0.4)
    k.type("d", after=0.0)
    k.keys.submit()
    assert k.posted == [Answer("p7", "deny-session")] and k.buffer.text == ""
    k.show("p8", ago=0.0)  # the next prompt: its line starts afresh
    k.type("y", after=0.1)
    k.keys.submit()
    assert k.posted[-1:] == [Answer("p7", "deny-session")]
