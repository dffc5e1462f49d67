"""A run's figures as the report reads them (medians, ratios of medians: ``Figures``) and
writes them (``num``: the digits a value deserves, a dash for none)."""

from __future__ import annotations

import math

from benchlib.stats import Series


def num(value: float | None, unit: str = "ms") -> str:
    """``value`` written for a table: the digits its size deserves, a dash for none."""
    if value is None or math.isnan(value):
        return "—"
    if unit == "calls/s":
        return f"{value:,.0f}"
    if abs(value) < 1:
        return f"{value:.3f}"
    if abs(value) < 10:
        return f"{value:.2f}"
    if abs(value) < 1000:
        return f"{value:.1f}"
    return f"{value:,.0f}"


class Figures:
    """The run's series by key, read as medians and ratios of medians."""

    def __init__(self, series: dict[str, Series]) -> None:
        self.series = series

    def med(self, key: str) -> float | None:
        s = self.series.get(key)
        return s.median if s is not None and s.samples else None

    def ratio(self, top: str, bottom: str) -> float | None:
        a, b = self.med(top), self.med(bottom)
        return None if a is None or b is None or b == 0 else a / b
