"""A session's chain (SessionOrder): a request behind a pending one waits for its effect;
a turn parked in ``quiet`` leaves when the chain is quiet or when it is stopped, also by a
stop that never touches the chain (ops.abort, shutdown's dispose), at once and with no
timer (virtual time does not move)."""

from __future__ import annotations

import trio
import trio.testing

from protocol.causes import OperatorCause
from runtime.agent.registry.signal import AbortController
from runtime.daemon.sessions.order import SessionOrder
from runtime.link import Effect


async def test_a_parked_turn_leaves_quiet_when_stopped_outside_the_chain(
        autojump_clock: trio.testing.MockClock) -> None:
    order = SessionOrder()
    stop = AbortController()
    left = trio.Event()

    async def parked() -> None:
        await order.quiet(stop.signal)
        left.set()

    async with trio.open_nursery() as nursery:
        async with order.place(Effect()):  # a request on the session, still pending
            nursery.start_soon(parked)
            await trio.testing.wait_all_tasks_blocked()
            assert not left.is_set()
            before = trio.current_time()
            stop.abort(OperatorCause())  # the controller aborted: the chain did not change
            await left.wait()
            assert trio.current_time() == before


async def test_a_parked_turn_leaves_quiet_when_the_chain_is_quiet(
        autojump_clock: trio.testing.MockClock) -> None:
    order = SessionOrder()
    left = trio.Event()
    effect = Effect()

    async def parked() -> None:
        await order.quiet(AbortController().signal)
        left.set()

    async with trio.open_nursery() as nursery:
        async with order.place(effect) as place:
            nursery.start_soon(parked)
            await trio.testing.wait_all_tasks_blocked()
            assert not left.is_set()
            place.started()  # its effect: the request takes it, the chain is quiet
            assert effect.taken
            await left.wait()


async def test_a_request_behind_a_pending_one_waits_for_its_effect_and_the_chain_goes_idle(
        autojump_clock: trio.testing.MockClock) -> None:
    order = SessionOrder()
    first, second = Effect(), Effect()
    seen: list[str] = []

    async def behind() -> None:
        async with order.place(second):
            seen.append("second")

    async with trio.open_nursery() as nursery:
        async with order.place(first) as place:
            assert not order.idle
            nursery.start_soon(behind)
            await trio.testing.wait_all_tasks_blocked()
            assert second.taken and seen == []  # its place is its effect: the link reads on
            seen.append("first")
            place.started()
    assert seen == ["first", "second"] and order.idle
