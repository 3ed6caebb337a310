"""Paired comparisons that can say "no difference": the median of paired ratios with an interval.

Two settings measured on the same prompt, one right after the other (the order alternating from
prompt to prompt, A B then B A), give a ratio that the machine's drift over minutes hardly touches.
The median of those ratios gets a distribution-free interval from the order statistics (the sign
test's interval: it assumes nothing about how the ratios scatter), so "x1.04, interval 0.97 to
1.12" honestly means "not shown to be faster".
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

from engine.core.tune_record import RatioRecord

CONFIDENCE = 0.90
T = TypeVar("T")


@dataclass(frozen=True)
class PairedRatio:
    median: float
    low: float
    high: float
    confidence: float  # what the interval covers: at least CONFIDENCE, or all n ratios allow
    n: int
    pairs: tuple[str, str] = ("prompt", "prompts")  # what a ratio pairs, one and many (the concurrency tune: batches)

    @property
    def above_one(self) -> bool:
        return self.low > 1.0

    @property
    def below_one(self) -> bool:
        return self.high < 1.0

    def describe(self) -> str:
        """ "x1.07 (x1.02 to x1.12, 90% interval over 8 paired prompts)"."""
        return (
            f"x{self.median:.2f} (x{self.low:.2f} to x{self.high:.2f}, {self.confidence:.0%} interval "
            f"over {self.n} paired {self.pairs[self.n != 1]})"
        )

    def to_dict(self) -> RatioRecord:
        return {
            "median": round(self.median, 4),
            "low": round(self.low, 4),
            "high": round(self.high, 4),
            "confidence": round(self.confidence, 4),
            "n": self.n,
        }


def abba(arms: Sequence[T], round_index: int) -> list[T]:
    """The order of the arms in this round: as given in even rounds, reversed in odd ones."""
    return list(arms) if round_index % 2 == 0 else list(reversed(arms))


def median_interval(ratios: Sequence[float], confidence: float = CONFIDENCE) -> PairedRatio:
    """The median of the ratios and the narrowest order-statistic interval that covers it with at least
    ``confidence`` (with few ratios, the widest one there is: the smallest to the largest)."""
    if not ratios:
        raise ValueError("no paired ratios")
    xs, n = sorted(ratios), len(ratios)
    median = (xs[(n - 1) // 2] + xs[n // 2]) / 2
    # [x_r, x_(n-r+1)] (1-based) covers the median with 1 - 2 P(Binomial(n, 1/2) < r)
    best_r, coverage = 1, 1.0 - 2 * 0.5**n
    for r in range(2, n // 2 + 1):
        c = 1.0 - 2 * sum(math.comb(n, i) for i in range(r)) / 2**n
        if c < confidence:
            break
        best_r, coverage = r, c
    return PairedRatio(median, xs[best_r - 1], xs[n - best_r], coverage, n)
