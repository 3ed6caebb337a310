"""A baseline belongs to what it measured, and a speedup past what the run's accepted tokens allow is not shown
(issue 51: the Lab once divided a real pair's speed by the demo's baseline, and once showed x203)."""

from __future__ import annotations

import dataclasses
import os

from hypothesis import given
from hypothesis import strategies as st

from engine.core.settings import LoadSettings
from engine.measure.baseline import SPEEDUP_SLACK, Baseline, baseline_key, plausible_speedup, speedup_ceiling
from engine.measure.live import LiveSession

SAMPLING = {"temp": 0.0, "top_k": 40, "top_p": 1.0, "min_p": 0.0, "seed": 1}


def _files(tmp_path):
    target, draft = tmp_path / "t.gguf", tmp_path / "d.gguf"
    target.write_bytes(b"t" * 100)
    draft.write_bytes(b"d" * 10)
    return target, draft


def test_a_baseline_matches_only_the_pair_settings_and_sampling_it_measured(tmp_path):
    target, draft = _files(tmp_path)
    load = LoadSettings(target, draft, ctx=2048, threads=2)
    b = Baseline.measured(50.0, 128, load, SAMPLING)
    assert b.matches(load, dict(SAMPLING)) and "50.0 tok/s" in b.describe() and "128 tokens" in b.describe()
    assert not b.matches(None, SAMPLING)
    for changed in (
        dataclasses.replace(load, ctx=4096),
        dataclasses.replace(load, threads=1),
        dataclasses.replace(load, ngl=0),
        dataclasses.replace(load, repack=False),
        dataclasses.replace(load, draft=None),
        dataclasses.replace(load, target=draft),
    ):
        assert not b.matches(changed, SAMPLING), changed
    assert not b.matches(load, {**SAMPLING, "temp": 0.7})
    # the same path, another file: a model replaced on disk is another model
    st_ = target.stat()
    os.utime(target, ns=(st_.st_atime_ns, st_.st_mtime_ns + 10**9))
    assert not b.matches(load, SAMPLING)
    assert baseline_key(load, SAMPLING) != b.key


@given(length=st.floats(1.0, 64.0), share=st.floats(0.01, 1.0))
def test_a_speedup_within_the_runs_tokens_a_step_is_shown(length, share):
    assert plausible_speedup(length * share, length)


@given(length=st.floats(1.0, 64.0), over=st.floats(1.001, 50.0))
def test_a_speedup_past_the_runs_tokens_a_step_is_not(length, over):
    assert not plausible_speedup(speedup_ceiling(length) * over, length)
    assert speedup_ceiling(length) == length * SPEEDUP_SLACK


_cycle = st.tuples(st.integers(1, 16), st.integers(0, 16)).map(lambda t: (t[0], min(t[1], t[0])))


@given(cycles=st.lists(_cycle, min_size=1, max_size=60))
def test_live_statistics_stay_within_what_the_steps_allow(cycles):
    """Whatever the steps (K drafted, a <= K kept), the rate is a share, the mean accepted length is within
    1..K_max + 1, no histogram bin is past K_max + 1, and a speedup the stats allow passes the bound."""
    s = LiveSession()
    for k, a in cycles:
        s.add_cycle({"drafted": k, "accepted": a, "emitted": a + 1, "wall_ms": 10.0, "k": k, "text": "x"})
    k_max = max(k for k, _ in cycles)
    assert 0.0 <= s.stats.acceptance_rate <= 1.0
    assert 1.0 <= s.stats.mean_accepted_length <= k_max + 1
    hist = s.snapshot().length_histogram
    assert len(hist) == 0 or not hist[k_max + 1 :].any()
    assert plausible_speedup(s.stats.mean_accepted_length, s.stats.mean_accepted_length)
