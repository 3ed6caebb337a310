"""Paired measurements for the benchmarks: alternating order, and the median of paired ratios.

This machine drifts 10-40% within minutes, so an arm measured always first (or always last) is
biased by more than most goals' margins. Each round runs the arms in turn, the order reversed
every other round (A B B A ...), and every comparison is a ratio of two arms from the same round.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from pathlib import Path

from engine.core.paired import abba  # noqa: F401 (the benchmarks' order is the tuner's)


def median_and_quartiles(values: Sequence[float]) -> tuple[float, float, float]:
    """(median, lower quartile, upper quartile); one value is its own interval."""
    if not values:
        raise ValueError("no values")
    if len(values) == 1:
        return values[0], values[0], values[0]
    q1, q2, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return statistics.median(values), q1, q3


def misses_floor(values: Sequence[float], floor: float) -> bool:
    """The goal "at least floor" is missed when the whole interquartile range lies below it."""
    return median_and_quartiles(values)[2] < floor


def append_result(name: str, lines: Sequence[str]) -> Path:
    """Append a bench's report to bench/results/NAME (``--save``): each run below the last, with its date in
    its first line, so the file keeps every run."""
    path = Path(__file__).resolve().parent / "results" / name
    with path.open("a", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n\n")
    print(f"# appended to {path}")
    return path
