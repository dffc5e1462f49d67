"""Samples and their summary: median, percentiles, min, max (all in milliseconds).

Percentiles are ``runtime.daemon.percentiles.percentile``, the daemon's own
(``quiesce ops stats``)."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Any

from runtime.daemon.percentiles import percentile

P99_MIN_SAMPLES = 50
"""Below this many samples a p99 is just the maximum; it is not quoted."""
P90_MIN_SAMPLES = 10


@dataclass(frozen=True)
class Goal:
    """An upper bound on a scenario's samples, in milliseconds, and where it comes from."""

    limit_ms: float
    text: str
    quantile: float = 50.0
    """Which percentile of the samples must be within the limit (the median by default)."""


@dataclass
class Series:
    """The samples of one scenario, plus what was observed along the way."""

    key: str
    title: str
    samples: list[float] = field(default_factory=list)
    goal: Goal | None = None
    extra: dict[str, list[float]] = field(default_factory=dict)
    """Other per-repetition figures (e.g. the daemon's ``settledMs``), in ms."""
    anomalies: list[str] = field(default_factory=list)
    """Anything that makes a repetition not measure what it claims (wrong code, survivors)."""
    notes: list[str] = field(default_factory=list)
    unit: str = "ms"
    """What a sample is: milliseconds unless said otherwise (e.g. ``calls/s``, ``µs``, ``KiB``)."""

    def add_extra(self, name: str, value: float) -> None:
        self.extra.setdefault(name, []).append(value)

    @property
    def n(self) -> int:
        return len(self.samples)

    @property
    def median(self) -> float:
        return statistics.median(self.samples) if self.samples else math.nan

    def p(self, q: float) -> float | None:
        need = P99_MIN_SAMPLES if q > 90 else P90_MIN_SAMPLES
        if len(self.samples) < need:
            return None
        return percentile(self.samples, q)

    @property
    def within_goal(self) -> int:
        if self.goal is None:
            return 0
        return sum(1 for s in self.samples if s <= self.goal.limit_ms)

    @property
    def goal_met(self) -> bool | None:
        """Whether the goal's percentile (the median unless it says otherwise) meets it
        (``None``: no goal, or no samples)."""
        if self.goal is None or not self.samples:
            return None
        return percentile(self.samples, self.goal.quantile) <= self.goal.limit_ms

    def to_json(self) -> dict[str, Any]:
        return {
            "key": self.key, "title": self.title, "samplesMs": self.samples,
            "goalMs": self.goal.limit_ms if self.goal else None,
            "extraMs": self.extra, "anomalies": self.anomalies, "notes": self.notes,
            "unit": self.unit,
        }


def median_of(values: list[float]) -> float:
    return statistics.median(values) if values else math.nan
