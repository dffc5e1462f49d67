"""``quiesce demo --keep``, the README's first command: it runs, prints the stop's timeline
and the transcripts, keeps a workspace and balanced logs, and leaves no process behind."""

from __future__ import annotations

import pathlib
import re
import shutil
import sys

import trio

from protocol.messages.events import TurnEnd
from runtime.agent.sessionlog import read_log
from tests.conftest import Marked
from tests.kit.daemon import assert_balanced
from tests.support import marked_processes

REPO = pathlib.Path(__file__).resolve().parents[2]


def _shape(line: str) -> str:
    """A line with its figures masked (times and counts vary from run to run)."""
    return re.sub(r"\d+(\.\d+)?", "N", line).strip()


def _section(out: str, title: str) -> str:
    """The lines of ``out`` from ``title`` to the next blank line or ``[`` heading."""
    start = out.index(title) + len(title)
    end = re.search(r"^(\[|$)", out[start + 1:], re.MULTILINE)
    return out[start:start + 1 + end.start()] if end else out[start:]


async def test_the_demo_stops_both_turns_and_keeps_what_it_did(tmp_path: pathlib.Path,
                                                               marked: Marked) -> None:
    kept: pathlib.Path | None = None
    try:
        with trio.fail_after(60):
            done = await trio.run_process(
                [sys.executable, "-m", "runtime", "demo", "--keep"],
                env=marked.env(TMPDIR=str(tmp_path)), capture_stdout=True,
                capture_stderr=True, check=False)
        out, err = done.stdout.decode(), done.stderr.decode()
        found = re.search(r"kept under (\S+)", err)
        kept = pathlib.Path(found.group(1)) if found else None
        assert done.returncode == 0, err
        # Daemon, host and every tool process are gone once the demo has exited.
        assert marked_processes(marked.mark) == []

        # The timeline of each stop, then each transcript.
        for name in ("build", "search"):
            timeline = _section(out, f"[{name}] stop timeline")
            assert "agent.abort sent" in timeline
            assert "turn/end aborted on disk" in timeline
            assert "agent.abort answered: aborted" in timeline
            transcript = _section(out, f"[{name}] transcript")
            calls = re.findall(r"tool/call (\S+)", transcript)
            results = re.findall(r"tool/result (\S+):", transcript)
            assert calls and sorted(calls) == sorted(results), transcript
            assert "turn/end aborted (user), stopReason cancelled" in transcript
        assert "None" not in out  # a success reads "ok"
        for name in ("build", "search"):  # each timeline in time order
            times = [float(t) for t in re.findall(r"^ +([+-][\d.]+) ms ",
                                                  _section(out, f"[{name}] stop timeline"),
                                                  re.MULTILINE)]
            assert len(times) >= 4 and times == sorted(times), times
        # The README's sample is this output, but for the figures.
        readme = (REPO / "README.md").read_text()
        sample = readme[readme.index("[build] stop timeline"):]
        sample = sample[:sample.index("```")]
        real = {_shape(line) for line in out.splitlines()}
        assert [line for line in sample.splitlines() if _shape(line) not in real] == []
        assert "bash-1: ABORTED (process tree terminated)" in out
        assert "write-1: ABORTED_BEFORE_DISPATCH" in out
        assert "grep-1: ABORTED" in out
        tree = re.search(r"process tree: (\d+) processes before the stop, (\d+) alive", out)
        assert tree is not None and int(tree.group(1)) > 0 and tree.group(2) == "0", out

        # What --keep keeps: the workspace, and one whole, balanced log per session.
        assert kept is not None and kept.parent == tmp_path, err
        assert (kept / "workspace" / "README.md").is_file()
        logs = sorted((kept / "data" / "sessions").glob("*.jsonl"))
        assert len(logs) == 2
        for path in logs:
            events = read_log(path).events
            assert_balanced(events, str(path))
            end = events[-1]
            assert isinstance(end, TurnEnd) and end.end.kind == "aborted", end
    finally:
        if kept is not None:
            shutil.rmtree(kept, ignore_errors=True)
