"""The chat's view without a terminal: events in, the lines a user reads out."""

from __future__ import annotations

from rich.text import Text

from protocol.causes import UserCause
from protocol.messages.client import AbortedCall, AgentAbortResult, SessionInfo
from protocol.messages.events import (
    AssistantDeltaEvent,
    AssistantMessageEvent,
    Block,
    StopWaitingEvent,
    ToolAbortEvent,
    ToolCallEvent,
    ToolProgressEvent,
    ToolResultEvent,
    ToolStartedEvent,
    TurnEnd,
    TurnOutcome,
    TurnStart,
    UserMessageEvent,
    WaitingCall,
)
from protocol.tools import TextContent
from runtime.clients.chat.session_list import session_lines
from runtime.clients.chat.view import ChatView, summarize_args


def plain(lines: list[object]) -> list[str]:
    return [str(line) for line in lines]


def start(view: ChatView) -> None:
    view.event(TurnStart(1, "t1"), 0.0)


def test_a_turn_with_a_tool_call_reads_as_a_transcript() -> None:
    view = ChatView()
    assert view.event(TurnStart(1, "t1"), 0.0) == []
    assert plain(view.event(UserMessageEvent(2, "t1", "read a"), 0.0)) == ["> read a"]
    lines = view.event(AssistantMessageEvent(3, "t1", 0, (
        Block("reasoning", "It is short."), Block("text", "Let me look."))), 0.1)
    assert plain(lines) == ["  It is short.", "Let me look."]
    assert lines[0].style == "dim italic"  # reasoning looks different from text
    assert plain(view.event(ToolCallEvent(4, "t1", 0, "c1", "Read", "read-only",
                                          {"path": "a.txt"}), 0.2)) == [
        "● Read (read-only) a.txt  [c1]"]
    assert "c1" in view.calls
    assert view.event(ToolStartedEvent(5, "t1", "c1"), 0.2) == []
    lines = view.event(ToolResultEvent(5, "t1", 0, "c1", False, None,
                                       (TextContent("hello"),)), 1.4)
    assert plain(lines) == ["✓ Read ok 1.2s  [c1]"]
    assert view.calls == {}
    assert view.event(TurnEnd(6, "t1", TurnOutcome("completed"), "end_turn"), 1.5) == []
    assert view.turn_id is None and not view.animating


def test_a_response_streams_live_until_its_message_is_recorded() -> None:
    view = ChatView()
    start(view)
    for kind, piece in [("reasoning", "Think"), ("reasoning", "ing."), ("text", "Hel"),
                        ("text", "lo\nwor"), ("text", "ld")]:
        assert view.event(AssistantDeltaEvent(1, "t1", 0, kind, piece), 0.1) == []  # type: ignore[arg-type]
    live = view.live(0.2)
    assert plain(live[:3]) == ["  Thinking.", "Hello", "world"]
    assert live[0].style == "dim italic"
    committed = view.event(AssistantMessageEvent(2, "t1", 0, (
        Block("reasoning", "Thinking."), Block("text", "Hello\nworld"))), 0.3)
    assert plain(committed) == ["  Thinking.", "Hello\nworld"]
    assert "Hello" not in " ".join(plain(view.live(0.4)))  # printed once, not twice


def test_a_failed_call_shows_its_code_and_first_line() -> None:
    view = ChatView()
    start(view)
    view.event(ToolCallEvent(2, "t1", 0, "c1", "Read", "read-only", {"path": "../x"}), 0.0)
    lines = view.event(ToolResultEvent(
        3, "t1", 0, "c1", True, "PATH_OUTSIDE_WORKSPACE",
        (TextContent("\nError: ../x is outside the workspace\nmore"),)), 0.5)
    assert plain(lines) == ["✗ Read PATH_OUTSIDE_WORKSPACE  [c1]  "
                            "Error: ../x is outside the workspace"]


def test_live_part_shows_a_spinner_and_the_output_tail() -> None:
    view = ChatView()
    start(view)
    view.event(ToolCallEvent(2, "t1", 0, "b1", "Bash", "process",
                             {"command": "make\n  build"}), 0.0)
    view.event(ToolStartedEvent(2, "t1", "b1"), 0.0)
    for i in range(5):
        view.event(ToolProgressEvent(2, "t1", "b1", "stdout", f"step {i}\n\n"), 0.1)
    live = plain(view.live(2.0))
    assert live[0].endswith("Bash (process) make build  2.0s")  # one line, whatever the args
    assert live[0][0] in "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"
    assert live[1:] == ["    │ step 2", "    │ step 3", "    │ step 4"]  # the last three
    assert plain(view.live(2.1))[0][0] != live[0][0]  # the spinner turns


def test_a_stop_renders_its_timeline_from_the_abort_sent() -> None:
    view = ChatView()
    start(view)
    view.event(ToolCallEvent(2, "t1", 0, "bash-1", "Bash", "process", {"command": "x"}), 1.0)
    assert view.stop_sent(10.0, keep_inbox=False, via="Esc", processes_before=5) == []
    live = plain(view.live(10.05))
    assert live[-3:] == ["■ Stop (Esc): stop timeline",
                         "       +0.0 ms  agent.abort sent (cause user)",
                         live[-1]] and live[-1].endswith("stopping… 50 ms")
    # Every line is held while the stop settles; the live part shows the timeline so far.
    assert view.event(ToolAbortEvent(2, "t1", "bash-1", "Bash", "running", True),
                      10.0021) == []
    assert ("       +2.1 ms  tools.abort bash-1 (Bash): host found it running, body running"
            in plain(view.live(10.003)))
    assert view.event(ToolResultEvent(
        3, "t1", 0, "bash-1", True, "ABORTED", (TextContent("Error: tool call aborted"),),
        {"processesKilled": 5, "killMs": 12, "survivors": []}), 10.0153) == []
    assert view.event(TurnEnd(4, "t1", TurnOutcome("aborted", UserCause()), "cancelled"),
                      10.016) == []
    lines = view.stop_answered(AgentAbortResult(
        "aborted", "t1", UserCause(), 14.2,
        (AbortedCall("bash-1", "Bash", "process", "ABORTED"),)), 10.0165, processes_alive=0)
    assert plain(lines) == [
        "■ Stop (Esc): stop timeline",
        "       +0.0 ms  agent.abort sent (cause user)",
        "       +2.1 ms  tools.abort bash-1 (Bash): host found it running, body running",
        "      +15.3 ms  bash-1 (Bash): ABORTED, process tree terminated: "
        "5 processes killed in 12 ms",
        "      +16.0 ms  turn/end aborted (user) on disk",
        "      +16.5 ms  turn settled in 14.2 ms (agent.abort answered: aborted)",
        "               bash-1     Bash     process   ABORTED",
        "  process tree: 5 tool processes before the stop, 0 alive after it settled"]
    assert view.stop is None


def test_a_stop_shows_what_it_waits_on_in_its_timeline() -> None:
    view = ChatView()
    start(view)
    view.event(ToolCallEvent(2, "t1", 0, "w1", "mcp__tools__wait", "plugin", {}), 1.0)
    view.stop_sent(10.0, keep_inbox=False, via="Esc", processes_before=0)
    call = WaitingCall("w1", "mcp__tools__wait", "plugin", "aborting", 1796438871.2)
    assert view.event(StopWaitingEvent(2, "t1", (call,)), 10.003) == []
    assert view.event(StopWaitingEvent(2, "t1", ()), 12.5) == []
    live = plain(view.live(12.6))
    assert "       +3.0 ms  waiting on w1 (mcp__tools__wait, plugin, aborting)" in live
    assert "    +2500.0 ms  waiting on no call any more" in live
    # An operator's stop (no timeline of ours): a line of its own.
    other = ChatView()
    start(other)
    assert plain(other.event(StopWaitingEvent(2, "t1", (call,)), 1.0)) == [
        "  ■ stop waiting on w1 (mcp__tools__wait, plugin, aborting)"]


def test_a_stop_block_keeps_the_stopped_turn_before_and_the_next_turn_after() -> None:
    """/stop-keep: the interrupted message comes before the timeline, the next turn's
    output after it, and the entries are in time order whatever order they arrived in."""
    view = ChatView()
    start(view)
    view.event(ToolCallEvent(2, "t1", 0, "w", "Write", "mutating", {"path": "a"}), 1.0)
    view.permission_asked("p1", "Write", "{}", "medium")
    view.stop_sent(10.0, keep_inbox=True, via="/stop-keep", processes_before=0)
    view.event(AssistantMessageEvent(3, "t1", 0, (Block("text", "Half a"),),
                                     interrupted=True), 10.004)
    view.event(ToolResultEvent(4, "t1", 0, "w", True, "ABORTED_BEFORE_DISPATCH", ()), 10.003)
    assert view.permission_withdrawn("p1", 10.002) == []
    view.event(TurnEnd(5, "t1", TurnOutcome("aborted", UserCause()), "cancelled"), 10.005)
    view.event(TurnStart(6, "t2"), 10.006)
    view.event(UserMessageEvent(7, "t2", "next one"), 10.006)
    view.event(AssistantMessageEvent(8, "t2", 0, (Block("text", "Next answer"),)), 10.007)
    assert view.hold([Text("  (queued) later")]) == []
    lines = plain(view.stop_answered(AgentAbortResult("aborted", "t1", UserCause(), 5.0),
                                     10.0055, processes_alive=0))
    assert lines == [
        "Half a [interrupted]",
        "■ Stop (/stop-keep): stop timeline",
        "       +0.0 ms  agent.abort sent (cause user, keeping queued prompts)",
        "       +2.0 ms  permission prompt for Write withdrawn by the stop (the call never ran)",
        "       +3.0 ms  w (Write): ABORTED_BEFORE_DISPATCH",
        "       +5.0 ms  turn/end aborted (user) on disk",
        "       +5.5 ms  turn settled in 5.0 ms (agent.abort answered: aborted)",
        "> next one",
        "Next answer",
        "  (queued) later"]
    # Once settled, lines print at once again.
    assert plain(view.event(AssistantMessageEvent(9, "t2", 1, (Block("text", "More"),)),
                            10.01)) == ["More"]


def test_survivors_are_shouted_not_hidden() -> None:
    view = ChatView()
    start(view)
    view.stop_sent(0.0, keep_inbox=False, via="Esc", processes_before=2)
    lines = view.stop_answered(AgentAbortResult("aborted", "t1"), 0.1, processes_alive=1)
    assert "1 alive after it settled" in str(lines[-1])
    assert lines[-1].style == "bold red"


def test_a_read_only_call_abandoned_at_once_says_so() -> None:
    view = ChatView()
    start(view)
    view.event(ToolCallEvent(2, "t1", 0, "g", "Grep", "read-only", {"pattern": "x",
                                                                      "path": "logs"}), 0.0)
    view.stop_sent(1.0, keep_inbox=True, via="/stop-keep", processes_before=0)
    view.event(ToolResultEvent(3, "t1", 0, "g", True, "ABORTED", (),
                               {"abandoned": "stop"}), 1.001)
    lines = view.stop_answered(AgentAbortResult("aborted", "t1"), 1.002, processes_alive=0)
    assert ("       +1.0 ms  g (Grep): ABORTED, stopped waiting at once; the "
            "host drops its late result") in plain(lines)


def test_an_idle_stop_is_a_no_op() -> None:
    view = ChatView()
    view.stop_sent(0.0, keep_inbox=False, via="Esc", processes_before=0)
    assert plain(view.stop_answered(AgentAbortResult("idle"), 0.001, processes_alive=0)) == [
        "  nothing was running: the stop was a no-op"]


def test_an_interrupted_message_is_marked() -> None:
    view = ChatView()
    start(view)
    lines = view.event(AssistantMessageEvent(2, "t1", 0, (Block("text", "Hello, wor"),),
                                             interrupted=True), 0.0)
    assert plain(lines) == ["Hello, wor [interrupted]"]


def test_permission_prompt_shown_then_answered_or_withdrawn() -> None:
    view = ChatView()
    start(view)
    view.permission_asked("p1", "Write", '{"path":"a"}', "medium")
    live = plain(view.live(0.0))
    assert '? Write wants to run: {"path":"a"}  (risk medium)' in live
    assert "    y  allow once          a  allow for the session" in live
    assert all(len(line) < 60 for line in live[1:])
    assert plain(view.permission_answered("p1", "allow-once")) == [
        "  permission for Write: allow-once"]
    assert not any("wants to run" in line for line in plain(view.live(0.0)))

    view.permission_asked("p2", "Edit", "{}", "high")
    view.stop_sent(5.0, keep_inbox=False, via="Esc", processes_before=0)
    assert view.permission_withdrawn("p2", 5.003) == []
    assert ("       +3.0 ms  permission prompt for Edit withdrawn by the stop (the call never "
            "ran)") in plain(view.live(5.004))
    assert not any("wants to run" in line for line in plain(view.live(5.0)))
    assert view.permission_withdrawn("p2", 5.004) == []  # once


def test_a_prompt_withdrawn_without_a_stop_says_so_and_more_prompts_are_counted() -> None:
    view = ChatView()
    start(view)
    view.permission_asked("p1", "Bash", "ls", "high")
    view.permission_asked("p2", "Write", "{}", "medium")
    view.permission_asked("p3", "Edit", "{}", "medium")
    live = plain(view.live(0.0))
    assert "  (2 more permission prompts waiting after this one)" in live
    assert view.shown_permission() == ("p1", 0.0)  # drawn at 0.0
    lines = plain(view.permission_withdrawn("p1", 120.0))  # the host's timeout
    assert lines == ["  permission prompt for Bash withdrawn unanswered (it timed out and "
                     "the call was denied, or an operator stopped the turn)"]
    assert not any("by the stop" in line for line in lines)
    assert view.shown_permission() == ("p2", None)  # the next: not drawn yet
    assert "  (1 more permission prompt waiting after this one)" in plain(view.live(121.0))
    assert view.shown_permission() == ("p2", 121.0)


def test_errors_and_step_limits_end_a_turn_visibly() -> None:
    view = ChatView()
    start(view)
    lines = view.event(TurnEnd(2, "t1", TurnOutcome("error", error="no provider"), "error"), 0)
    assert plain(lines) == ["✗ the turn ended with an error: no provider"]
    start(view)
    assert plain(view.event(TurnEnd(3, "t1", TurnOutcome("completed"), "max_steps"), 0)) == [
        "the turn reached its step limit"]


def test_argument_summaries() -> None:
    assert summarize_args("Bash", {"command": "ls -la\n| wc"}) == "ls -la | wc"
    assert summarize_args("Grep", {"pattern": "TODO", "path": "src"}) == "TODO in src"
    assert summarize_args("Mystery", {"b": 1}) == '{"b":1}'
    long = summarize_args("Bash", {"command": "x" * 100}, width=10)
    assert long == "xxxxxxxxx…" and len(long) == 10


def test_session_list_marks_the_current_one() -> None:
    sessions = (SessionInfo("s-1", "/w", "ask", 0.0),
                SessionInfo("s-2", "/v", "auto", 0.0, loaded=False, interrupted=True))
    assert plain(session_lines(sessions, "s-1")) == [
        "sessions:", "  s-1  /w  ask  (current)", "  s-2  /v  auto  (not loaded, interrupted)"]
    assert plain(session_lines(sessions, "s-1", "/w")) == [
        "sessions in /w:", "  s-1  /w  ask  (current)",
        "  (1 in other workspaces: /sessions all lists them)"]
    assert plain(session_lines((), None, "/w")) == ["sessions in /w:", "  none"]


def test_session_list_says_which_logs_cannot_be_loaded() -> None:
    sessions = (SessionInfo("s-1", "/w", "ask", 0.0, loaded=False,
                            error="s-1.jsonl:3: unreadable event"),
                SessionInfo("s-2", "", None, 0.0, loaded=False, error="Permission denied"))
    # The one whose workspace is unknown may be this workspace's: it is listed here too.
    assert plain(session_lines(sessions, None, "/w")) == [
        "sessions in /w:",
        "  s-1  /w  ask  (not loaded)", "    log unreadable: s-1.jsonl:3: unreadable event",
        "  s-2  (workspace unknown)  (not loaded)", "    log unreadable: Permission denied"]


def test_no_timer_runs_before_the_body_starts_and_replays_make_none_up() -> None:
    view = ChatView()
    start(view)
    view.event(ToolCallEvent(2, "t1", 0, "w", "Write", "mutating", {"path": "a"}), 0.0)
    view.permission_asked("p1", "Write", "{}", "medium", "w")
    assert plain(view.live(30.0))[0].endswith("Write (mutating) a  waiting for permission")
    view.permission_answered("p1", "allow-once")
    assert plain(view.live(30.1))[0].endswith("a  waiting to start")
    view.event(ToolStartedEvent(3, "t1", "w"), 30.2)
    assert plain(view.live(31.7))[0].endswith("a  1.5s")
    lines = view.event(ToolResultEvent(4, "t1", 0, "w", False, None, ()), 31.7)
    assert plain(lines) == ["✓ Write ok 1.5s  [w]"]
    # Replayed (no tool/started: it is never logged): the host's measure, else nothing.
    view.event(ToolCallEvent(5, "t1", 1, "b", "Bash", "process", {"command": "sleep 3"}), 40)
    lines = view.event(ToolResultEvent(6, "t1", 1, "b", False, None, (),
                                       {"durationMs": 3012}), 40.0)
    assert plain(lines) == ["✓ Bash ok 3.0s  [b]"]
    view.event(ToolCallEvent(7, "t1", 2, "r", "Read", "read-only", {"path": "x"}), 40)
    assert plain(view.event(ToolResultEvent(8, "t1", 2, "r", False, None, ()), 40.0)) == [
        "✓ Read ok  [r]"]


def test_a_turn_without_a_model_says_how_to_choose_one() -> None:
    view = ChatView()
    start(view)
    lines = plain(view.event(TurnEnd(2, "t1", TurnOutcome(
        "error", error="no model provider is configured: pass `provider` in session.new or "
                       "start quiesce serve with --provider"), "error"), 0.0))
    assert lines[0].startswith("✗ no model is configured. Choose one with --provider openai")
    assert "session.new" not in lines[0]
