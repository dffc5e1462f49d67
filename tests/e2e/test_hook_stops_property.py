"""Property: a stop at any point of a call's hook stages keeps the stop contract.

A Hypothesis state machine against one real daemon (``quiesce serve`` and its host), as
in ``test_wireorder_property.py``: Hypothesis runs in a worker thread and hands each
step to the trio loop. Each example is one session whose one Bash call goes through a
pre hook, its body and a post hook, each of which waits for the test to release it (a
file in the workspace), so the machine can stop the turn exactly inside any stage, or
release a stage and stop at once (a denial racing the stop). After every stop, the
harness's checks (``stop_and_check``: the end on disk, balanced, no process left) and
the code the stage calls for: ``ABORTED_BEFORE_DISPATCH`` in the pre hook, ``ABORTED``
in the body or the post hook (the body's details kept), and a race's code agreeing with
the hook's logged decision. ``QUIESCE_HOOKSTOPS`` sets the number of examples (default
5: a few seconds).
"""

from __future__ import annotations

import itertools
import os
import pathlib
from typing import Any

import trio
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from protocol.messages.client import AgentPromptResult
from protocol.messages.events import HookDecisionEvent, ToolResultEvent
from tests.conftest import Marked
from tests.e2e.hookkit import hook_table, hooked, script, wait_for_file
from tests.kit.daemon import Agent, call, text

EXAMPLES = int(os.environ.get("QUIESCE_HOOKSTOPS", "5"))
STEP_DEADLINE = 20.0

# Each stage writes its pid file, then waits for its go file (relative: a hook runs in
# the session's workspace, and so does the body).
WAIT = 'echo $$ > {0}.tmp && mv {0}.tmp {0}\nwhile [ ! -e go-{1} ]; do sleep 0.01; done\n'
PRE = (WAIT.format("pre.pid", "pre")
       + 'cat > /dev/null\n[ -e deny ] && { echo no >&2; exit 2; }\nexit 0\n')
POST = WAIT.format("post.pid", "post") + "exit 0\n"
BODY = WAIT.format("body.pid", "body").replace("\n", "; ") + "echo body-done"

NEXT = {"pre": "body", "body": "post", "post": "done"}


class Drive:
    """The trio side: the daemon's agent, and the prompts running in a nursery."""

    def __init__(self, agent: Agent, nursery: trio.Nursery, root: pathlib.Path) -> None:
        self.agent = agent
        self.nursery = nursery
        self.root = root
        self.numbers = itertools.count()

    async def start(self, deny: bool) -> tuple[pathlib.Path, list[AgentPromptResult]]:
        ws = self.root / f"ex{next(self.numbers)}"
        ws.mkdir()
        if deny:
            (ws / "deny").touch()
        await self.agent.new_session(ws, [[call("b1", "Bash", command=BODY)], [text("done")]])
        return ws, self.agent.prompt_soon(self.nursery, "go")


class HookStops(RuleBasedStateMachine):
    drive: Drive

    def __init__(self) -> None:
        super().__init__()
        self.stage = "none"
        self.ws = pathlib.Path()
        self.answers: list[AgentPromptResult] = []
        self.deny = False

    def run(self, fn: Any, *args: Any) -> Any:
        async def bounded() -> Any:
            with trio.fail_after(STEP_DEADLINE):
                return await fn(*args)
        return trio.from_thread.run(bounded)

    @initialize(deny=st.booleans())
    def start(self, deny: bool) -> None:
        self.deny = deny
        self.ws, self.answers = self.run(self.drive.start, deny)
        self.run(wait_for_file, self.ws / "pre.pid")
        self.stage = "pre"

    async def _entered(self, stage: str) -> None:
        if stage == "done":
            while not self.answers:
                await trio.sleep(0.01)
        else:
            await wait_for_file(self.ws / f"{stage}.pid")

    @precondition(lambda self: self.stage in NEXT)
    @rule()
    def release(self) -> None:
        (self.ws / f"go-{self.stage}").touch()
        following = "done" if self.stage == "pre" and self.deny else NEXT[self.stage]
        self.run(self._entered, following)
        self.stage = following

    @precondition(lambda self: self.stage != "stopped")
    @rule(release_first=st.booleans())
    def stop(self, release_first: bool) -> None:
        stage = self.stage
        if release_first and stage in NEXT:
            (self.ws / f"go-{stage}").touch()  # the stage ends as the stop lands
        answer = self.run(self.drive.agent.stop_and_check)
        self.stage = "stopped"
        if stage == "done":
            assert answer.outcome == "idle", answer
            return
        assert answer.outcome == "aborted", answer
        (code,) = [c.code for c in answer.tool_calls]
        log = self.drive.agent.log()
        hooks = [e for e in log if isinstance(e, HookDecisionEvent)
                 and e.turn_id == answer.turn_id]
        result = next(e for e in log if isinstance(e, ToolResultEvent)
                      and e.turn_id == answer.turn_id)
        if stage == "pre" and not release_first:
            assert code == "ABORTED_BEFORE_DISPATCH", code
            assert [h.decision for h in hooks] == ["aborted"], hooks
        elif stage == "pre":  # the hook's answer raced the stop: the code says who won
            pre = hooks[0].decision
            if self.deny and pre == "deny":
                assert code == "TOOL_DENIED", (code, hooks)
            elif pre == "aborted":
                assert code == "ABORTED_BEFORE_DISPATCH", (code, hooks)
            else:  # allowed just before the stop: never dispatched after it
                assert pre == "allow" and code in ("ABORTED_BEFORE_DISPATCH", "ABORTED"), (
                    code, hooks)
        elif stage == "body":
            assert code == "ABORTED", code
        else:  # in the post hook: the body ran, its details are kept
            assert code == "ABORTED", code
            if not release_first:
                assert result.details.get("exitStatus") == 0, result.details
                assert "body-done" in result.details.get("output", ""), result.details
                assert hooks[-1].event == "post_tool_use" and hooks[-1].decision == "aborted"

    @precondition(lambda self: self.stage == "stopped")
    @rule()
    def settled(self) -> None:
        """After the stop nothing of the call lives on (its hooks' trees included)."""
        self.run(self.drive.agent.check_no_tool_process)

    def teardown(self) -> None:
        """An example that never stopped is stopped now (its Bash would hold an admission
        slot the next examples need), with the same checks."""
        if self.stage not in ("none", "stopped"):
            self.stop(release_first=False)

    @invariant()
    def transcript_balanced(self) -> None:
        if self.stage != "none":
            self.drive.agent.assert_balanced()


async def test_stops_at_any_hook_stage_keep_the_contract(tmp_path: pathlib.Path,
                                                         marked: Marked) -> None:
    toml = (hook_table("pre_tool_use", "Bash", script(tmp_path, "pre", PRE))
            + hook_table("post_tool_use", "Bash", script(tmp_path, "post", POST)))
    root = tmp_path / "examples"
    root.mkdir()
    async with hooked(marked, tmp_path, toml) as agent, trio.open_nursery() as nursery:
        HookStops.drive = Drive(agent, nursery, root)
        await trio.to_thread.run_sync(lambda: run_state_machine_as_test(
            HookStops, settings=settings(max_examples=EXAMPLES, stateful_step_count=4,
                                         deadline=None, print_blob=True,
                                         suppress_health_check=list(HealthCheck))))
        nursery.cancel_scope.cancel()
