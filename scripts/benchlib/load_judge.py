"""The load test's judge: the checks of a run, from the figures its phases recorded."""

from __future__ import annotations

from benchlib.load_leftovers import LEFTOVER_WAIT
from benchlib.load_phase_a import ABD, ABORTED, PROCESS_SLOTS
from benchlib.load_plugins import PLUGIN_SLOTS
from benchlib.load_records import Check, LoadResult, MemSample
from host.manager import HostConfig

TOMBSTONE_CAPACITY = HostConfig().tombstone_capacity


def _growth(samples: list[MemSample], attr: str) -> float | None:
    values = [getattr(s, attr) for s in samples if getattr(s, attr) is not None]
    if len(values) < 2:
        return None
    return float(values[-1] - values[0])


def judge(result: LoadResult) -> None:
    """The checks of the run, from its figures."""
    cfg, a, b = result.config, result.phase_a, result.phase_b
    checks = result.checks
    checks.append(Check("A: every call in flight before the stop", a.ready,
                        f"{a.trees_running} trees running ({PROCESS_SLOTS} process slots), "
                        f"{a.permission_requests} permission prompts, in {a.ready_s:.1f} s"))
    aborted = a.outcomes.get("aborted", 0)
    checks.append(Check("A: every `agent.abort` answered `aborted`",
                        aborted == a.sessions and not a.unanswered_aborts,
                        f"{aborted}/{a.sessions} aborted, {a.unanswered_aborts} unanswered "
                        f"within {cfg.abort_timeout:g} s"))
    code_anomalies = [x for x in a.anomalies if "codes" in x or "outcome" in x]
    checks.append(Check("A: every call ended with the code its state calls for",
                        not code_anomalies, f"{len(code_anomalies)} sessions otherwise"))
    cancelled = a.prompt_reasons.get("cancelled", 0)
    checks.append(Check("A: every `agent.prompt` answered `cancelled`",
                        cancelled == a.sessions and not a.unanswered_prompts,
                        f"{cancelled}/{a.sessions}, {a.unanswered_prompts} unanswered"))
    checks.append(Check("A: every permission prompt withdrawn, no Write ran",
                        a.withdrawn == a.permission_requests == a.roles.get("permission", 0)
                        and a.writes_ran == 0,
                        f"{a.withdrawn}/{a.permission_requests} withdrawn, "
                        f"{a.writes_ran} Writes ran"))
    if a.roles.get("plugin", 0):
        checks.append(Check("A: every plugin call cancelled at its server; every server gone "
                            "with its session",
                            a.plugin_cancelled == a.plugin_calls
                            >= min(a.roles["plugin"], PLUGIN_SLOTS)
                            and not a.plugin_servers_left,
                            f"{a.plugin_cancelled}/{a.plugin_calls} cancelled, "
                            f"{len(a.plugin_servers_left)} servers left"))
    checks.append(Check("A: no marked process right after the answers (a raced search gone "
                        f"within {LEFTOVER_WAIT:g} s)", a.leftovers.clean,
                        f"{a.leftovers.detail()} ({a.tree_members} seen before the stop)"))
    checks.append(Check("A: every transcript balances", not a.unbalanced,
                        f"{len(a.unbalanced)} of {a.sessions} logs do not"))
    c = result.phase_a_control
    if c is not None:
        ok = (c.ready and c.outcomes.get("aborted", 0) == c.sessions
              and c.prompt_reasons.get("cancelled", 0) == c.sessions
              and c.withdrawn == c.permission_requests and not c.writes_ran
              and c.plugin_cancelled == c.plugin_calls and not c.plugin_servers_left
              and not (c.anomalies or c.unbalanced) and c.leftovers.clean)
        checks.append(Check("A without Grep: every call in flight, every stop `aborted` with "
                            "its codes, withdrawn, balanced, no survivor", ok,
                            f"{c.outcomes.get('aborted', 0)}/{c.sessions} aborted, "
                            f"{len(c.anomalies) + len(c.unbalanced)} anomalies; leftovers: "
                            f"{c.leftovers.detail()}"))
    checks.append(Check(f"B: every `agent.abort` answered within {cfg.abort_timeout:g} s",
                        not b.unanswered_aborts and b.stops == cfg.stops,
                        f"{b.stops:,}/{cfg.stops:,} answered, {len(b.unanswered_aborts)} not"))
    checks.append(Check("B: every `agent.prompt` answered, as its abort says",
                        not b.unanswered_prompts and not b.inconsistent,
                        f"{len(b.unanswered_prompts)} unanswered, {len(b.inconsistent)} "
                        "inconsistent with their abort"))
    checks.append(Check("B: every transcript balances and agrees with the answers",
                        not b.unbalanced, f"{len(b.unbalanced)} of {b.sessions} logs do not"))
    write_codes = b.codes.get("Write", {})
    checks.append(Check("B: every file a Write targeted holds one Write's content, whole",
                        not b.torn_writes and b.write_targets > 0,
                        f"{len(b.torn_writes)} of {b.write_targets} files otherwise; Writes "
                        f"stopped: {write_codes.get(ABORTED, 0)} {ABORTED} (its body had started), "
                        f"{write_codes.get(ABD, 0)} {ABD}"))
    checks.append(Check("B: no marked process after the last stop (a raced search gone "
                        f"within {LEFTOVER_WAIT:g} s)", b.leftovers.clean, b.leftovers.detail()))
    d_growth, h_growth = _growth(b.samples, "daemon_rss_mb"), _growth(b.samples, "host_rss_mb")
    if d_growth is None or h_growth is None:
        checks.append(Check(f"B: RSS growth ≤ {cfg.rss_bound_mb:g} MB", False,
                            "fewer than two samples"))
    else:
        checks.append(Check(f"B: RSS growth ≤ {cfg.rss_bound_mb:g} MB (daemon and host each)",
                            d_growth <= cfg.rss_bound_mb and h_growth <= cfg.rss_bound_mb,
                            f"daemon {d_growth:+.1f} MB, host {h_growth:+.1f} MB"))
    tombs = [s.tombstones for s in b.samples if s.tombstones is not None]
    if tombs:
        checks.append(Check(f"B: host tombstones bounded (≤ capacity {TOMBSTONE_CAPACITY:,})",
                            max(tombs) <= TOMBSTONE_CAPACITY,
                            f"max {max(tombs)}, last {tombs[-1]}; "
                            f"{b.host_states.get('tombstoned', 0)} created (tool/abort)"))
    else:
        checks.append(Check("B: host tombstones bounded", None, result.ops_note))
    hosts = {s.host_pid for s in b.samples}
    crashes = (b.ops_stats or {}).get("host_crashes", 0)
    checks.append(Check("B: one host throughout (no crash, no restart)",
                        len(hosts) == 1 and None not in hosts and not crashes,
                        f"host pids sampled {sorted(h for h in hosts if h is not None)}"
                        + (f", {crashes} crashes (ops)" if b.ops_stats else "")))
    checks.append(Check("no marked process once the daemon exited", not result.leftovers,
                        f"{len(result.leftovers)}"))
