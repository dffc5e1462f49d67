"""The pieces of ``scripts/bench``: statistics, the machine, a benchmark client of
``quiesce serve``, the scenarios and the report.

- ``stop.py``: stop latency per tool class, with floors (``floors.py``), in one daemon (a
  scenario takes a :class:`~benchlib.harness.Bench` and a repetition count and returns a
  :class:`~benchlib.stats.Series`); ``scenarios.py`` names every row and the ratios
  drawn between them.
- ``link.py``: tool-call round trip and throughput on the runtime's host link, start-up;
  beside them the raw pipe floor (``pipe_floor.py``, a script) and the MCP Python SDK
  (``mcp_peer.py``, a script run in its own asyncio process).
- ``growth.py``: stop latency as the calls in flight grow, memory per session and per
  call, tombstone memory. ``micro.py``: dispatch and codec cost per message.
- ``report.py`` (the stop tables), ``report_goals.py`` (the goals), ``report_perf.py``
  (the other rows), ``report_profile.py`` (where the time goes), ``report_figures.py``
  (how they read and write a figure), ``plot.py`` (``docs/benchmarks.png``).

``load.py`` and ``load_report.py`` are ``scripts/load``: the load test (many sessions
stopped at once, thousands of stops interleaved with executions) and its block of
``docs/benchmarks.md``. ``load.py`` runs it from its parts: ``load_records.py`` (its
configuration and figures), ``load_phase_a.py`` and ``load_plugins.py`` (the sessions
stopped at once), ``load_phase_b.py`` (the stops interleaved with executions),
``load_sampler.py`` (memory, descriptors, tombstones), ``load_leftovers.py`` (the processes
and logs stops leave) and ``load_judge.py`` (its checks).
"""
