"""Streaming many frames into a live process and checking every answer it gives back.

One task writes (the frames joined, cut into chunks of random sizes, so a frame may
arrive in pieces or many to a read); another reads at the same time, so neither pipe
can fill up and deadlock. Answers are matched to what each frame deserves by id;
answers with a null id, which cannot be matched, are counted by code.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
from collections import Counter
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import msgspec
import psutil
import trio
from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st

from tests.fuzz.wire import OK, PRE, READY, Answer, Ids, Msg, Template, instantiate

QUIET = 0.75  # no new answer for this long, once all are in or the process is idle: done


def fuzz_seed() -> int:
    """QUIESCE_FUZZ_SEED reproduces a run; otherwise a fresh one (printed on failure)."""
    text = os.environ.get("QUIESCE_FUZZ_SEED")
    return int(text) if text else random.randrange(2**32)


def draw_templates(strategy: st.SearchStrategy[list[Template]], *, examples: int,
                   seed_value: int) -> list[Template]:
    """Let hypothesis draw ``examples`` lists of messages; return them all."""
    drawn: list[Template] = []

    @settings(max_examples=examples, database=None, deadline=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @seed(seed_value)
    @given(strategy)
    def collect(templates: list[Template]) -> None:
        drawn.extend(templates)

    collect()
    return drawn


@dataclass
class Peer:
    """A process driven over its stdin/stdout; its stderr goes to a file."""

    process: trio.Process
    log_path: str
    buffer: bytes = b""
    received: list[Any] = field(default_factory=list)  # answers (dicts, arrays)
    from_peer: list[Any] = field(default_factory=list)  # its own requests/notifications
    undecodable: list[bytes] = field(default_factory=list)
    changed: trio.Event = field(default_factory=trio.Event)
    rss: list[int] = field(default_factory=list)

    @property
    def stdin(self) -> trio.abc.SendStream:
        assert self.process.stdin is not None
        return self.process.stdin

    def rss_now(self) -> int:
        return int(psutil.Process(self.process.pid).memory_info().rss)

    async def read_forever(self) -> None:
        assert self.process.stdout is not None
        while True:
            chunk = await self.process.stdout.receive_some(1 << 18)
            if not chunk:
                return
            self.buffer += chunk
            *lines, self.buffer = self.buffer.split(b"\n")
            for line in lines:
                try:
                    message = msgspec.json.decode(line)
                except msgspec.DecodeError:
                    self.undecodable.append(line)
                    continue
                if isinstance(message, dict) and "method" in message:
                    self.from_peer.append(message)
                else:
                    self.received.append(message)
            self.changed.set()
            self.changed = trio.Event()

    async def sample_rss(self, every: float = 0.05) -> None:
        while True:
            try:
                self.rss.append(self.rss_now())
            except psutil.NoSuchProcess:
                return
            await trio.sleep(every)

    async def settle(self, count: int, within: float) -> None:
        """Wait for ``count`` answers and then for quiet (extra answers would show), or for
        a longer quiet when answers are missing (the check then says which)."""
        with trio.move_on_after(within):
            while True:
                before = len(self.received) + len(self.from_peer)
                with trio.move_on_after(QUIET if len(self.received) >= count else 10 * QUIET):
                    await self.changed.wait()
                if len(self.received) + len(self.from_peer) == before:
                    return

    async def send_chunked(self, frames: Sequence[bytes], rnd: random.Random) -> None:
        data = b"".join(f + b"\n" for f in frames)
        at = 0
        while at < len(data):
            roll = rnd.random()
            size = (rnd.randint(1, 64) if roll < 0.05 else
                    rnd.randint(64, 8192) if roll < 0.35 else rnd.randint(8192, 1 << 18))
            try:
                await self.stdin.send_all(data[at:at + size])
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                with trio.move_on_after(2):
                    await self.process.wait()
                self.require_alive(f"after {at} of {len(data)} bytes")
                raise
            at += size

    def require_alive(self, when: str = "") -> None:
        """Fail, with the tail of its log, if the process has exited."""
        if self.process.returncode is not None:
            with open(self.log_path, "rb") as log:
                tail = log.read()[-3000:].decode("utf-8", "replace")
            raise AssertionError(f"the process exited with {self.process.returncode} {when}; "
                                 f"its log ends:\n{tail}")

    async def send(self, obj: Any) -> None:
        await self.stdin.send_all(msgspec.json.encode(obj) + b"\n")

    async def answer_to(self, rid: Any, within: float = 20.0) -> Any:
        with trio.fail_after(within):
            while True:
                for answer in self.received:
                    if isinstance(answer, dict) and answer.get("id") == rid \
                            and type(answer.get("id")) is type(rid):
                        return answer
                await self.changed.wait()

    async def from_peer_matching(self, predicate: Callable[[Any], bool],
                                 within: float = 20.0) -> Any:
        with trio.fail_after(within):
            while True:
                for message in self.from_peer:
                    if predicate(message):
                        return message
                await self.changed.wait()

    async def call(self, obj: dict[str, Any], within: float = 20.0) -> Any:
        """One request, answered before anything else is sent."""
        await self.send(obj)
        return await self.answer_to(obj["id"], within)


@asynccontextmanager
async def spawned(command: Sequence[str], env: Mapping[str, str],
                  log_path: str) -> AsyncIterator[Peer]:
    with open(log_path, "wb") as log:
        process = await trio.lowlevel.open_process(
            list(command), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log,
            env=dict(env))
    peer = Peer(process, log_path)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(peer.read_forever)
            nursery.start_soon(peer.sample_rss)
            yield peer
            nursery.cancel_scope.cancel()
    finally:
        if process.returncode is None:
            with trio.CancelScope(shield=True):
                with trio.move_on_after(15):
                    await peer.stdin.aclose()
                    await process.wait()
                if process.returncode is None:
                    process.kill()
                    await process.wait()


async def stream_checked(peer: Peer, msgs: Sequence[Msg], rnd: random.Random) -> Report:
    """Stream ``msgs``, wait for their answers, check them (the process must live on)."""
    await peer.send_chunked([m.frame for m in msgs], rnd)
    await peer.settle(sum(m.answer is not None for m in msgs), within=40)
    peer.require_alive("while answering the stream")
    return check(msgs, peer.received)


async def before_handshake(peer: Peer, templates: Sequence[Template], ids: Ids, count: int,
                           rnd: random.Random, where: str) -> Report:
    """Stream ``count`` of the messages that do not shake hands, before any handshake:
    each answered (as refused), the process alive, nothing sent of its own."""
    pre = instantiate([t for t in templates if not t.initializes][:count], ids, PRE)
    await peer.send_chunked([m.frame for m in pre], rnd)
    await peer.settle(sum(m.answer is not None for m in pre), within=20)
    peer.require_alive("before the handshake")
    report = check(pre, peer.received)
    require_clean(report, where)
    assert not peer.from_peer, peer.from_peer[:3]
    peer.received.clear()
    return report


def ready_messages(templates: Sequence[Template], ids: Ids, rnd: random.Random,
                   count: int) -> list[Msg]:
    """At least ``count`` messages for after the handshake: the drawn templates again and
    again, each time in another order."""
    msgs: list[Msg] = []
    while len(msgs) < count:
        order = list(templates)
        rnd.shuffle(order)
        msgs += instantiate(order, ids, READY, rnd)
    return msgs


@dataclass
class Halves:
    first: Report
    second: Report
    middle_rss: int  # after the first half: the plateau
    rss: list[int]  # the samples since the stream began


async def in_two_halves(peer: Peer, msgs: Sequence[Msg], rnd: random.Random, *, label: str,
                        baseline: int, samples_from: int, where: str) -> Halves:
    """Stream ``msgs`` in two halves, each answered in full and clean: memory after the
    first is the plateau. Prints a summary of the second."""
    half = len(msgs) // 2
    started = trio.current_time()
    first = await stream_checked(peer, msgs[:half], rnd)
    require_clean(first, where)
    peer.received.clear()
    middle_rss = peer.rss_now()
    second = await stream_checked(peer, msgs[half:], rnd)
    seconds = trio.current_time() - started
    rss = peer.rss[samples_from:]
    print(summary(f"{label} (second half; the first: {first.sent} frames, RSS "
                  f"{middle_rss / 2**20:.1f} MiB after it)", second, rss, baseline,
                  seconds), where)
    require_clean(second, where)
    return Halves(first, second, middle_rss, rss)


def host_command() -> list[str]:
    return [sys.executable, "-m", "host"]


def _key(rid: Any) -> tuple[str, Any]:
    return (type(rid).__name__, rid)  # 1 and "1" are different ids


def _code(answer: Any) -> int | None:
    """The code of an answer (OK for a result); None when it is no valid response."""
    if not isinstance(answer, dict) or answer.get("jsonrpc") != "2.0" or "id" not in answer:
        return None
    if ("result" in answer) == ("error" in answer):
        return None
    if "result" in answer:
        return OK
    error = answer["error"]
    if not isinstance(error, dict) or not isinstance(error.get("code"), int) \
            or not isinstance(error.get("message"), str):
        return None
    return int(error["code"])


@dataclass
class Report:
    sent: int = 0
    expected_answers: int = 0
    received: int = 0
    problems: list[str] = field(default_factory=list)
    codes: Counter[int] = field(default_factory=Counter)


def check(msgs: Sequence[Msg], received: Sequence[Any],
          describe: Callable[[Msg], str] | None = None) -> Report:
    """Every frame that deserves an answer got exactly one, with an acceptable code and
    the id it should carry; nothing else was answered."""
    report = Report(sent=len(msgs), received=len(received))
    show = describe or (lambda m: f"{m.label}: {m.frame[:300]!r}")
    by_id: dict[tuple[str, Any], tuple[Answer, Msg]] = {}
    nulls: Counter[int] = Counter()
    batches: list[tuple[tuple[Answer, ...], Msg]] = []
    batch_of: dict[tuple[str, Any], int] = {}
    for msg in msgs:
        if msg.answer is None:
            continue
        report.expected_answers += 1
        if isinstance(msg.answer, tuple):
            for a in msg.answer:
                if a.id is not None:
                    batch_of[_key(a.id)] = len(batches)
            batches.append((msg.answer, msg))
        elif msg.answer.id is None:
            (code,) = msg.answer.codes
            nulls[code] += 1
        else:
            by_id[_key(msg.answer.id)] = (msg.answer, msg)

    seen: set[tuple[str, Any]] = set()
    got_nulls: Counter[int] = Counter()
    matched_batches: set[int] = set()
    null_only_arrays: list[Counter[int]] = []

    def single(answer: Any, expected: Answer | None, msg: Msg | None) -> None:
        code = _code(answer)
        if code is None:
            report.problems.append(f"not a JSON-RPC response: {answer!r}"[:400])
            return
        report.codes[code] += 1
        if expected is not None and code not in expected.codes:
            assert msg is not None
            report.problems.append(
                f"wrong code {code} (want {sorted(expected.codes)}) for {show(msg)} "
                f"-> {answer!r}"[:700])

    for answer in received:
        if isinstance(answer, list):
            ids = [_key(a["id"]) for a in answer
                   if isinstance(a, dict) and a.get("id") is not None]
            owners = {batch_of.get(k) for k in ids}
            if not answer:
                report.problems.append("an empty array answer")
                continue
            if not ids:
                null_only_arrays.append(Counter(_code(a) or 0 for a in answer))
                continue
            if len(owners) != 1 or None in owners:
                report.problems.append(f"array answer mixing or inventing ids: {answer!r}"[:500])
                continue
            (index,) = owners
            assert index is not None
            if index in matched_batches:
                report.problems.append(f"batch answered twice: {show(batches[index][1])}")
                continue
            matched_batches.add(index)
            want, msg = batches[index]
            want_nulls = Counter(next(iter(a.codes)) for a in want if a.id is None)
            got: Counter[int] = Counter()
            want_ids = {_key(a.id): a for a in want if a.id is not None}
            for member in answer:
                if not isinstance(member, dict) or member.get("id") is None:
                    got[_code(member) or 0] += 1
                    continue
                k = _key(member["id"])
                if k not in want_ids:
                    report.problems.append(f"batch answer with a foreign id {k}: {show(msg)}")
                    continue
                single(member, want_ids.pop(k), msg)
            if want_ids:
                report.problems.append(f"batch members unanswered {sorted(map(str, want_ids))}: "
                                       f"{show(msg)}"[:700])
            if got != want_nulls:
                report.problems.append(f"batch null-id answers {dict(got)} != {dict(want_nulls)}"
                                       f": {show(msg)} -> {answer!r}"[:700])
            continue
        if not isinstance(answer, dict):
            report.problems.append(f"answer is neither object nor array: {answer!r}"[:300])
            continue
        rid = answer.get("id")
        if rid is None:
            code = _code(answer)
            single(answer, None, None)
            if code is not None:
                got_nulls[code] += 1
            continue
        k = _key(rid)
        if k in seen:
            report.problems.append(f"answered twice: id {rid!r}")
            continue
        seen.add(k)
        if k not in by_id:
            report.problems.append(f"answer with an id no frame deserves: {answer!r}"[:500])
            continue
        expected, msg = by_id[k]
        single(answer, expected, msg)

    for k, (_expected, msg) in by_id.items():
        if k not in seen:
            report.problems.append(f"no answer (or id lost) for {show(msg)}"[:700])
    # Arrays of null-id members only: match them to the remaining all-null batches.
    for index, (want, msg) in enumerate(batches):
        if index in matched_batches:
            continue
        if all(a.id is None for a in want):
            want_counter = Counter(next(iter(a.codes)) for a in want)
            if want_counter in null_only_arrays:
                null_only_arrays.remove(want_counter)
                continue
        report.problems.append(f"batch unanswered: {show(msg)}"[:700])
    for extra in null_only_arrays:
        report.problems.append(f"array answer nobody asked for: {dict(extra)}")
    if got_nulls != nulls:
        # Null-id answers cannot be told apart; this endpoint happens to send them in frame
        # order, so the first place where the two sequences part names the culprit.
        want_seq = [(next(iter(m.answer.codes)), m) for m in msgs
                    if isinstance(m.answer, Answer) and m.answer.id is None]
        got_seq = [_code(a) for a in received if isinstance(a, dict) and a.get("id") is None]
        hint = ""
        for (want_code, msg), got_code in zip(want_seq, got_seq, strict=False):
            if want_code != got_code:
                hint = f"first difference: got {got_code}, want {want_code}, for {show(msg)}"
                break
        report.problems.append(f"null-id answers by code: missing {dict(nulls - got_nulls)}, "
                               f"extra {dict(got_nulls - nulls)}. {hint}"[:1500])
    return report


def require_clean(report: Report, where: str) -> None:
    """Fail with every problem spelled out (pytest would cut a long assertion short)."""
    if report.problems:
        shown = "\n  ".join(report.problems[:15])
        raise AssertionError(f"{len(report.problems)} problems {where}:\n  {shown}")


def log_errors(path: str) -> list[str]:
    """Lines of a process's JSON log at error level, or tracebacks."""
    with open(path, "rb") as f:
        lines = f.read().decode("utf-8", "replace").splitlines()
    return [line[:600] for line in lines
            if '"level":"error"' in line or '"level":"critical"' in line
            or line.startswith("Traceback")]


def summary(label: str, report: Report, rss: Sequence[int], baseline: int,
            seconds: float) -> str:
    peak = max(rss, default=baseline)
    end = rss[-1] if rss else baseline
    return (f"{label}: {report.sent} frames, {report.expected_answers} answers expected, "
            f"{report.received} received in {seconds:.1f}s; codes {dict(report.codes)}; "
            f"RSS baseline {baseline / 2**20:.1f} MiB, peak {peak / 2**20:.1f} MiB, "
            f"end {end / 2**20:.1f} MiB")

