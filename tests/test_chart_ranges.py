"""The stepped axis ranges of the Lab's live charts (pure arithmetic, no Qt)."""

import math

import pytest

from app.widgets.chart_ranges import StickyCeiling, nice_ceiling, time_window


@pytest.mark.parametrize(
    "value,expected",
    [(0.7, 1.0), (1.0, 1.0), (1.3, 2.0), (2.2, 2.5), (3, 5), (7, 10), (101, 200), (0.0042, 0.005), (480, 500)],
)
def test_nice_ceiling(value, expected):
    assert math.isclose(nice_ceiling(value), expected)


def test_nice_ceiling_of_nonsense_is_one():
    assert nice_ceiling(0) == nice_ceiling(-3) == nice_ceiling(float("nan")) == 1.0


def test_time_window_holds_the_data_and_moves_in_steps():
    changes, last = 0, None
    t_first = 0.0
    for i in range(1, 3001):  # 300 s of data at 10 cycles/s, ring of 20 s
        t_last = i / 10
        t_first = max(0.0, t_last - 20.0)
        w = time_window(t_first, t_last)
        assert w[0] <= t_first and t_last <= w[1]
        assert w[1] - w[0] <= 2 * (t_last - t_first) + 20  # never much wider than the data
        changes += w != last
        last = w
    # a per-frame range would change 3000 times; whole 5 s steps change about 60 times
    assert changes <= 130


def test_time_window_step_grows_with_the_span():
    lo, hi = time_window(0.0, 1000.0)
    assert (hi - lo) / 1000.0 < 1.5 and hi >= 1000.0


def test_sticky_ceiling_rises_at_once_and_falls_only_far_below():
    c = StickyCeiling()
    assert c.update(450) and c.value == 500
    assert not c.update(480)  # noise below the ceiling: no change
    assert c.update(520) and c.value == 1000
    assert not c.update(450)  # 0.45 of the ceiling: still kept
    assert c.update(100) and c.value == 200
    assert not c.update(float("nan")) and not c.update(0)
    c.reset()
    assert c.value is None
