"""Axis ranges that move in steps, so the Lab's charts do not re-lay out their axes every frame.

Letting pyqtgraph auto-range a live plot changes the view range on every
repaint; each change regenerates the tick layout and the axis labels of every
axis, which was most of a frame's cost (and the GUI's CPU competes with the
engine on small machines). These helpers pick ranges that change only when
the data leaves them: the time axis in whole steps of a few seconds, the value
axis as a "nice" ceiling with hysteresis.
"""

from __future__ import annotations

import math


def nice_ceiling(value: float) -> float:
    """The smallest of 1, 2, 2.5, 5 x 10^n that is >= value (value > 0)."""
    if value <= 0 or not math.isfinite(value):
        return 1.0
    exp = math.floor(math.log10(value))
    for m in (1.0, 2.0, 2.5, 5.0, 10.0):
        c = m * 10**exp
        if c >= value * (1 - 1e-12):
            return c
    return 10.0 ** (exp + 1)


def time_window(t_first: float, t_last: float, step: float = 5.0) -> tuple[float, float]:
    """The shown time range: data's first and last time rounded out to whole steps.

    The step grows with the span (about six steps on screen), so a long session
    does not move its axis more often than a short one."""
    span = max(t_last - t_first, 0.0)
    while span / step > 6:
        step *= 2
    lo = math.floor(max(t_first, 0.0) / step) * step
    hi = max(math.ceil(t_last / step) * step, lo + step)
    return lo, hi


class StickyCeiling:
    """A y-axis upper bound that changes only when the data needs it.

    It rises to the next nice value as soon as the data's maximum exceeds it,
    and falls only once the maximum has stayed below ``shrink_below`` of it,
    so a noisy line does not make the axis flicker."""

    def __init__(self, headroom: float = 1.1, shrink_below: float = 0.4):
        self.headroom = headroom
        self.shrink_below = shrink_below
        self.value: float | None = None

    def update(self, data_max: float) -> bool:
        """Feed the current maximum; True when the ceiling changed."""
        if not math.isfinite(data_max) or data_max <= 0:
            return False
        if self.value is None or data_max > self.value or data_max < self.shrink_below * self.value:
            new = nice_ceiling(data_max * self.headroom)
            if new != self.value:
                self.value = new
                return True
        return False

    def reset(self) -> None:
        self.value = None
