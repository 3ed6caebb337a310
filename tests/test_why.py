"""engine.measure.why: the parts of a speculative step against a plain token, on hand-made cycles whose
costs are known (so each verdict can be checked by hand), then on a real engine run."""

from __future__ import annotations

import pytest

from engine.core.settings import LoadSettings, SamplingSettings, SpecSettings
from engine.measure.generate import generate
from engine.measure.live import LiveSession
from engine.measure.why import MIN_STEPS, explain
from engine.models.synthetic import ModelShape, PairSpec, write_pair
from engine.planning.constants import K_MAX

from .conftest import PROMPTS


def feed(
    session: LiveSession,
    steps: int,
    k: int,
    accepted: int,
    verify_ms,
    draft_ms_per_token: float,
    other=0.2,
    replayed: bool = False,
):
    for _ in range(steps):
        # a replay verifies [last, the accepted tokens, the target's own] again, and keeps one more token
        v = verify_ms(k + 1) + (verify_ms(accepted + 2) if replayed else 0.0)
        d = draft_ms_per_token * k
        session.add_cycle(
            {
                "drafted": k,
                "accepted": accepted,
                "emitted": accepted + (2 if replayed else 1),
                "replayed": replayed,
                "k": k,
                "draft_ms": d,
                "verify_ms": v,
                "other_ms": other,
                "cycle_ms": d + v + other,
                "wall_ms": d + v + other,
            }
        )


def test_a_compute_bound_verify_is_named_as_the_reason_and_no_k_pays():
    """A 2-core CPU: verifying B tokens costs B times one (10 ms), a draft token 1 ms, acceptance 0.5."""
    s = LiveSession()
    s.baseline_tps = 1000.0 / 10.2  # a plain token: one 10 ms pass and the 0.2 ms rest
    feed(s, 40, k=4, accepted=2, verify_ms=lambda b: 10.0 * b, draft_ms_per_token=1.0)
    why = explain(s.snapshot())
    assert why is not None and not why.pays and why.k == 4 and why.steps == 40
    assert why.acceptance == pytest.approx(0.5) and why.tokens_per_step == pytest.approx(3.0)
    assert why.verify_ratio == pytest.approx(50 / 10.2, rel=0.05)
    assert why.explained_speedup == pytest.approx(3.0 / ((4 + 50 + 0.2) / 10.2), rel=1e-6)
    assert why.best_k is None
    text = why.sentence()
    assert text.startswith("Speculation does not pay here") and "compute-bound" in text
    assert "verifying 5 tokens costs 4.90x one" in text and "no K pays" in text


def test_a_flat_verify_pays_and_the_best_k_follows_from_the_measured_parts():
    """A GPU: verifying any batch costs what one token does; every drafted token is kept."""
    s = LiveSession()
    s.baseline_tps = 1000.0 / 10.2
    feed(s, 40, k=2, accepted=2, verify_ms=lambda b: 10.0, draft_ms_per_token=0.5)
    why = explain(s.snapshot(), current_tokens_per_s=3 * 1000.0 / 11.2)
    assert why is not None and why.pays
    assert why.explained_speedup == pytest.approx(3.0 / (11.2 / 10.2))
    assert why.measured_speedup == pytest.approx(why.explained_speedup)
    assert "compute-bound" not in why.sentence() and why.sentence().startswith("Speculation pays here")
    # with every token kept and a flat verify, longer drafts keep paying: the longest K tried (the K_MAX that
    # predictions and the tuner share) is best
    assert why.best_k == K_MAX and why.best_speedup > why.explained_speedup
    assert f"K={K_MAX} would give" in why.sentence()


def test_only_the_current_setting_counts_and_too_few_steps_say_nothing():
    s = LiveSession()
    assert explain(s.snapshot()) is None  # no baseline
    s.baseline_tps = 100.0
    feed(s, 40, k=4, accepted=0, verify_ms=lambda b: 10.0 * b, draft_ms_per_token=1.0)
    s.mark("K=2")
    feed(s, MIN_STEPS - 1, k=2, accepted=2, verify_ms=lambda b: 10.0, draft_ms_per_token=0.5)
    assert explain(s.snapshot()) is None
    feed(s, 1, k=2, accepted=2, verify_ms=lambda b: 10.0, draft_ms_per_token=0.5)
    why = explain(s.snapshot())
    assert why is not None and why.k == 2 and why.steps == MIN_STEPS and why.acceptance == 1.0


def test_a_hybrid_models_replays_count_one_more_token_and_one_more_pass():
    """Qwen3.5's layout: half the steps keep all 4 drafted tokens, half keep 2 and verify those again."""
    s = LiveSession()
    s.baseline_tps = 1000.0 / 10.2
    for _ in range(10):
        feed(s, 2, k=4, accepted=4, verify_ms=lambda b: 10.0 * b, draft_ms_per_token=1.0)
        feed(s, 2, k=4, accepted=2, verify_ms=lambda b: 10.0 * b, draft_ms_per_token=1.0, replayed=True)
    why = explain(s.snapshot())
    assert why is not None and why.replay_share == pytest.approx(0.5)
    assert why.tokens_per_step == pytest.approx(1 + (4 + 2 + 1) / 2)  # the replay's extra token counted
    # the verify line comes from the single-pass steps: 10 ms a token, not the replays' two passes
    assert why.verify_ratio == pytest.approx(50 / 10.2, rel=0.02)
    step_ms = 4 + 50 + 0.2 + 40 / 2  # the replays' second pass (4 tokens) on half of the steps
    assert why.explained_speedup == pytest.approx(4.5 / (step_ms / 10.2), rel=1e-6)
    assert "50% of steps verify their accepted tokens again" in why.sentence()


def live_run(client, load: LoadSettings) -> tuple[LiveSession, float]:
    """The baseline on every prompt, then draft-simple K=4 on each, its cycles fed to a live session."""
    client.load(load)
    sampling = SamplingSettings()
    plain = [generate(client, p, 48, SpecSettings("none"), sampling, baseline=True) for p in PROMPTS]
    s = LiveSession()
    s.baseline_tps = sum(x["tokens_per_s"] for x in plain) / len(plain)
    for p in PROMPTS:
        generate(
            client,
            p,
            48,
            SpecSettings("draft-simple", draft_n_max=4),
            sampling,
            on_event=lambda ev: ev["event"] == "cycle" and s.add_cycle(ev),
        )
    return s, s.current.tokens_per_s


@pytest.mark.slow
def test_on_a_real_run_the_parts_explain_the_measured_speedup(client, pair):
    """The synthetic pair in a worker: the baseline, then draft-simple K=4; the parts, multiplied out,
    give the speedup the run's own tokens/s shows (the same cycles, so within a few percent)."""
    s, tps = live_run(client, LoadSettings(*pair, ctx=2048))
    why = explain(s.snapshot(), tps)
    assert why is not None and why.k == 4 and why.steps >= MIN_STEPS
    assert 0.0 < why.acceptance <= 1.0 and why.verify_ratio > 0 and why.draft_share > 0
    assert why.explained_speedup == pytest.approx(why.measured_speedup, rel=0.15)
    assert ("pays here" in why.sentence()) == (why.explained_speedup > 1.0)


@pytest.mark.slow
def test_on_a_hybrid_models_run_the_parts_with_replays_explain_the_measured_speedup(client, tmp_path):
    """The same on a generated qwen35 pair, whose partly rejected drafts replay."""
    target, draft = write_pair(tmp_path, PairSpec(shape=ModelShape(n_layer=8, hybrid=True), draft_layers=4))
    s, tps = live_run(client, LoadSettings(target, draft, ctx=1024, threads=1))
    why = explain(s.snapshot(), tps)
    assert why is not None and 0 < why.replay_share < 1
    assert why.explained_speedup == pytest.approx(why.measured_speedup, rel=0.15)


def test_the_parts_named_add_up_to_the_step_and_an_ngram_is_not_described_by_k():
    """Issue 51: "costs 9.75 plain tokens: verifying 3 1.96x, drafting 2 0.28x" did not add up, and an n-gram
    method's line spoke of K, which it ignores."""
    s = LiveSession()
    s.baseline_tps = 1000.0 / 10.2
    # an n-gram drafting 12 tokens a step at K=3 (it ignores K), half of them kept; lookups cost next to nothing
    feed(s, 30, k=12, accepted=6, verify_ms=lambda b: 10.0 + 0.5 * b, draft_ms_per_token=0.01, other=0.3)
    for method in ("draft-simple", "ngram-mod", "ngram-mod,draft-simple"):
        why = explain(s.snapshot(), method=method)
        assert why is not None
        assert why.draft_part + why.verify_part + why.rest_part == pytest.approx(why.step_ratio, rel=1e-9)
        text = why.sentence()
        parts = f"drafting {why.draft_part:.2f}, verifying {why.verify_part:.2f}"
        assert parts in text and f"costs {why.step_ratio:.2f} plain tokens" in text
        if method == "draft-simple":
            assert why.k_bounded and "at K=12" in text
        else:
            assert not why.k_bounded and "K=" not in text and "drafted 12.0 a step" in text
    combined = explain(s.snapshot(), method="ngram-mod,draft-simple")
    assert combined is not None and "the combination ngram-mod + draft-simple" in combined.sentence()


def test_a_combination_that_already_has_the_draft_model_is_not_told_to_try_one():
    """Issue 51 screenshots: ngram-mod,draft-simple that did not pay was told "try draft-simple with a draft
    model", which it was running."""
    s = LiveSession()
    s.baseline_tps = 1000.0 / 10.0
    feed(s, 30, k=8, accepted=1, verify_ms=lambda b: 10.0 + 2.0 * b, draft_ms_per_token=2.0)
    alone, combined = (explain(s.snapshot(), method=m) for m in ("ngram-mod", "ngram-mod,draft-simple"))
    assert alone is not None and combined is not None and not alone.pays and not combined.pays
    assert "try draft-simple with a draft model" in alone.sentence()
    assert "try draft-simple" not in combined.sentence() and "try the n-gram alone" in combined.sentence()
