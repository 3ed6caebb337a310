"""The tuner's verdict: the best setting against no speculation in paired, alternating runs, with an
interval; "beats no speculation" only when the interval lies above 1."""

from __future__ import annotations

from collections import Counter

import pytest

from engine.core.paired import PairedRatio
from engine.core.settings import LoadSettings, SpecSettings
from engine.measure.tuner import VERDICT_PROMPTS, Candidate, Tuner, TuneResult
from engine.planning.cost_model import CostCurve, PairCosts
from engine.runtime.client import EngineClient

from .conftest import PROMPTS


def result_with(verdict: PairedRatio | None) -> TuneResult:
    best = Candidate(SpecSettings("ngram-simple", ngram_size_n=3, ngram_size_m=8))
    return TuneResult(100.0, PairCosts(CostCurve.flat(10.0)), [], [best], best, 1.0, 1, {}, verdict)


@pytest.mark.parametrize(
    "low, high, beats, says",
    [
        (1.05, 1.20, True, "ngram-simple beats no speculation here: x1.10 (x1.05 to x1.20"),
        (0.95, 1.20, False, "no setting beats no speculation here: the best, ngram-simple, is not shown faster"),
        (0.70, 0.90, False, "no setting beats no speculation here: the best, ngram-simple, is slower"),
    ],
)
def test_only_an_interval_above_one_beats_no_speculation(low, high, beats, says):
    """The paired interval decides, whatever the rounds measured."""
    r = result_with(PairedRatio(1.10 if beats else (0.8 if high < 1 else 1.02), low, high, 0.93, 8))
    assert r.beats_baseline is beats
    assert r.verdict_text().startswith(says)
    assert r.to_dict()["verdict"]["n"] == 8 and r.to_dict()["beats_baseline"] is beats


def test_a_real_tune_ends_with_paired_alternating_runs_of_the_best_and_none(pair):
    load = LoadSettings(pair[0], pair[1], ctx=1024, threads=1)
    sent = []
    with EngineClient() as client:
        client.start()
        client.load(load)
        real_generate = client.generate

        def watching(prompt, max_tokens, baseline=False, spec=None, sampling=None):
            sent.append((prompt, spec["spec_type"] if spec else None, baseline))
            return real_generate(prompt, max_tokens, baseline=baseline, spec=spec, sampling=sampling)

        client.generate = watching  # the real engine runs every request; this only notes the order
        lines = []
        tuner = Tuner(client, load, list(PROMPTS), max_tokens=24, budget_s=600, seed=3, k_max=4, progress=lines.append)
        result = tuner.run()
    n = min(VERDICT_PROMPTS, len(PROMPTS))
    v = result.verdict
    assert v is not None and v.n == n and v.low <= v.median <= v.high
    assert result.beats_baseline is (v.low > 1.0)
    # the last 2n requests: each prompt once with the best and once without, the order alternating
    tail = sent[-2 * n :]
    for i in range(n):
        first, second = tail[2 * i], tail[2 * i + 1]
        assert first[0] == second[0] == tuner.prompts[i]  # the tuner's seeded order
        best_first = i % 2 == 0
        assert (first[2], second[2]) == ((False, True) if best_first else (True, False))
        assert {first[1], second[1]} == {result.best.spec.spec_type, "none"}
    assert any(line.startswith("verdict:") for line in lines)
    assert result.to_dict()["verdict_text"] == result.verdict_text()
    # the verdict's runs without speculation are also the speedup's baseline: past the first two prompts
    # (the tuner's first baseline) no prompt runs it twice
    baseline_runs = Counter(p for p, _, baseline in sent if baseline)
    assert all(baseline_runs[p] == 1 for p in tuner.prompts[2:n]), baseline_runs
