"""Forward-pass times by batch size whose shape survives a machine that drifts.

The speed model's calibration (engine.measure.tuner, bench/prediction_error.py) reads the ratio of a pass
of K + 1 tokens to a pass of one. Timed one size after the other, a slow spell of a few seconds lands on
some sizes and not on others and bends that curve (a 2-core VM drifts 10-40 % within minutes). Here every
size is timed in each of a few rounds, the order reversed every other round, and each size keeps its
median: a spell then falls on all sizes alike.
"""

from __future__ import annotations

import statistics

from engine.core.paired import abba
from engine.runtime.client import EngineClient

ROUNDS = 3
REPS = 2  # timed passes a size gets in one round (the worker keeps their median)


def forward_times(
    client: EngineClient, which: str, sizes: list[int], n_past: int, rounds: int = ROUNDS, reps: int = REPS
) -> dict[int, float]:
    """ms of a forward pass of each batch size through ``which`` ("target" or "draft"), n_past tokens in."""
    got: dict[int, list[float]] = {n: [] for n in sizes}
    for r in range(max(rounds, 1)):
        for n, ms in client.measure(which, abba(sizes, r), n_past=n_past, reps=reps).items():
            got[n].append(ms)
    return {n: statistics.median(v) for n, v in got.items()}
