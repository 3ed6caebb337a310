"""engine.core.paired: the median of paired ratios and its distribution-free interval."""

import math
import random

import pytest

from engine.core.paired import abba, median_interval


def test_the_interval_is_an_order_statistic_pair_with_the_binomial_coverage():
    r = median_interval([1.0, 1.1, 0.9, 1.2, 1.05, 0.95, 1.15, 1.0, 1.3, 0.85])
    assert r.n == 10 and r.median == pytest.approx(1.025)
    # n = 10: [x2, x9] covers the median with 1 - 2 * (1 + 10) / 1024 = 0.979; [x3, x8] only 0.891
    assert (r.low, r.high) == (0.9, 1.2) and r.confidence == pytest.approx(1 - 22 / 1024)
    assert not r.above_one and not r.below_one
    assert "x1.02 (x0.90 to x1.20, 98% interval over 10 paired prompts)" == r.describe()


def test_few_ratios_give_the_widest_interval_and_say_what_it_covers():
    r = median_interval([1.2, 1.3, 1.25])
    assert (r.low, r.high) == (1.2, 1.3) and r.confidence == pytest.approx(0.75) and r.above_one
    assert median_interval([0.8]).confidence == 0.0
    with pytest.raises(ValueError):
        median_interval([])


def test_the_coverage_holds_on_simulated_noise():
    """Ratios drawn around a true median of 1.0: the 90% interval misses it at most about 10% of the time."""
    rng = random.Random(7)
    misses = 0
    for _ in range(2000):
        r = median_interval([math.exp(rng.gauss(0.0, 0.15)) for _ in range(12)])
        misses += not (r.low <= 1.0 <= r.high)
        assert r.confidence >= 0.9
    assert misses / 2000 <= 0.10


def test_the_order_alternates():
    assert [abba((0, 1), i) for i in range(4)] == [[0, 1], [1, 0], [0, 1], [1, 0]]
