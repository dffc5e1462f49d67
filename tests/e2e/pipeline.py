"""A pipelining client of ``quiesce serve``: many requests in one write, answers by id.

Editors, scripts and pipes write several requests without waiting for each answer; the
daemon must take them in wire order. :class:`Pipeline` builds the frames, writes them
back to back in one ``send_all`` and reads until every request has its answer, keeping
the ``session.event`` notifications it reads on the way.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

import msgspec
import trio

from tests.kit.rawclient import RawClient

INIT = {"protocolVersion": "1.0", "clientInfo": {"name": "pipeline"}}


def write_then_end(path: str) -> list[list[dict[str, Any]]]:
    """A turn's script: a Write of ``path``, then a final text."""
    return [[{"toolCall": {"id": "w1", "name": "Write",
                           "args": {"path": path, "content": "ran\n"}}}],
            [{"text": "done"}]]


@dataclass
class Pipeline:
    raw: RawClient
    ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    answers: dict[Any, Any] = field(default_factory=dict)
    events: list[Any] = field(default_factory=list)
    duplicates: list[Any] = field(default_factory=list)

    def frame(self, method: str, params: Any = None) -> tuple[int, bytes]:
        request_id = next(self.ids)
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if params is not None:
            message["params"] = params
        return request_id, msgspec.json.encode(message) + b"\n"

    async def write(self, *requests: tuple[str, Any]) -> list[int]:
        """Write every request in one write, without waiting; their ids, in order."""
        framed = [self.frame(method, params) for method, params in requests]
        await self.raw.send_bytes(b"".join(data for _, data in framed))
        return [request_id for request_id, _ in framed]

    async def wait(self, ids: list[int], within: float = 30.0) -> list[Any]:
        """The answers to ``ids`` (each a whole response), reading until all are in."""
        with trio.fail_after(within):
            while not all(i in self.answers for i in ids):
                await self.pump(within)
        return [self.answers[i] for i in ids]

    async def pump(self, within: float = 30.0) -> None:
        """Read one message (or batch answer) and file it."""
        message = await self.raw.receive(within)
        for item in message if isinstance(message, list) else [message]:
            if "method" in item:
                self.events.append(item)
            elif item.get("id") in self.answers:
                self.duplicates.append(item)
            else:
                self.answers[item.get("id")] = item

    async def call(self, method: str, params: Any = None) -> Any:
        [answer] = await self.wait(await self.write((method, params)))
        return answer

    def scripted_session(self, workspace: str, script: list[Any],
                         mode: str = "auto") -> tuple[str, Any]:
        return ("session.new", {"workspace": workspace, "permissionMode": mode,
                                "provider": {"kind": "scripted", "script": script}})
