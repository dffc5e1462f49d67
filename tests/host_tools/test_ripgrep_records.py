"""``ripgrep.Records``: any chunking of a stream gives the same records, a record longer than
``MAX_RECORD`` comes cut, and a reader is handed the loop back between records."""

from __future__ import annotations

import os

import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from host.tools import ripgrep


def _expected(data: bytes, sep: bytes) -> list[tuple[bytes, bool]]:
    parts = data.split(sep)
    if parts and parts[-1] == b"":
        parts.pop()
    return [(p[:ripgrep.MAX_RECORD], len(p) > ripgrep.MAX_RECORD) for p in parts]


async def _read(chunks: list[bytes], sep: bytes) -> list[tuple[bytes, bool]]:
    r, w = os.pipe()
    records = ripgrep.Records(trio.lowlevel.FdStream(r), sep)
    got: list[tuple[bytes, bool]] = []

    async def write() -> None:
        async with trio.lowlevel.FdStream(w) as out:
            for chunk in chunks:
                await out.send_all(chunk)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(write)
        while batch := await records.batch():
            assert len(batch) <= ripgrep.RECORDS_PER_STEP
            got += batch
    await records._stream.aclose()
    return got


records_st = st.lists(st.one_of(st.binary(max_size=20),
                                st.integers(ripgrep.MAX_RECORD - 2, ripgrep.MAX_RECORD + 3)
                                .map(lambda n: b"x" * n)), max_size=8)


@settings(max_examples=40, deadline=None)
@given(records_st, st.lists(st.integers(1, 300_000), max_size=6), st.booleans())
def test_any_chunking_gives_the_same_records(parts: list[bytes], cuts: list[int],
                                             trailing: bool) -> None:
    sep = b"\0"
    parts = [p.replace(sep, b"") for p in parts]
    data = sep.join(parts) + (sep if trailing and parts else b"")
    chunks, start = [], 0
    for cut in sorted(set(c for c in cuts if c < len(data))):
        chunks.append(data[start:cut])
        start = cut
    chunks.append(data[start:])
    got = trio.run(_read, [c for c in chunks if c], sep)
    assert got == _expected(data, sep)


async def test_a_fast_stream_of_records_gives_the_loop_back() -> None:
    """A chunk of many short records does not hold the loop: another task runs between
    them (``RECORDS_PER_STEP``)."""
    ticks = 0
    done = False

    async def ticker() -> None:
        nonlocal ticks
        while not done:
            ticks += 1
            await trio.lowlevel.checkpoint()

    count = 10 * ripgrep.RECORDS_PER_STEP
    async with trio.open_nursery() as nursery:
        nursery.start_soon(ticker)
        await trio.lowlevel.checkpoint()
        before = ticks
        got = await _read([b"a\n" * count], b"\n")
        done = True
    assert len(got) == count
    assert ticks - before >= 10
