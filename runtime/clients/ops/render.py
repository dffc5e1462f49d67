"""Human-readable output of ``quiesce ops``: aligned plain-text tables and lines.

``--json`` output is the wire types with every field, defaults included
(:func:`complete`): a script reads ``stuck: false`` and ``hostRestarts: 0``
rather than a missing key.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

import msgspec

from protocol.messages.client import AgentAbortResult
from protocol.messages.events import (
    AnnouncedEvent,
)
from protocol.messages.ops import (
    OpsCall,
    OpsEventParams,
    OpsForceResult,
    OpsRestartHostResult,
    OpsSession,
    OpsStatsResult,
    OpsUnreadableLog,
)
from protocol.sandbox import SandboxReport
from runtime.clients.eventrender import one_line, render, usage_text
from runtime.clients.ops.client import RunningDaemon

SNIPPET = 60


def complete(value: Any) -> Any:
    """``value`` as JSON-ready builtins with every field of every struct, defaults too
    (the wire omits fields at their defaults; ``--json`` output never does)."""
    if isinstance(value, msgspec.Struct):
        config = value.__struct_config__
        out: dict[str, Any] = {}
        if config.tag_field is not None:
            out[config.tag_field] = config.tag
        for info in msgspec.structs.fields(value):
            out[info.encode_name] = complete(getattr(value, info.name))
        return out
    if isinstance(value, dict):
        return {key: complete(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [complete(item) for item in value]
    return msgspec.to_builtins(value)


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 1:
        return f"{seconds * 1000:.0f}ms"
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [len(h) for h in headers]
    for row in rows:
        widths = [max(w, len(cell)) for w, cell in zip(widths, row, strict=True)]
    lines = [headers, *rows]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True))
                     .rstrip() for line in lines)


def _snippet(text: str) -> str:
    return one_line(text, SNIPPET)


def daemon_identity(daemon: RunningDaemon, client: Mapping[str, Any]) -> str:
    """One line saying which daemon this is: what it runs and for whom, since when, on
    which data directory (``quiesce ops ls`` prints one per daemon above its table)."""
    info = daemon.info
    started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(info.started_at))
    kind = client.get("command") or "daemon"
    parent = client.get("parent")
    who = (f", started by pid {client.get('parentPid')} ({parent})" if parent
           else "")
    data = info.data_dir or "(data directory not recorded)"
    return (f"daemon {info.pid}: quiesce {kind}{who}, since {started} "
            f"(up {duration(time.time() - info.started_at)}), data {data}")


def sessions_table(listing: Sequence[tuple[int, Sequence[OpsSession]]]) -> str:
    """One row per session of every daemon (a daemon without sessions gets one row)."""
    rows = []
    for pid, sessions in listing:
        if not sessions:
            rows.append([str(pid), "-", "(no sessions)", "", "", "", "", "", ""])
        for s in sessions:
            rows.append([str(pid), s.session_id, s.phase, s.turn_id or "-",
                         duration(s.turn_age_s), str(len(s.calls)), str(s.inbox),
                         duration(s.stop_waiting_s), "STUCK" if s.stuck else ""])
    return table(["PID", "SESSION", "PHASE", "TURN", "AGE", "CALLS", "INBOX", "STOP WAIT",
                  ""], rows)


def unreadable_logs(listing: Sequence[tuple[int, Sequence[OpsUnreadableLog]]]) -> str:
    """Session logs a daemon cannot read (empty if none): listed so they can be repaired."""
    lines = []
    for pid, logs in listing:
        for entry in logs:
            lines.append(f"UNREADABLE  daemon {pid}  {entry.session_id}  {entry.error}")
    if lines:
        lines.append("(session.load fails on these until they are repaired: see "
                     "docs/operations.md, \"An unreadable session log\")")
    return "\n".join(lines)


def session_detail(pid: int, s: OpsSession) -> str:
    lines = [
        f"session    {s.session_id}  (daemon {pid})",
        f"workspace  {s.workspace}",
        f"phase      {s.phase}",
        f"turn       {s.turn_id or '-'}  age {duration(s.turn_age_s)}",
        f"inbox      {s.inbox} queued prompt(s)",
        f"tokens     {usage_text(s.usage) if s.usage is not None else 'none yet'}",
    ]
    if s.stop_waiting_s is not None:
        flag = "  STUCK: the stop has waited past the daemon's threshold" if s.stuck else ""
        lines.append(f"stop       waiting {duration(s.stop_waiting_s)}{flag}")
    if s.calls:
        lines += ["", table(["CALL", "TOOL", "CLASS", "STATE", "AGE"],
                            [[c.call_id, c.tool, c.tool_class,
                              f"hook {c.hook}" if c.hook else c.state, duration(c.age_s)]
                             for c in s.calls])]
    else:
        lines.append("calls      none in flight")
    return "\n".join(lines)


def daemon_detail(daemon: RunningDaemon, sessions: Sequence[OpsSession],
                  unreadable: Sequence[OpsUnreadableLog] = ()) -> str:
    info = daemon.info
    started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(info.started_at))
    lines = [f"daemon     {info.pid}", f"socket     {info.socket}",
             f"started    {started}  (up {duration(time.time() - info.started_at)})"]
    if info.data_dir:
        lines.append(f"data dir   {info.data_dir}")
    lines += ["", sessions_table([(info.pid, sessions)])]
    if unreadable:
        lines += ["", unreadable_logs([(info.pid, unreadable)])]
    for s in sessions:
        if s.calls or s.stop_waiting_s is not None:
            lines += ["", session_detail(info.pid, s)]
    return "\n".join(lines)


def stats_text(stats: OpsStatsResult) -> str:
    def ms(value: float | None) -> str:
        return "-" if value is None else f"{value:.1f} ms"

    rows = [
        ("daemon", str(stats.pid)), ("uptime", duration(stats.uptime_s)),
        ("sessions", str(stats.sessions)),
        ("turns", f"{stats.turns} finished, {stats.turns_running} running"),
        ("stops", f"{stats.stops} settled, {stats.stops_settling} settling "
                  f"({stats.stops_stuck} stuck)"),
        ("stop latency", f"median {ms(stats.stop_latency_ms_median)}, "
                         f"p90 {ms(stats.stop_latency_ms_p90)}, "
                         f"max {ms(stats.stop_latency_ms_max)}"),
        ("calls in flight", str(stats.calls_in_flight)),
        ("host", f"pid {stats.host_pid if stats.host_pid is not None else '-'}, "
                 f"{stats.host_restarts} restart(s), {stats.host_crashes} crash(es)"),
        ("tombstones", str(stats.tombstones)),
        ("processes", {"cgroup": "a cgroup v2 per tree",
                       "process-tree": "attributed by ancestry and session (no cgroups)",
                       None: "- (no live host)"}.get(stats.process_isolation,
                                                   str(stats.process_isolation))),
        ("sandbox", sandbox_text(stats.sandbox)),
        *((f"limit: {name}", how) for name, how in sorted(stats.call_limits.items())),
    ]
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k.ljust(width)}  {v}" for k, v in rows)


def sandbox_text(report: SandboxReport | None) -> str:
    """The host's sandbox in one line: mechanism, ABI, mode, and what is not enforced."""
    if report is None:
        return "- (no live host)"
    if report.unavailable is not None:
        return f"unavailable ({report.unavailable})"
    degraded = "; ".join(report.degraded) or "none"
    return (f"{report.mechanism} ABI {report.abi}, mode {report.mode}, network "
            f"{report.network}; not enforced: {degraded}")


def abort_text(session_id: str, r: AgentAbortResult) -> str:
    if r.outcome == "idle":
        return f"{session_id}: idle, nothing to stop"
    cause = r.cause.kind if r.cause is not None else "?"
    ended = "aborted" if r.outcome == "aborted" else f"ended with an error ({r.error})"
    lines = [f"{session_id}: turn {r.turn_id or '?'} {ended} (cause {cause}), settled in "
             f"{r.settled_ms:.1f} ms"]
    lines += [f"  {c.call_id}: {c.code}" for c in r.tool_calls]
    return "\n".join(lines)


WAITED_ON_STATES = ("aborting", "draining")
WAITED_ON_CLASSES = ("mutating", "plugin")


def waited_on(session: OpsSession) -> list[OpsCall]:
    """The calls a session's stop waits on: stopped mutating or plugin calls (the stop
    contract awaits those without a deadline; they are what ``ops force`` is for)."""
    if session.stop_waiting_s is None:
        return []
    return [c for c in session.calls
            if c.state in WAITED_ON_STATES and c.tool_class in WAITED_ON_CLASSES]


def nothing_to_force(session: OpsSession) -> str:
    if session.stop_waiting_s is None:
        return f"{session.session_id}: nothing to force: no stop is waiting"
    return (f"{session.session_id}: nothing to force: its stop waits on no mutating or "
            "plugin call (quiesce ops show names what it waits on)")


def forcing_text(session: OpsSession, call: OpsCall) -> str:
    waiting = session.stop_waiting_s or 0.0
    return (f"{session.session_id}: the stop has waited {duration(waiting)} on {call.call_id} "
            f"({call.tool}, {call.tool_class}, {call.state} {duration(call.age_s)}): "
            "forcing it")


def force_text(session_id: str, call_id: str, r: OpsForceResult) -> str:
    what = "forced: recorded ABORTED, forced" if r.forced else "not forced"
    return f"{session_id} {call_id}: {what}" + (f" ({r.detail})" if r.detail else "")


def restart_text(pid: int, r: OpsRestartHostResult) -> str:
    def show(p: int | None) -> str:
        return str(p) if p is not None else "-"

    return f"daemon {pid}: host restarted, pid {show(r.old_pid)} -> {show(r.new_pid)}"


def event_line(pid: int, params: OpsEventParams, received: float) -> str:
    millis = int(received * 1000) % 1000
    stamp = f"{time.strftime('%H:%M:%S', time.localtime(received))}.{millis:03d}"
    event = params.event
    record = render(event)
    head = f"{stamp}  {pid}  {params.session_id}  {event.turn_id or '-'}  {record.kind}"
    text = f"{head}  {record.line}".rstrip()
    if params.dropped:
        text = f"{stamp}  ({params.dropped} event(s) dropped: this tail read too slowly)\n{text}"
    return text


def event_summary(event: AnnouncedEvent) -> str:
    return render(event).line
