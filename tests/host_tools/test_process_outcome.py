"""``run_tree``'s outcome when the root's exit and the stop wake their waiters together.

The stop's TERM goes out as the abort arrives (``ToolContext.on_stop``), so a root that
dies of it can be seen exited in the same scheduler pass as the stop is seen: trio runs
a pass's tasks in either order. Such a call was stopped, and must say so (``ABORTED``),
not "exited" with the TERM as its exit (the wrong code for a stopped call).
"""

from __future__ import annotations

import trio

from host.tools import process


class _ExitedChild:
    """A root already exited (its pidfd readable at once)."""

    async def wait_exited(self) -> None:
        await trio.lowlevel.checkpoint()


async def test_an_exit_seen_with_the_stop_set_is_a_stop() -> None:
    for _ in range(40):  # either order of the two waiters, many times over
        stop = trio.Event()
        stop.set()
        outcome = await process._first_event(_ExitedChild(), stop, 10)  # type: ignore[arg-type]
        assert outcome == "stopped"


async def test_an_exit_without_a_stop_is_an_exit() -> None:
    assert await process._first_event(_ExitedChild(), trio.Event(), 10) == "exited"  # type: ignore[arg-type]
