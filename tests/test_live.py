"""The live session model on hand-made cycle events (no Qt, no models)."""

import numpy as np
import pytest

from engine.measure.live import LiveSession, Ring


def cyc(i, drafted, accepted, k=4, prompt=False, wall=2.0):
    emitted = 1 if prompt else accepted + 1
    return {
        "i": i,
        "prompt": prompt,
        "drafted": drafted,
        "accepted": accepted,
        "emitted": emitted,
        "k": k,
        "draft_ms": 0.5,
        "verify_ms": 1.0,
        "other_ms": 0.1,
        "cycle_ms": 1.6,
        "wall_ms": wall,
        "pieces": [f"t{i}.{j}" for j in range(emitted)],
    }


def test_ring_keeps_the_newest_rows_in_order():
    r = Ring(3, 1)
    for v in range(5):
        r.push([v])
    assert len(r) == 3 and r.view()[:, 0].tolist() == [2, 3, 4]


def test_counts_rolling_and_text_colours():
    clock = iter(np.arange(0, 100, 0.5)).__next__
    s = LiveSession(capacity=8, rolling_window=2, clock=clock)
    s.add_cycle(cyc(0, 0, 0, prompt=True))
    s.add_cycle(cyc(1, 4, 4))
    s.add_cycle(cyc(2, 4, 0))
    s.add_cycle(cyc(3, 2, 1, k=2))
    snap = s.snapshot()
    assert snap.totals["drafted"] == 10 and snap.totals["accepted"] == 5 and snap.totals["steps"] == 3
    assert snap.accepted_by_position.tolist() == [2, 1, 1, 1]
    assert snap.drafted_by_position.tolist() == [3, 3, 2, 2]
    assert snap.length_histogram.tolist() == [1, 1, 0, 0, 1]
    assert snap.series["rolling_acceptance"][-1] == pytest.approx(1 / 6)  # last two steps: (4,0),(2,1)
    assert snap.series["cumulative_acceptance"][-1] == pytest.approx(0.5)
    # rolling like the acceptance, over the last two steps; the share is accepted+1 over drafted+1
    assert snap.series["mean_length"].tolist() == pytest.approx([5, 3, 1.5])
    assert snap.series["length_share"].tolist() == pytest.approx([1.0, 6 / 10, 3 / 8])
    assert snap.series["k"].tolist() == [4, 4, 2]
    text = s.take_text()
    assert text[0] == ("t0.0", False)
    assert [a for _, a in text[1:6]] == [True, True, True, True, False]  # 4 accepted + bonus
    assert s.take_text() == []
    assert snap.totals["tokens"] == 1 + 5 + 1 + 2


def test_markers_and_capacity():
    s = LiveSession(capacity=4)
    for i in range(10):
        s.add_cycle(cyc(i + 1, 3, 2))
    s.mark("K 4 -> 2", cycle=10)
    snap = s.snapshot()
    assert len(snap.series["t"]) == 4 and snap.markers[0].label == "K 4 -> 2"
    assert snap.totals["tokens"] == 30
    for i in range(3):
        s.add_cycle(cyc(11 + i, 3, 2))
    assert s.snapshot().markers  # the marked cycle is still in the ring
    for i in range(4):
        s.add_cycle(cyc(14 + i, 3, 2))
    assert s.snapshot().markers == [] and s.markers == []  # it has left: so has its marker


def test_per_position_counts_start_again_when_a_knob_moves():
    """K 4 -> 8: the current setting's positions 4-7 are divided by steps that drafted 8, not by the run's."""
    s = LiveSession()
    for i in range(10):
        s.add_cycle(cyc(i + 1, 4, 3))
    before = s.snapshot()
    assert before.current_since is None
    assert before.current_accepted_by_position.tolist() == before.accepted_by_position.tolist() == [10, 10, 10, 0]
    s.mark("K 4→8")
    for i in range(10):
        s.add_cycle(cyc(11 + i, 8, 6, k=8))
    snap = s.snapshot()
    assert snap.current_since == "K 4→8"
    assert snap.current_accepted_by_position.tolist() == [10] * 6 + [0, 0]
    assert snap.current_drafted_by_position.tolist() == [10] * 8
    assert snap.current_length_histogram.tolist() == [0] * 6 + [10, 0, 0]
    # the whole run keeps llama-server's definition: 20 steps, positions 4-7 drafted in 10 of them
    assert snap.accepted_by_position.tolist() == [20, 20, 20, 10, 10, 10, 0, 0]
    assert snap.length_histogram.sum() == 20 and snap.totals["steps"] == 20
