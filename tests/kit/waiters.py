"""Waiting on what the product leaves outside the test: files a tool or hook writes,
processes, recorded output. Each polls (the product gives the test no event to wait on
for these) and fails after ``within`` seconds instead of hanging."""

from __future__ import annotations

import pathlib
from collections.abc import Callable

import trio


async def wait_until(predicate: Callable[[], object], within: float = 5.0,
                     every: float = 0.01) -> None:
    """Poll external state (files, processes, recorded output) until ``predicate`` holds."""
    with trio.fail_after(within):
        while not predicate():
            await trio.sleep(every)


async def wait_file(path: pathlib.Path, within: float = 15.0, *, strip: bool = False) -> str:
    """The text of ``path`` once it exists and is not empty (``strip``: not only
    whitespace; the text is returned stripped), as a tool, a hook or a plugin server
    writes it."""

    def text() -> str:
        try:
            found = path.read_text()
        except FileNotFoundError:
            return ""
        return found.strip() if strip else found

    await wait_until(lambda: text(), within, every=0.02)
    return text()
