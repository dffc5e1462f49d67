"""Property test: random interleavings of execute / abort / permission answers.

One real host process serves every example (spawning one costs ~0.5 s). Hypothesis
runs in a worker thread and hands each drawn :class:`Scenario` to the trio loop
with ``trio.from_thread.run``; pytest-trio's own Hypothesis support would start a
fresh ``trio.run`` (and so a fresh host) per example. Each example gets its own
session, workspace and call ids, so examples cannot leak into one another.

After each example :func:`check` states the contract: every execute has exactly one
result and nothing follows it; ``ABORTED_BEFORE_DISPATCH`` only with no side effect,
no output and ``body_invoked`` false, ``ABORTED`` only with ``body_invoked`` true; a
denial runs nothing; a tombstoned call never asks and does nothing; an abort naming
another tool or session never affects the call; ``tools.abort`` answers are
consistent and idempotent; a late answer to a withdrawn prompt is refused (even an
allow-session); no process outlives its call (and the ``marked`` fixture checks
that nothing outlives the test).

``QUIESCE_INTERLEAVINGS`` sets the number of generated examples (default 60).
Shrinking is off by default (the scenarios are timing-dependent and the failure
message carries the whole record of the example); set ``QUIESCE_SHRINK=1`` to turn
it on while investigating a failure.
"""

from __future__ import annotations

import os
import pathlib

import trio
from hypothesis import Phase, example, given, settings

from tests.conftest import Marked
from tests.host.interleaving_support import (
    Abort,
    CallSpec,
    InterleavingHost,
    Permission,
    Report,
    Scenario,
    check,
    describe,
    interleaving_host,
    scenarios,
)

EXAMPLES = int(os.environ.get("QUIESCE_INTERLEAVINGS", "60"))
PHASES = (Phase.explicit, Phase.reuse, Phase.generate) + (
    (Phase.shrink,) if os.environ.get("QUIESCE_SHRINK") else ())
EXAMPLE_DEADLINE = 20.0  # seconds; the slowest scenario needs ~2

# Paths that timing alone would reach only sometimes; each one runs in every test run.
TOMBSTONE = Scenario("ask", (
    CallSpec("touch", Permission("allow-once"), (Abort("before", repeat=2), Abort("after"))),))
FOREIGN_ABORTS = Scenario("auto", (
    CallSpec("touch", aborts=(Abort("before", "other-tool"), Abort("now", "other-session"),
                              Abort("on-output", "other-tool", repeat=2))),))
PROMPT_STOP_LATE_ANSWER = Scenario("ask", (
    CallSpec("write", Permission("late-allow-session", delay=0.02),
             (Abort("on-permission", repeat=2), Abort("after"))),))
PROCESS_STOP = Scenario("auto", (
    CallSpec("echo-sleep-touch", aborts=(Abort("on-output", repeat=2, cause="hook"),)),))
MUTATING_STOP = Scenario("accept-edits", (
    CallSpec("big-edit", aborts=(Abort("delay", delay=0.02, repeat=2), Abort("after"))),))
READ_ONLY_STOP = Scenario("auto", (
    CallSpec("slow-grep", aborts=(Abort("delay", delay=0.1), Abort("after"))),))
ADMISSION_STOP = Scenario("auto", (
    CallSpec("echo-sleep"),
    CallSpec("touch", aborts=(Abort("delay", delay=0.1),), start_delay=0.05)))
PROMPT_TIMEOUT = Scenario("accept-edits", (CallSpec("touch", Permission("never")),))
DENY_AND_SESSION = Scenario("ask", (
    CallSpec("edit", Permission("deny")),
    CallSpec("write", Permission("allow-session", delay=0.1), (Abort("delay", delay=0.02),)),
    CallSpec("read", aborts=(Abort("now"), Abort("now", "other-tool")))))

# What the scenarios above must have exercised (class / phase the stop found / code).
REQUIRED_COVERAGE = {
    "process / tombstone / ABORTED_BEFORE_DISPATCH",
    "mutating / permission-pending / ABORTED_BEFORE_DISPATCH",
    "mutating / no-stop / TOOL_DENIED",  # the probe after the refused late allow-session
    "process / running / ABORTED",
    "mutating / running / ABORTED (completed first)",
    "read-only / running / ABORTED",
    "process / admission / ABORTED_BEFORE_DISPATCH",
    "process / no-stop / TOOL_DENIED",  # the prompt timed out
    "process / no-stop / ok",
}


async def _run_bounded(host: InterleavingHost, scenario: Scenario) -> Report:
    with trio.fail_after(EXAMPLE_DEADLINE):
        return await host.run_scenario(scenario)


async def test_random_interleavings_keep_the_stop_contract(tmp_path: pathlib.Path,
                                                           marked: Marked) -> None:
    async with interleaving_host(tmp_path, marked.mark, marked.env()) as host:

        @settings(max_examples=EXAMPLES, deadline=None, phases=PHASES, print_blob=True)
        @given(scenario=scenarios())
        @example(scenario=TOMBSTONE)
        @example(scenario=FOREIGN_ABORTS)
        @example(scenario=PROMPT_STOP_LATE_ANSWER)
        @example(scenario=PROCESS_STOP)
        @example(scenario=MUTATING_STOP)
        @example(scenario=READ_ONLY_STOP)
        @example(scenario=ADMISSION_STOP)
        @example(scenario=PROMPT_TIMEOUT)
        @example(scenario=DENY_AND_SESSION)
        def interleaving_keeps_the_contract(scenario: Scenario) -> None:
            report = trio.from_thread.run(_run_bounded, host, scenario)
            problems = check(report)
            assert not problems, ("contract violated:\n  " + "\n  ".join(problems)
                                  + "\n" + describe(report))

        await trio.to_thread.run_sync(interleaving_keeps_the_contract)

    coverage = "\n".join(f"{n:4d}  {label}" for label, n in sorted(host.coverage.items()))
    print(f"{host.examples} examples, calls by class / stop phase / result:\n{coverage}")
    missing = REQUIRED_COVERAGE - set(host.coverage)
    assert not missing, f"paths not exercised: {missing}\n{coverage}"
