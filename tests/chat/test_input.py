"""Typed lines and keys as commands, without a terminal."""

from __future__ import annotations

from prompt_toolkit.buffer import Buffer

from runtime.chat.commands import (
    Answer,
    Command,
    Help,
    ListSessions,
    Load,
    Prompt,
    Quit,
    Stop,
    Unknown,
    parse_line,
)
from runtime.chat.keys import ChatKeys


def test_lines_become_commands() -> None:
    assert parse_line("   ") is None
    assert parse_line("build it ") == Prompt("build it ")
    assert parse_line("/quit") == Quit()
    assert parse_line("/stop-keep") == Stop(keep_inbox=True, via="/stop-keep")
    assert parse_line("/stop") == Stop(via="/stop")
    assert parse_line("/sessions") == ListSessions()
    assert parse_line("/load s-123") == Load("s-123")
    assert parse_line("/load") == Unknown("/load")
    assert parse_line("/load a b") == Unknown("/load a b")
    assert parse_line("/help") == Help()
    assert parse_line("/nope") == Unknown("/nope")


class Keys:
    def __init__(self) -> None:
        self.now = 100.0
        self.posted: list[Command] = []
        self.notices: list[str] = []
        self.shown: str | None = None
        self.buffer = Buffer(multiline=False)
        self.keys = ChatKeys(self.buffer, self.posted.append, lambda: self.shown,
                             self.notices.append, clock=lambda: self.now)


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
                   ("Keys.ControlM",), ("y",), ("a",), ("n",), ("d",)]:
        assert wanted in keys, wanted
    escape = next(b for b in k.keys.bindings.bindings if str(b.keys[0]) == "Keys.Escape")
    assert escape.eager()  # Esc acts at once, not after an escape-sequence timeout


def test_answer_keys_answer_only_the_prompt_on_screen() -> None:
    k = Keys()
    answer = {str(b.keys[0]): b for b in k.keys.bindings.bindings if len(b.keys) == 1}
    assert not answer["y"].filter()  # no prompt: y is just a letter
    k.shown = "p7"
    assert answer["a"].filter()
    answer["a"].handler(None)  # type: ignore[arg-type]
    answer["n"].handler(None)  # type: ignore[arg-type]
    answer["d"].handler(None)  # type: ignore[arg-type]
    assert k.posted == [Answer("p7", "allow-session"), Answer("p7", "deny"),
                        Answer("p7", "deny-session")]
