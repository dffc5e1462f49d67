"""The plot of ``docs/benchmarks.png``: stop latency against the calls in flight."""

from __future__ import annotations

import pathlib

from benchlib.stats import Series
from runtime.daemon.percentiles import percentile

LEVEL_PREFIX = "growth-"
ALL_PREFIX = "growth-all-"


def growth_levels(series: dict[str, Series], prefix: str = LEVEL_PREFIX
                  ) -> list[tuple[int, Series]]:
    levels = [(int(k[len(prefix):]), s) for k, s in series.items()
              if k.startswith(prefix) and k[len(prefix):].isdigit() and s.samples]
    return sorted(levels, key=lambda pair: pair[0])


def plot_growth(series: dict[str, Series], path: pathlib.Path, caption: str) -> str | None:
    """Draw median (and p10-p90) stop latency per level; return the file's name, or
    ``None`` when there is nothing to draw."""
    levels = growth_levels(series)
    if not levels:
        return None
    import matplotlib

    matplotlib.use("Agg")  # no display: render to a file only
    import matplotlib.pyplot as plt

    xs = [level for level, _ in levels]
    medians = [s.median for _, s in levels]
    low = [m - percentile(s.samples, 10) for m, (_, s) in zip(medians, levels, strict=True)]
    high = [percentile(s.samples, 90) - m for m, (_, s) in zip(medians, levels, strict=True)]
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=110)
    ax.errorbar(xs, medians, yerr=[low, high], marker="o", capsize=4,
                label="one session stopped, the others still in flight: median, bars p10-p90")
    first = medians[0]
    ax.plot(xs, [10 * first] * len(xs), linestyle="--", color="tab:red",
            label="goal: under 10x the stop with 1 call in flight")
    together = growth_levels(series, ALL_PREFIX)
    if together:
        ax.plot([n for n, _ in together], [s.median for _, s in together], marker="s",
                color="tab:gray", label="all sessions stopped at once: median round trip")
        ax.plot([n for n, _ in together], [s.extra["lastMs"][0] for _, s in together],
                marker="^", color="tab:gray", linestyle=":",
                label="all sessions stopped at once: until the last answer")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xticks(xs, [f"{x:,}" for x in xs])
    ax.set_xlabel("calls in flight across sessions (one permission-pending Write each)")
    ax.set_ylabel("stop latency (ms, log scale)")
    ax.set_title("quiesce: stop latency against work in flight")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
    fig.text(0.99, 0.01, caption, ha="right", fontsize=7, color="gray")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path.name
