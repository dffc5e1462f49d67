from __future__ import annotations

import msgspec
import pytest
import trio
import trio.testing

from runtime.agent.registry import (
    AbortController,
    AbortError,
    AbortSignal,
    Cause,
    DisposedCause,
    HookCause,
    OperatorCause,
    ParentCause,
    TimeoutCause,
    UserCause,
    cancel_on_abort,
    fuse,
    on_abort,
)


def test_first_cause_wins() -> None:
    controller = AbortController()
    signal = controller.signal
    assert not signal.aborted and signal.cause is None
    signal.raise_if_aborted()  # no-op while live
    assert controller.abort(HookCause("lint")) is True
    assert controller.abort(UserCause()) is False
    assert signal.aborted and signal.cause == HookCause("lint")
    with pytest.raises(AbortError) as caught:
        signal.raise_if_aborted()
    assert caught.value.cause == HookCause("lint")


def test_a_signal_is_only_made_by_a_controller_or_fuse() -> None:
    with pytest.raises(TypeError):
        AbortSignal(object())


@pytest.mark.parametrize("cause", [UserCause(), ParentCause(), HookCause("r"), DisposedCause(),
                                   OperatorCause(), TimeoutCause(2.5)])
def test_causes_are_durable_tagged_structs(cause: Cause) -> None:
    data = msgspec.json.encode(cause)
    assert msgspec.json.decode(data)["kind"] == cause.kind
    assert msgspec.json.decode(data, type=Cause) == cause
    with pytest.raises(AttributeError):
        cause.kind = "user"  # type: ignore[misc]


async def test_wait_returns_the_cause() -> None:
    controller = AbortController()
    got: list[Cause] = []

    async def waiter() -> None:
        got.append(await controller.signal.wait())

    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(waiter)
            await trio.testing.wait_all_tasks_blocked()
            assert got == []
            controller.abort(ParentCause())
    assert got == [ParentCause()]
    assert await controller.signal.wait() == ParentCause()  # already aborted: at once


def test_fused_aborts_with_either_parent_and_detaches_on_exit() -> None:
    a, b = AbortController(), AbortController()
    with fuse(a.signal, b.signal) as fused:
        assert a.signal.listener_count == b.signal.listener_count == 1
        assert not fused.aborted
        b.abort(OperatorCause())
        assert fused.cause == OperatorCause()
        assert not a.signal.aborted  # never upstream
        a.abort(UserCause())
        assert fused.cause == OperatorCause()
    assert a.signal.listener_count == b.signal.listener_count == 0

    c, d = AbortController(), AbortController()
    with fuse(c.signal, d.signal) as fused:
        pass
    c.abort(UserCause())
    assert not fused.aborted  # after exit it no longer follows its parents


def test_fused_with_an_aborted_parent_is_aborted_at_once() -> None:
    a, b = AbortController(), AbortController()
    b.abort(HookCause("early"))
    with fuse(a.signal, b.signal) as fused:
        assert fused.cause == HookCause("early")
        assert a.signal.listener_count == 1
    assert a.signal.listener_count == 0


async def test_cancel_on_abort_cancels_the_scope_when_the_signal_aborts(
    autojump_clock: trio.testing.MockClock,
) -> None:
    controller = AbortController()

    async def stopper() -> None:
        await trio.sleep(1)
        controller.abort(UserCause())

    async with trio.open_nursery() as nursery:
        nursery.start_soon(stopper)
        with trio.fail_after(5), cancel_on_abort(controller.signal) as scope:
            assert controller.signal.listener_count == 1
            await trio.sleep_forever()
    assert scope.cancelled_caught
    assert controller.signal.listener_count == 0


async def test_cancel_on_abort_with_an_aborted_signal_cancels_at_once() -> None:
    controller = AbortController()
    controller.abort(DisposedCause())
    reached = False
    with cancel_on_abort(controller.signal) as scope:
        await trio.sleep(10)
        reached = True
    assert scope.cancelled_caught and not reached


async def test_cancel_on_abort_removes_its_listener_when_not_aborted() -> None:
    controller = AbortController()
    with cancel_on_abort(controller.signal) as scope:
        await trio.lowlevel.checkpoint()
    assert controller.signal.listener_count == 0
    controller.abort(UserCause())
    assert not scope.cancel_called  # the old scope is no longer tied to the signal


def test_on_abort_runs_its_listener_in_the_aborting_call_while_its_block_lasts() -> None:
    controller, heard = AbortController(), []
    with on_abort(controller.signal, heard.append):
        assert heard == []
        controller.abort(UserCause())
        assert heard == [UserCause()]  # before abort() returned
    later = AbortController()
    with on_abort(later.signal, heard.append):
        pass
    later.abort(UserCause())  # the block ended: not heard
    assert heard == [UserCause()]
    with on_abort(controller.signal, heard.append):  # already aborted: heard at once
        assert heard == [UserCause(), UserCause()]
