"""The host leaving (the runtime is gone or leaving, a signal, EOF): stop every call,
wait a bounded time for their results, force what nobody can wait for any more, and
kill every plugin server."""

from __future__ import annotations

import logging

import trio

from host.calls import CallTable
from host.sessions import HostSessions
from protocol.causes import Cause
from protocol.hostconfig import HostConfig
from protocol.toolclass import ToolClass

log = logging.getLogger(__name__)


def force_stuck(calls: CallTable) -> int:
    """Force every stopped call whose body the host would otherwise wait for forever."""
    stuck = [call for call in calls if call.body_invoked and not call.forced
             and call.tool_class in (ToolClass.MUTATING, ToolClass.PLUGIN)]
    for call in stuck:
        call.force()
    return len(stuck)


async def stop_all(calls: CallTable, sessions: HostSessions, config: HostConfig,
                   cause: Cause, *, within: float | None = None) -> None:
    """Stop every call and wait until none is left (the runtime is gone or leaving);
    past the kill grace plus ``stop_timeout``, force the calls still waiting on a body."""
    for call in calls:
        call.request_stop(cause)
    wait_for = within if within is not None else (config.tools.kill_grace
                                                  + config.stop_timeout)
    async with trio.open_nursery() as nursery:
        # Plugin servers die with the host. Nobody waits for a plugin call any more,
        # so one that has not settled once an honoured stop would have (the quiet
        # window) ends with its server, as a Bash call ends with its tree.
        nursery.start_soon(_close_plugins_after, calls, sessions,
                           config.plugins.quiet_window + 1.0)
        with trio.move_on_after(wait_for) as scope:
            await calls.idle.wait()
        nursery.cancel_scope.cancel()
    if scope.cancelled_caught:
        # Nobody can wait for these any more (the runtime is gone or leaving): their
        # results say "forced"; a plugin's server is killed, a mutating body abandoned.
        log.warning("%d calls still running %.1f s after stop_all; forcing %d",
                    len(calls), wait_for, force_stuck(calls))
        with trio.move_on_after(config.tools.kill_grace + 1.0):
            await calls.idle.wait()
    await sessions.close_plugins("the host is stopping")


async def _close_plugins_after(calls: CallTable, sessions: HostSessions, delay: float) -> None:
    await trio.sleep(delay)
    if any(call.tool_class is ToolClass.PLUGIN for call in calls):
        await sessions.close_plugins("the host is stopping")
