"""How long a long action has taken and, once part of it is done, about how long the rest will take.

The estimate assumes the parts left go at the pace of the parts done. They rarely do exactly (a model write
is slower than a timing, a first generation pays for loading), so the text says "at this pace" and rounds.
"""

from __future__ import annotations


def duration_text(seconds: float) -> str:
    """12 s, 85 s, 3 min: seconds below a minute and a half, whole minutes above."""
    return f"{seconds:.0f} s" if seconds < 90 else f"{max(2, round(seconds / 60))} min"


def pace_text(done: float, total: float, elapsed_s: float) -> str:
    """ "12 s so far" until something is done, then "1.5 min so far, about 3 min left at this pace"."""
    so_far = f"{elapsed_s / 60:.1f} min so far" if elapsed_s >= 60 else f"{elapsed_s:.0f} s so far"
    if done <= 0 or total <= done or elapsed_s <= 0:
        return so_far
    left = elapsed_s / done * (total - done)
    return f"{so_far}, about {duration_text(left)} left at this pace"
