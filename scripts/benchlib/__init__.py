"""The pieces of ``scripts/bench``: statistics, the machine, a benchmark client of
``quiesce serve``, the scenarios and the report.

Each scenario is a function that takes a :class:`~benchlib.harness.Bench` and a
repetition count and returns a :class:`~benchlib.stats.Series` of samples in
milliseconds; new scenario groups (issue 8: round trips, throughput, start-up,
growth) add a module beside ``stop.py`` and register in ``bench.py``.

``load.py`` and ``load_report.py`` are ``scripts/load``: the load test (many sessions
stopped at once, thousands of stops interleaved with executions) and its block of
``docs/benchmarks.md``.
"""
