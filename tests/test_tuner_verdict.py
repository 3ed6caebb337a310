"""The tuner's verdict: the best setting against no speculation in paired, alternating runs, with an
interval; "beats no speculation" only when the interval lies above 1."""

from __future__ import annotations

from collections import Counter

import pytest

from engine.core.paired import PairedRatio
from engine.core.settings import LoadSettings, SpecSettings
from engine.measure.tuner import VERDICT_PROMPTS, Candidate, Tuner, TuneResult
from engine.planning.speed.cost_model import CostCurve, PairCosts
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


def _measured(spec: SpecSettings, tps: float) -> Candidate:
    from engine.core.stats import RunStats

    c = Candidate(spec)
    one = RunStats(tokens_generated=int(tps) + 1, wall_ms=1000.0, steps=10).summary()
    c.totals.add_summary(one)  # tps tokens after the first in one second
    c.measured.append(tps)
    return c


@pytest.mark.parametrize(
    "best_k, curve, says",
    [
        (12, {10: 50.0, 11: 52.0, 12: 54.0}, True),  # the best at the top, the curve still rising: say so
        (12, {10: 50.0, 11: 55.0, 12: 54.0}, False),  # the curve has turned at the top
        (8, {7: 50.0, 8: 52.0, 12: 40.0}, False),  # the best below the top
    ],
)
def test_a_best_k_at_the_top_of_its_range_says_to_raise_k_max(best_k, curve, says):
    """Issue 51: a tune's best draft-simple K sat at K max (12) while the curve still rose, unsaid."""
    best = _measured(SpecSettings("draft-simple", draft_n_max=best_k), 54.0)
    other = _measured(SpecSettings("draft-simple", draft_n_max=4), 40.0)
    r = TuneResult(30.0, PairCosts(CostCurve.flat(10.0)), [], [best, other], best, 1.0, 2, curve, None)
    hint = r.raise_k_hint()
    assert bool(hint) is says and ("raise K max" in hint) is says
    assert r.to_dict()["raise_k"] == hint
    # an n-gram method has no K to raise
    ng = _measured(SpecSettings("ngram-mod"), 60.0)
    assert TuneResult(30.0, None, [], [ng], ng, 1.0, 1, curve, None).raise_k_hint() == ""


def test_the_search_speedup_and_the_verdict_are_told_apart_when_they_differ():
    """Issue 51: the table said 1.34x where the verdict said x1.24, with nothing to explain it."""
    best = _measured(SpecSettings("ngram-simple"), 134.0)
    r = TuneResult(100.0, None, [], [best], best, 1.0, 1, {}, PairedRatio(1.24, 1.10, 1.30, 0.93, 8))
    text = r.search_vs_verdict()
    assert "x1.34" in text and "x1.24" in text and "picked for being fastest" in text
    same = TuneResult(134.0 / 1.24, None, [], [best], best, 1.0, 1, {}, PairedRatio(1.24, 1.1, 1.3, 0.93, 8))
    assert same.search_vs_verdict() == ""


@pytest.mark.slow
def test_a_real_tune_ends_with_paired_alternating_runs_of_the_best_and_none(pair):
    load = LoadSettings(pair[0], pair[1], ctx=1024, threads=1)
    sent = []
    with EngineClient() as client:
        client.start()
        client.load(load)
        real_generate = client.generate

        def watching(prompt, max_tokens, baseline=False, spec=None, sampling=None, **kw):
            sent.append((prompt, spec["spec_type"] if spec else None, baseline))
            return real_generate(prompt, max_tokens, baseline=baseline, spec=spec, sampling=sampling, **kw)

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


@pytest.mark.slow
def test_a_tune_that_cannot_keep_its_budget_says_so_up_front_with_an_estimate(pair):
    """Issue 51: a tune showed "731 s of 120 s budget" and ran on, nothing said. The least a tune must run
    (every setting once, the verdict's pairs) is now estimated after the pair's costs and baseline, and
    said before the rounds start when it cannot fit."""
    load = LoadSettings(pair[0], pair[1], ctx=1024, threads=1)
    lines: list[str] = []
    with EngineClient() as client:
        client.start()
        client.load(load)
        tuner = Tuner(client, load, list(PROMPTS), max_tokens=16, budget_s=0.5, seed=3, k_max=4, progress=lines.append)
        result = tuner.run()
    note = result.budget_note
    assert note.startswith("this tune will run past its 0 s budget") and "s more, about" in note
    first_round = next(i for i, line in enumerate(lines) if line.startswith("round with"))
    assert lines.index(note) < first_round, "said before the rounds, not after"
    assert result.to_dict()["budget_note"] == note
    # a budget that holds it says nothing
    with EngineClient() as client:
        client.start()
        client.load(load)
        roomy = Tuner(
            client, load, list(PROMPTS[:1]), max_tokens=8, budget_s=3600, seed=3, k_max=2, progress=lambda m: None
        )
        assert roomy.run().budget_note == ""
