"""The one percentile of the project (``quiesce ops stats`` and the benchmarks)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from runtime.daemon.percentiles import percentile


def test_small_samples() -> None:
    assert percentile([7.0], 90) == 7.0
    assert percentile([35.8, 36_911.2], 50) == pytest.approx(18_473.5)
    assert percentile([36_911.2, 35.8], 90) == pytest.approx(35.8 + 0.9 * 36_875.4)
    assert percentile([1.0, 2.0, 3.0], 50) == 2.0
    assert percentile([1.0, 2.0, 3.0], 0) == 1.0 and percentile([1.0, 2.0, 3.0], 100) == 3.0
    assert percentile([1.0, 2.0, 3.0, 4.0], 90) == pytest.approx(3.7)


def test_no_samples_or_a_bad_rank() -> None:
    with pytest.raises(ValueError):
        percentile([], 50)
    with pytest.raises(ValueError):
        percentile([1.0], 101)


@given(st.lists(st.floats(0, 1e6), min_size=1, max_size=12))
def test_ordered_between_min_and_max(values: list[float]) -> None:
    p50, p90 = percentile(values, 50), percentile(values, 90)
    assert min(values) <= p50 <= p90 <= max(values)
