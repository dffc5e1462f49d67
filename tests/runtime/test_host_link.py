"""The runtime's end of the host link: a host that answers the handshake with another
major version is refused, killed, reaped, and leaves no file descriptor open."""

from __future__ import annotations

import os
import sys

import psutil
import pytest
import trio

from protocol.errors import ErrorCode, RpcError
from runtime.supervision.link import HostLink
from tests.conftest import Marked

# A "host" of a future major version: it answers initialize, then waits on stdin.
FUTURE_HOST = r"""
import json, sys
request = json.loads(sys.stdin.readline())
answer = {"jsonrpc": "2.0", "id": request["id"],
          "result": {"protocolVersion": "9.0", "serverInfo": {"name": "h", "version": "9"}}}
sys.stdout.write(json.dumps(answer) + "\n")
sys.stdout.flush()
sys.stdin.read()
"""


def open_fds() -> set[int]:
    return {int(name) for name in os.listdir("/proc/self/fd")}


async def test_host_of_another_major_version_is_refused_and_released(marked: Marked) -> None:
    link = HostLink(command=[sys.executable, "-c", FUTURE_HOST], env=marked.env())
    before = open_fds()
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            with pytest.raises(RpcError) as info:
                await link.start(nursery)
    assert info.value.code == ErrorCode.PROTOCOL_MISMATCH
    assert link.pid is not None and not psutil.pid_exists(link.pid), "host left running"
    assert open_fds() <= before, "the host's pipes were left open"
