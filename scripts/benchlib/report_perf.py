"""The sections of ``docs/benchmarks.md`` beside the stops: round trip, throughput and
start-up beside floor and peer; growth (the plot); memory; dispatch and codec costs; and
how they were measured (``PERF_METHOD``)."""

from __future__ import annotations

from benchlib.plot import ALL_PREFIX, growth_levels
from benchlib.report_figures import Figures, num
from benchlib.stats import Series, median_of

LINK_ROWS = ("floor-pipe-raw", "floor-pipe-epoll", "link-host-stats", "rtt-quiesce", "rtt-mcp",
             "throughput-host-stats", "throughput-quiesce", "throughput-runtool",
             "throughput-session-list", "throughput-mcp", "startup-quiesce", "startup-mcp",
             "startup-python", "startup-import-trio", "startup-import-libraries",
             "startup-import-runtime", "startup-import-host",
             "startup-import-jsonrpcserver", "startup-import-jsonrpcserver-whole")
MICRO_ROWS = ("micro-dispatch", "micro-handler", "micro-encode-request",
              "micro-decode-request", "micro-encode-result", "micro-decode-result",
              "micro-json-request", "micro-thread-hop", "micro-reader-hop")


def _table(series: dict[str, Series], keys: tuple[str, ...], title: str) -> list[str]:
    present = [series[k] for k in keys if k in series and series[k].samples]
    if not present:
        return []
    out = [f"## {title}", "", "| row | unit | n | median | p90 | p99 | min | max |",
           "|---|---|---:|---:|---:|---:|---:|---:|"]
    for s in present:
        out.append(f"| {s.title} | {s.unit} | {s.n} | {num(s.median, s.unit)} | "
                   f"{num(s.p(90), s.unit)} | {num(s.p(99), s.unit)} | "
                   f"{num(min(s.samples), s.unit)} | {num(max(s.samples), s.unit)} |")
    return [*out, ""]


def link_sections(series: dict[str, Series]) -> list[str]:
    f = Figures(series)
    out = _table(series, LINK_ROWS, "Round trip, throughput, start-up (beside floor and peer)")
    if not out:
        return out
    ratios = [
        ("quiesce round trip / raw pipe floor", f.ratio("rtt-quiesce", "floor-pipe-raw")),
        ("quiesce `host.stats` round trip / raw pipe floor",
         f.ratio("link-host-stats", "floor-pipe-raw")),
        ("MCP SDK round trip / quiesce round trip", f.ratio("rtt-mcp", "rtt-quiesce")),
        ("quiesce `Read` round trip / `host.stats` round trip",
         f.ratio("rtt-quiesce", "link-host-stats")),
        ("quiesce throughput / MCP SDK throughput",
         f.ratio("throughput-quiesce", "throughput-mcp")),
        ("`Read` throughput / `host.stats` throughput (same link)",
         f.ratio("throughput-quiesce", "throughput-host-stats")),
        ("quiesce start-up / MCP SDK start-up", f.ratio("startup-quiesce", "startup-mcp")),
    ]
    out += ["| ratio (of medians) | value |", "|---|---:|"]
    out += [f"| {what} | {num(v)}x |" for what, v in ratios]
    return [*out, ""]


def growth_section(series: dict[str, Series], plot_name: str | None) -> list[str]:
    levels = growth_levels(series)
    out: list[str] = []
    if levels:
        base = levels[0][1].median
        out += ["## Growth: one stop as the calls in flight grow", "",
                "The goal is read as: stopping one session (`agent.abort` sent until "
                "answered) while that many calls are in flight across sessions, each session "
                "holding one `Write` in a permission prompt, must not get slower with the "
                "work in flight. Stopping all of those sessions at once is the second, "
                "diagnostic table.", ""]
        if plot_name:
            out += [f"![stop latency against calls in flight]({plot_name})", ""]
        out += ["| calls in flight | n | median | p90 | min | max | median / with 1 |",
                "|---:|---:|---:|---:|---:|---:|---:|"]
        for level, s in levels:
            out.append(f"| {level:,} | {s.n} | {num(s.median)} | {num(s.p(90))} | "
                       f"{num(min(s.samples))} | {num(max(s.samples))} | "
                       f"{num(s.median / base if base else None)}x |")
        out.append("")
        together = growth_levels(series, ALL_PREFIX)
        if together:
            out += ["The same sessions, all stopped at once (one `agent.abort` each, sent "
                    "together; a diagnostic, no goal):", "",
                    "| sessions stopped | median round trip | p90 | max | until the last "
                    "answer | per session stopped |", "|---:|---:|---:|---:|---:|---:|"]
            for level, s in together:
                last = s.extra["lastMs"][0]
                out.append(f"| {level:,} | {num(s.median)} | {num(s.p(90))} | "
                           f"{num(max(s.samples))} | {num(last)} | {num(last / level)} |")
            out += ["", "Stopped together, the stops share one daemon and one host: each "
                    "turn's stop walk, its `tools.abort`, its withdrawn prompt and its fsynced "
                    "`turn/end` are work done once per session, so the time until the last "
                    "answer grows with the number of sessions stopped."]
            out.append("")
    memory, tomb = series.get("memory"), series.get("tombstones")
    if memory is not None:
        out += ["## Memory", ""]
        idle = median_of(memory.extra.get("idleSessionKiB", []))
        call = median_of(memory.extra.get("inFlightCallKiB", []))
        out += [f"- per idle session (daemon + host RSS growth over the sessions the largest "
                f"levels added, median of levels): {num(idle)} KiB",
                f"- per in-flight call (a permission-pending Write: turn, registry, host call, "
                f"relayed prompt): {num(call)} KiB"]
        out += [f"- {n}" for n in memory.notes]
        out.append("")
    if tomb is not None and tomb.samples:
        out += [f"{tomb.title}, `tracemalloc` in the bench process, after early aborts "
                "with distinct keys:", "", "| early aborts | held | KiB |", "|---:|---:|---:|"]
        for kib, count, held in zip(tomb.samples, tomb.extra["count"], tomb.extra["held"],
                                    strict=True):
            out.append(f"| {count:,.0f} | {held:,.0f} | {num(kib)} |")
        out += ["", *[f"- {n}" for n in tomb.notes], ""]
    return out


def micro_section(series: dict[str, Series]) -> list[str]:
    out = _table(series, MICRO_ROWS, "Dispatch and codec, per message (µs, in process)")
    layer = series.get("micro-dispatch")
    if out and layer is not None and layer.extra.get("netUs"):
        out += [f"The dispatch layer itself (dispatch minus the bare handler): median "
                f"{num(median_of(layer.extra['netUs']))} µs per request.", ""]
    return out


PERF_METHOD = """\
**Round trip and throughput** (`benchlib/link.py`): this process plays the runtime with the
runtime's own `HostLink`, which spawns `python -m host` with its default configuration, as
`quiesce serve` does; sessions use permission mode `auto`; each call is a `tools.execute` of
`Read` on a 1-byte file, the trivial tool both sides have (the host's `Read` is the
product's, unchanged: confined to the workspace; a small file on the root's local file
system, as here, is read on the host's event loop, anything else on an abandonable reader
thread). The
`host.stats` round trip and throughput beside it are the same link with no tool. Through the
client link (`client_link`), a whole `quiesce serve` with 4 sessions answers `debug.runTool`
of the same `Read` and `session.list`, each 64 in flight, with the daemon's and host's CPU
per call. Throughput keeps 64 calls
in flight over 4 sessions (the host admits 32 read-only calls at once and 32 per session,
its defaults; a `Read` answered at once in the host's reader holds no slot, since nothing
else runs meanwhile); each round is 5,000 calls, the first
round a warm-up. **The floor** (`benchlib/pipe_floor.py`) is a 200-byte raw `os.write` /
`os.read` echo between two Python processes over pipes. **The peer** (`benchlib/mcp_peer.py`)
is the official MCP Python SDK 2 (its `MCPServer`, FastMCP's successor, over stdio, and
`stdio_client` + `ClientSession`) in its own asyncio process, with a tool `read` of the same
file; its throughput keeps 64 calls in flight in one session (rounds of a quarter as many
calls). **Start-up** spawns `quiesce serve` (which spawns its host and shakes hands with it
before it answers) and times it until `initialize` is answered, with the host's pid and tools
in the answer; the peer's spawns the SDK server and completes its `initialize` handshake.
**Growth** (`benchlib/growth.py`) runs in a daemon of its own: see its table. **Dispatch and
codec** (`benchlib/micro.py`) are in process, each sample the mean of 2,000 operations."""
