"""A host's liveness: pinged with ``host.stats``; one that does not answer in time is
killed (SIGKILL works on a stopped process too), which its supervisor sees as its death."""

from __future__ import annotations

import logging
import time

import trio

from protocol.messages.common import Empty
from runtime.supervision.failures import HostRefused, HostUnavailable
from runtime.supervision.link import HostLink

log = logging.getLogger(__name__)

DEFAULT_PING_INTERVAL = 2.0
DEFAULT_LIVENESS_TIMEOUT = 10.0


async def ping_until_dead(link: HostLink, interval: float,
                          answer_within: float) -> None:
    """Ping the host every ``interval`` s until its link closes, or kill it if a ping
    goes unanswered for ``answer_within`` s."""
    while True:
        await trio.sleep(interval)
        started = time.monotonic()
        with trio.move_on_after(answer_within):
            try:
                await link.request("host.stats", Empty())
            except HostUnavailable:
                return
            except HostRefused as exc:  # it answered: alive
                log.warning("host %s answered a ping with %s", link.pid, exc)
            continue
        log.error("host %s did not answer a ping within %.1f s (sent %.1f s ago): "
                  "killing it", link.pid, answer_within, time.monotonic() - started)
        link.kill()
        return
