"""One hook run on the turn's host (``hooks.run``), stopped by the call's signal.

The hook's process tree is the host's (``host/hooks.py``); here is only its request and
what a stop does to it: the call's signal aborted while the hook runs sends
``hooks.abort`` (the host kills the tree: TERM, its kill grace, KILL) and waits for
``hooks.run``'s answer, at most ``grace`` seconds (the runtime's process grace). The
answer says how the hook ended: ``stopped`` (its tree was killed), or how it ended first
(a denial that settled as the stop landed is still a denial). ``None``: stopped, and no
answer came within the grace; the hook's processes were then ended by the runtime
(``HostPort.end_call_processes``: its cgroup killed, or the host ended) before this
returns.
"""

from __future__ import annotations

import logging

import trio

from protocol.messages.host import HooksAbortParams, HooksRunParams, HooksRunResult
from runtime.agent.hostport import HostPort
from runtime.agent.registry import AbortSignal, cancel_on_abort
from runtime.supervision.failures import (
    HostError,
    HostLost,
    HostNotReached,
    HostRefused,
    HostRequestTooLarge,
)

log = logging.getLogger(__name__)


async def run_hook(host: HostPort, params: HooksRunParams, signal: AbortSignal, *,
                   grace: float) -> HooksRunResult | None:
    """Run the hook; its result, ``None`` if stopped with no answer within ``grace``.
    Raises ``AbortError`` if the signal was aborted before the request was sent."""
    with cancel_on_abort(signal):
        await host.ready()  # from here a request is queued without a checkpoint
    signal.raise_if_aborted()
    done = trio.Event()
    outcome: list[HooksRunResult] = []
    sent = False

    async def send() -> None:
        nonlocal sent
        if signal.aborted:  # stopped before this task ran: nothing is sent
            done.set()
            return
        sent = True  # the request is queued before this task's first checkpoint
        try:
            outcome.append(await host.request("hooks.run", params))
        except (HostNotReached, HostRequestTooLarge) as exc:
            outcome.append(HooksRunResult("failed", error=f"the hook was not sent: {exc}"))
        except HostLost:
            outcome.append(HooksRunResult("failed", error="the host exited while it ran"))
        except HostRefused as exc:
            outcome.append(HooksRunResult("failed", error=f"the host refused it: {exc}"))
        done.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(send)
        with cancel_on_abort(signal):
            await done.wait()
        if not done.is_set() and sent:
            with trio.move_on_after(grace):
                await _abort(host, params)
                await done.wait()
            if not done.is_set():
                # An answered stop means the hook's processes are gone: end them ourselves
                # (its cgroup, or the host), as for a process call past its grace.
                with trio.CancelScope(shield=True):
                    ended = await host.end_call_processes(params.session_id, params.hook_id)
                log.warning("hook %s: no answer within %g s of its stop; its processes were "
                            "ended by the runtime (%s)", params.hook_id, grace, ended)
        nursery.cancel_scope.cancel()
    if not outcome:
        if not sent:  # only a stop keeps it from being sent
            signal.raise_if_aborted()
        return None
    return outcome[0]


async def _abort(host: HostPort, params: HooksRunParams) -> None:
    try:
        await host.request_if_alive("hooks.abort", HooksAbortParams(params.session_id,
                                                                    params.hook_id))
    except HostError as exc:
        log.info("hooks.abort %s: %s", params.hook_id, exc)
