#!/usr/bin/env python3
"""Load test of quiesce through one real `quiesce serve`; writes its block of docs/benchmarks.md.

Phase A: N sessions (default 100), each running a step with a call of every host class
(a Bash process tree, a stuck Grep, a Write pending permission, a Read), all stopped at
once. Phase B: 10,000 stops interleaved with executions (prompt, random delay, abort) in
parallel sessions, with the daemon's and host's memory and the host's tombstones sampled.

Every stop must settle, every transcript balance, no marked process survive, and memory
and tombstones stay bounded; exit status 1 otherwise. The figures go between the
`<!-- load:begin -->` and `<!-- load:end -->` markers of docs/benchmarks.md (the rest of
the file, the bench's figures, is left alone).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import pathlib
import shlex
import shutil
import sys
import tempfile
import time
from typing import Any

import trio
from benchlib.load import run_load
from benchlib.load_records import FULL, ROLES, SMOKE, LoadConfig, LoadResult, summarize
from benchlib.load_report import markdown, summary
from benchlib.machine import Machine
from benchlib.report import write_load_block

ROOT = pathlib.Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "benchmarks.md"


def parse_args(argv: list[str] | None) -> tuple[argparse.Namespace, LoadConfig]:
    parser = argparse.ArgumentParser(prog="scripts/load", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--smoke", action="store_true",
                        help=f"CI smoke: {SMOKE.sessions} sessions, {SMOKE.stops} stops; writes "
                             "docs/benchmarks.md only if --out names it")
    parser.add_argument("--sessions", type=int, help=f"phase A sessions (full {FULL.sessions})")
    parser.add_argument("--stops", type=int, help=f"phase B stops (full {FULL.stops})")
    parser.add_argument("--b-sessions", type=int,
                        help=f"phase B sessions the stops are spread over (full "
                             f"{FULL.b_sessions})")
    parser.add_argument("--workers", type=int,
                        help=f"phase B prompt + abort loops in parallel (full {FULL.workers})")
    parser.add_argument("--sample-every", type=int,
                        help=f"phase B stops between memory samples (full {FULL.sample_every})")
    parser.add_argument("--max-delay-ms", type=float,
                        help=f"phase B: longest delay prompt -> abort (default "
                             f"{FULL.max_delay_ms:g})")
    parser.add_argument("--seed", type=int, help=f"random seed (default {FULL.seed})")
    parser.add_argument("--roles", type=lambda v: tuple(v.split(",")),
                        help="phase A roles, comma-separated (default "
                             f"{','.join(FULL.roles)}; a diagnostic may leave one out)")
    parser.add_argument("--control", action=argparse.BooleanOptionalAction, default=None,
                        help="also run phase A without its Grep sessions, right after it in "
                             "the same daemon (default: on in full mode, off with --smoke)")
    parser.add_argument("--rss-bound-mb", type=float,
                        help=f"allowed RSS growth over phase B (default {FULL.rss_bound_mb:g})")
    parser.add_argument("--out", type=pathlib.Path, default=None,
                        help="the file whose load block is written (default "
                             "docs/benchmarks.md; with --smoke or a changed size, a "
                             "temporary file)")
    parser.add_argument("--json", type=pathlib.Path, default=None,
                        help="also write every figure and sample as JSON here")
    parser.add_argument("--keep", action="store_true",
                        help="keep the temporary directory (workspaces, session logs, the "
                             "daemon's log) and print its path")
    args = parser.parse_args(argv)
    base = SMOKE if args.smoke else FULL
    overrides = {k: v for k, v in {
        "sessions": args.sessions, "stops": args.stops, "b_sessions": args.b_sessions,
        "workers": args.workers,
        "sample_every": args.sample_every, "max_delay_ms": args.max_delay_ms,
        "seed": args.seed, "rss_bound_mb": args.rss_bound_mb,
        "roles": args.roles, "control": args.control}.items() if v is not None}
    cfg = dataclasses.replace(base, **overrides)
    if min(cfg.sessions, cfg.stops, cfg.b_sessions, cfg.workers, cfg.sample_every) < 1:
        parser.error("--sessions, --stops, --b-sessions, --workers and --sample-every must "
                     "be at least 1")
    if not cfg.roles or not set(cfg.roles) <= set(ROLES):
        parser.error(f"--roles: choose among {', '.join(ROLES)}")
    if cfg.max_delay_ms < 0:
        parser.error("--max-delay-ms must not be negative")
    args.partial = args.smoke or bool(
        {k for k in overrides if k in ("sessions", "stops", "b_sessions", "workers", "roles")})
    return args, cfg


def figures(result: LoadResult) -> dict[str, Any]:
    a, b = result.phase_a, result.phase_b
    named = {
        "phaseA.abortRoundTripMs": a.rtt_ms, "phaseA.settledMs": a.settled_ms,
        "phaseA.answeredAfterReleaseMs": a.answered_at_ms,
        "phaseB.abortingRoundTripMs": b.rtt_aborted_ms, "phaseB.settledMs": b.settled_ms,
        "phaseB.idleRoundTripMs": b.rtt_idle_ms,
    }
    return {k: dataclasses.asdict(summarize(v)) for k, v in named.items()}


def main(argv: list[str] | None = None) -> int:
    args, cfg = parse_args(argv)
    command = "./scripts/load" + "".join(f" {shlex.quote(a)}"
                                         for a in (sys.argv[1:] if argv is None else argv))
    out: pathlib.Path = args.out or (
        pathlib.Path(tempfile.gettempdir()) / "quiesce-load-partial.md" if args.partial
        else DOC)
    machine = Machine.describe()
    print(f"quiesce load ({cfg.mode}): phase A {cfg.sessions} sessions, phase B {cfg.stops} "
          f"stops over {cfg.b_sessions} sessions, {cfg.workers} at a time", file=sys.stderr,
          flush=True)
    started = time.monotonic()
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="quiesce-load-"))
    try:
        result = trio.run(run_load, cfg, tmp)
    finally:
        if args.keep:
            print(f"kept {tmp} (daemon.log, data/sessions/)", file=sys.stderr)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    duration = time.monotonic() - started
    body = markdown(result, machine, command, duration, Machine.load_now())
    out.parent.mkdir(parents=True, exist_ok=True)
    write_load_block(out, body)
    if args.json is not None:
        args.json.write_text(json.dumps({
            "command": command, "date": machine.date, "durationS": duration,
            "figures": figures(result), "result": result.to_json()}, indent=1))
    print(summary(result))
    print(f"wrote the load block of {out}")
    if not result.passed:
        print("FAIL: see the checks and anomalies in the report", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
