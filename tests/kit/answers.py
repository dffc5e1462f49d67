"""How a test's client answers the host's permission prompts, for the daemon's harness
(``agent_daemon``) and the host's (``running_host``) alike: every prompt allowed once,
every prompt denied, or never answered (a stop, a withdrawal or the prompt's timeout
ends it)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import trio

from protocol.messages.host import PermissionRequestParams, PermissionRequestResult

Answer = Callable[[PermissionRequestParams], Awaitable[PermissionRequestResult]]


async def allow(params: PermissionRequestParams) -> PermissionRequestResult:
    return PermissionRequestResult("allow-once")


async def deny(params: PermissionRequestParams) -> PermissionRequestResult:
    return PermissionRequestResult("deny")


async def never(params: PermissionRequestParams) -> PermissionRequestResult:
    await trio.sleep_forever()
    raise AssertionError("unreachable")
