"""SessionOrder.quiet: a turn parked behind a pending request leaves when it is stopped,
also by a stop that never touches the chain (ops.abort, shutdown's dispose)."""

from __future__ import annotations

import trio

from runtime.daemon.session_order import SessionOrder
from runtime.daemon.sessions.store import SessionStore


async def test_a_parked_turn_leaves_quiet_when_stopped_outside_the_chain() -> None:
    order = SessionOrder(SessionStore.__new__(SessionStore))
    stopped = False
    left = trio.Event()

    async def parked() -> None:
        await order.quiet("s", lambda: stopped)
        left.set()

    async with trio.open_nursery() as nursery:
        async with order.place("s"):  # a request on the session, still taking its effect
            nursery.start_soon(parked)
            await trio.sleep(0.05)
            assert not left.is_set()
            stopped = True  # the controller aborted: the chain did not change
            with trio.fail_after(1):
                await left.wait()
