"""What a compaction costs the daemon beside the model's time.

Each repetition runs two one-chunk turns, then ``session.compact``; the scripted model
answers the summary at once (no sleep), so the round trip is the daemon's own work: the
maintenance phase entered and left, the turns picked, the transcript built, the history
measured before and after, the records written (``maintenance/start``, ``model/usage``,
``history/compacted``, and ``maintenance/end`` fsynced), the answer. Every compaction
replaces one turn of about 2 KB (prompt and reply), the older of the two since the last.
"""

from __future__ import annotations

from typing import Any

from benchlib.harness import Bench, now_ms
from benchlib.stats import Series
from protocol.messages.client import SessionCompactParams, SessionCompactResult

TURN_TEXT = "x" * 1000  # each turn's prompt and reply


async def floor_compaction(bench: Bench, n: int, warmup: int) -> Series:
    series = Series("floor-compaction", "compaction: `session.compact` of one ~2 KB turn, the "
                    "model's summary instant (the daemon's cost beside the model's time)")
    workspace = bench.workdir / "ws-compaction"
    workspace.mkdir()
    script: list[list[dict[str, Any]]] = []
    for i in range(warmup + n):
        script += [[{"text": TURN_TEXT}], [{"text": TURN_TEXT}], [{"text": f"summary {i}"}]]
    session = await bench.new_session(workspace, script)
    for i in range(warmup + n):
        for turn in ("a", "b"):
            await bench.prompt(session, f"{turn}{i} {TURN_TEXT}")
        start = now_ms()
        result: SessionCompactResult = await bench.request(
            "session.compact", SessionCompactParams(session.session_id))
        rtt = now_ms() - start
        if result.outcome != "compacted":
            series.anomalies.append(f"rep {i}: {result.outcome} {result.error or ''}")
        if i >= warmup:
            series.samples.append(rtt)
    return series
