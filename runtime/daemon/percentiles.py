"""Percentiles, computed one way for the whole project (``quiesce ops stats`` and the
benchmarks under ``scripts/``): linear interpolation between closest ranks, so the
median is the 50th percentile and a p90 is never below it."""

from __future__ import annotations

import math
from collections.abc import Iterable


def percentile(values: Iterable[float], q: float) -> float:
    """The ``q``-th percentile (0..100) of ``values``; ``ValueError`` if there are none."""
    if not 0 <= q <= 100:
        raise ValueError(f"a percentile is between 0 and 100, not {q}")
    ordered = sorted(values)
    if not ordered:
        raise ValueError("no samples")
    rank = (len(ordered) - 1) * q / 100
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)
