"""The benchmarks' pairing helpers (bench/paired.py) on tiny inputs."""

from __future__ import annotations

import pytest

from bench.paired import abba, median_and_quartiles, misses_floor


def test_abba_reverses_every_other_round_so_no_arm_is_always_first():
    orders = [abba(("a", "b", "c"), r) for r in range(4)]
    assert orders == [["a", "b", "c"], ["c", "b", "a"], ["a", "b", "c"], ["c", "b", "a"]]
    firsts = [o[0] for o in orders]
    assert firsts.count("a") == firsts.count("c") == 2


def test_median_and_quartiles():
    assert median_and_quartiles([0.9]) == (0.9, 0.9, 0.9)
    assert median_and_quartiles([1.0, 2.0, 3.0, 4.0, 5.0]) == (3.0, 2.0, 4.0)
    with pytest.raises(ValueError):
        median_and_quartiles([])


def test_a_floor_is_missed_only_when_the_whole_interval_is_below_it():
    assert misses_floor([0.90, 0.92, 0.94, 0.95], 0.97)
    assert not misses_floor([0.93, 0.95, 0.98, 0.99], 0.97)  # the median misses, the interval reaches it
