"""ripgrep as a child process: where ``rg`` is, how it is run, and its output read boundedly.

Grep and Glob never search or walk in the host's interpreter: a catastrophic regular
expression or a huge tree costs a child process, not the host's event loop (or its
interpreter lock), and a stop kills that child at once (``host.spawn``; its own cgroup
where the host has them). ripgrep's regex engine is linear-time.

``rg`` is the one the ``ripgrep`` wheel installed next to the host's interpreter (the
project depends on ``ripgrep>=14.1,<15``), else the first ``rg`` on ``PATH``; with
neither, Grep and Glob fail with a message saying so. ``QUIESCE_RG`` names another
binary (tests, odd installations).

Every run passes ``--no-config`` (a ``RIPGREP_CONFIG_PATH`` cannot change what a tool
does). ripgrep's defaults decide what is searched: files named by ``.gitignore`` (in a
git repository), ``.ignore`` and ``.rgignore`` files, hidden files and directories, and
binary files (a NUL byte) met while walking are skipped, and symlinks are not followed
(nor listed). A tool's ``includeIgnored: true`` adds ``--no-ignore --hidden`` and still
skips ``.git`` directories.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import signal
import sys
from collections import deque
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

import trio

from host import fsnames, spawn
from host.sandbox import SessionSandbox
from host.workspace import ToolInputError
from protocol.errors import ErrorCode
from runtime.proc.proctree import Marker

KILL_GRACE = 0.2
"""Seconds between TERM and KILL for an ``rg`` stopped early (it honours TERM at once)."""
MAX_RECORD = 256 * 1024
"""Longest output record (a line of Grep's output, a name of Glob's) read whole; a longer
one is cut."""
NICENESS = 19
"""A search runs at a lower CPU priority than the host (and the tools it serves): many
searches at once slow each other, not the host's answers. Its stop gives the host's
priority back before the TERM (``host.spawn_start.restore_priority``): lowered, it would
wait for the CPU to die."""
STDERR_KEEP = 4096
STDERR_WAIT = 1.0
"""Seconds to wait for the end of ``rg``'s stderr once it exited."""

BASE_ARGS = ("--no-config",)
INCLUDE_IGNORED_ARGS = ("--no-ignore", "--hidden", "--glob", "!.git")


def shown_path(prefix: bytes, name: bytes) -> str:
    """A name ``rg`` printed relative to the directory it ran in (``prefix``, relative to
    the workspace; ``.`` its root), as the model sees it: relative to the workspace,
    non-UTF-8 bytes escaped (``host.fsnames``)."""
    return fsnames.show(name if prefix == b"." else prefix + b"/" + name)


@functools.cache
def _found_rg() -> str | None:
    beside = os.path.join(os.path.dirname(sys.executable), "rg")
    if os.access(beside, os.X_OK):
        return beside
    return shutil.which("rg")


def rg_binary() -> str:
    """The ``rg`` to run, or ``ToolInputError`` (``TOOL_FAILED``) saying none was found."""
    chosen = os.environ.get("QUIESCE_RG") or _found_rg()
    if chosen is None:
        raise ToolInputError(ErrorCode.TOOL_FAILED, (
            "ripgrep (rg) is not installed: install the `ripgrep` package "
            "(pip install 'ripgrep>=14.1,<15') or put rg on PATH"))
    return chosen


RECORDS_PER_STEP = 64
"""Records handed out at once, with a checkpoint before the next batch: a reader of a fast
``rg`` gives the event loop back after each handful (a whole 64 KiB chunk of short records
at once would hold the loop for milliseconds while other sessions wait)."""


class Records:
    """``sep``-terminated records of a stream, each at most ``MAX_RECORD`` bytes kept: a
    longer one comes as its first ``MAX_RECORD`` bytes with ``cut`` true."""

    def __init__(self, stream: trio.lowlevel.FdStream, sep: bytes) -> None:
        self._stream = stream
        self._sep = sep
        self._buffer = b""
        self._skipping = False  # inside a record already cut
        self._ready: deque[tuple[bytes, bool]] = deque()
        self._eof = False

    async def batch(self) -> list[tuple[bytes, bool]]:
        """The next records ``(record, cut)``, at most ``RECORDS_PER_STEP``; empty at the end
        of the stream. Between two batches the event loop is given back (a checkpoint),
        whether or not the stream had to be read."""
        if self._ready:
            await trio.lowlevel.checkpoint()
        while not self._ready:
            if self._eof:
                return []
            chunk = await self._stream.receive_some(65536)
            if chunk:
                self._split(chunk)
                continue
            self._eof = True
            if self._buffer and not self._skipping:
                self._ready.append((self._buffer, False))
            self._buffer = b""
        ready = self._ready
        if len(ready) <= RECORDS_PER_STEP:
            taken = list(ready)
            ready.clear()
        else:
            taken = [ready.popleft() for _ in range(RECORDS_PER_STEP)]
        return taken

    async def count_rest(self) -> int:
        """How many records are left, counted without splitting them (cheap: the rest of a
        listing of a huge tree)."""
        count = len(self._ready)
        self._ready.clear()
        partial = bool(self._buffer) or self._skipping
        self._buffer = b""
        self._skipping = False
        while not self._eof:
            chunk = await self._stream.receive_some(65536)
            if not chunk:
                self._eof = True
                break
            count += chunk.count(self._sep)
            partial = not chunk.endswith(self._sep)
        return count + partial

    def _split(self, chunk: bytes) -> None:
        parts = chunk.split(self._sep)
        rest = parts.pop()  # after the last separator: the start of the next record
        for part in parts:
            if self._skipping:  # the end of a record already cut
                self._skipping = False
                self._buffer = b""
                continue
            record = self._buffer + part if self._buffer else part
            self._buffer = b""
            if len(record) > MAX_RECORD:
                self._ready.append((record[:MAX_RECORD], True))
            else:
                self._ready.append((record, False))
        if self._skipping:
            return
        self._buffer += rest
        if len(self._buffer) > MAX_RECORD:
            self._ready.append((self._buffer[:MAX_RECORD], True))
            self._buffer = b""
            self._skipping = True


class _Stderr:
    def __init__(self) -> None:
        self.data = bytearray()
        self.done = trio.Event()

    async def collect(self, stream: trio.lowlevel.FdStream) -> None:
        while chunk := await stream.receive_some(65536):
            if len(self.data) < STDERR_KEEP:
                self.data += chunk[:STDERR_KEEP - len(self.data)]
        self.done.set()

    def text(self) -> str:
        return self.data.decode("utf-8", "replace").strip()


class RgRun:
    """A running ``rg``: its output records, and, once it ended, its status and stderr."""

    def __init__(self, child: spawn.Child, sep: bytes, stderr: _Stderr) -> None:
        self.child = child
        self.records = Records(child.stdout, sep)
        self._stderr = stderr

    @property
    def stderr(self) -> str:
        return self._stderr.text()

    async def returncode(self) -> int | None:
        """Once ``rg`` exited and its stderr was read (its messages are then whole)."""
        await self.child.wait_exited()
        with trio.move_on_after(STDERR_WAIT):
            await self._stderr.done.wait()
        self.child.popen.poll()  # reaps it: its output was read to the end
        return self.child.popen.returncode


@asynccontextmanager
async def run_rg(args: Sequence[str], *, cwd: str, marker: Marker | None,
                 cgroup_name: str | None = None, sep: bytes = b"\n",
                 sandbox: SessionSandbox | None = None) -> AsyncIterator[RgRun]:
    """Run ``rg`` with ``args``; however the block ends (read to the end, stopped early,
    cancelled by a stop), its process tree is killed and reaped. With the session's
    ``sandbox`` it is confined by the kernel to reading beneath the workspace, whatever
    the sandbox's mode (``SessionSandbox.confine_search``): a directory swapped for a
    symlink to elsewhere while it walks cannot lead it out."""
    binary = rg_binary()
    argv = [binary, *BASE_ARGS, *args]
    env_extra = {"RIPGREP_CONFIG_PATH": ""}
    stderr = _Stderr()
    async with spawn.spawned(argv, cwd=cwd, marker=marker, grace=KILL_GRACE,
                             env_extra=env_extra, cgroup_name=cgroup_name,
                             niceness=NICENESS, sweep_escapes=False,
                             confine=None if sandbox is None
                             else _confinement(sandbox, binary)) as child:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(stderr.collect, child.stderr)
            yield RgRun(child, sep, stderr)
            nursery.cancel_scope.cancel()


def _confinement(sandbox: SessionSandbox, binary: str) -> spawn.Confine:
    """ripgrep's: reading beneath the workspace only (``SessionSandbox.confine_search``).
    A program ``QUIESCE_RG`` names (a test's stand-in, often a script) may need anything
    to run, so it is confined as the session's tools are instead (its mode)."""
    if os.environ.get("QUIESCE_RG"):
        return sandbox.confine_tool
    return lambda: sandbox.confine_search(binary)


_PATTERN_ERROR = re.compile(r"^(?:rg: )?(?:regex parse error|error parsing glob|compiled "
                            r"regex exceeds size limit)", re.MULTILINE)
"""ripgrep's words for a pattern it refuses (a regular expression's syntax or size, a glob's
syntax), at the start of one of its lines: nothing else is the pattern's fault."""


def failure(code: int, stderr: str, pattern_error: str) -> ToolInputError:
    """``rg`` ended with ``code`` (2, or minus a signal) having found nothing: its pattern
    refused (``INVALID_PARAMS``, ``pattern_error`` naming it) only when ripgrep says so;
    else the failure itself (``TOOL_FAILED``: an I/O error, a file that vanished, a
    signal), in ripgrep's words."""
    detail = stderr.removeprefix("rg: ")[:1000].rstrip()
    if code == 2 and _PATTERN_ERROR.search(stderr):
        return ToolInputError(ErrorCode.INVALID_PARAMS, f"{pattern_error}: {detail}")
    how = "ripgrep failed"
    if code < 0:
        try:
            how += f": ended by {signal.Signals(-code).name}"
        except ValueError:
            how += f": ended by signal {-code}"
    return ToolInputError(ErrorCode.TOOL_FAILED, f"{how}: {detail}" if detail else how)
