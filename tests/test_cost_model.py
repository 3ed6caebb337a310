"""The cost model on hand-made numbers, and its verify curve measured on a real pair."""

import pytest

from engine.planning.speed.cost_model import (
    CostCurve,
    PairCosts,
    StateCopies,
    conditional_acceptance,
    expected_tokens,
    leviathan_speedup,
)


def test_expected_tokens_counts_the_bonus_token():
    assert expected_tokens([], 0) == 1.0
    assert expected_tokens([1.0, 1.0, 1.0], 3) == 4.0
    assert expected_tokens([0.5, 0.5], 2) == pytest.approx(1 + 0.5 + 0.25)
    assert expected_tokens([0.8], 3) == pytest.approx(1 + 0.8 + 0.64 + 0.512)  # last chance reused


def test_conditional_acceptance_from_prefix_counts():
    # 10 steps of K=3: position 0 kept 8 times, 1 kept 6 times, 2 kept 3 times
    assert conditional_acceptance([8, 6, 3], 10) == pytest.approx([0.8, 0.75, 0.5])
    assert conditional_acceptance([0, 0], 5) == [0.0, 0.0]


@pytest.mark.parametrize("alpha, k, c", [(0.6, 4, 0.1), (0.8, 2, 0.05), (0.9, 8, 0.2), (0.3, 1, 0.5)])
def test_reduces_to_leviathan_with_a_flat_curve(alpha, k, c):
    verify_ms = 20.0
    costs = PairCosts(verify=CostCurve.flat(verify_ms), draft=CostCurve.flat(c * verify_ms))
    predicted = costs.predict_tps([alpha] * k, k, feed_draft=False) / costs.baseline_tps
    assert predicted == pytest.approx(leviathan_speedup(alpha, k, c))


def test_a_rising_verify_curve_moves_the_best_k_down():
    flat = PairCosts(verify=CostCurve.flat(10.0), draft=CostCurve.flat(0.5))
    rising = PairCosts(verify=CostCurve((1, 2, 4, 8, 16), (10.0, 10.5, 12.0, 20.0, 40.0)), draft=CostCurve.flat(0.5))
    cond = [0.85] * 16
    assert rising.best_k(cond)[0] < flat.best_k(cond)[0]


def test_curve_interpolates_and_extrapolates():
    c = CostCurve((1, 4), (10.0, 16.0))
    assert c.at(2) == pytest.approx(12.0) and c.at(8) == pytest.approx(24.0)
    with pytest.raises(ValueError):
        CostCurve((4, 1), (1.0, 2.0))


def test_measured_forward_times_on_a_real_pair(bigger_pair):
    from engine.core.settings import LoadSettings
    from engine.runtime.binding import Engine

    target, draft = bigger_pair
    with Engine(LoadSettings(target, draft, ctx=1024)) as e:
        t1 = e.time_forward("target", 1, n_past=64, reps=3)
        t16 = e.time_forward("target", 16, n_past=64, reps=3)
        d1 = e.time_forward("draft", 1, n_past=64, reps=3)
        assert t1 > 0 and t16 > 0 and d1 > 0
        # and the caches are usable afterwards
        e.begin("def the value", 8)
        while e.step() is not None:
            pass


def test_a_steps_state_copies_add_the_drafts_round_trip_and_the_targets_save_and_partial_restore():
    """cost_model's checkpoints: a hybrid draft's state goes out and back every step; a restoring target's goes out
    before each verify, and a partial keep brings both back."""
    copies = StateCopies(target_ms=20.0, draft_ms=5.0)
    assert copies.step_ms(0.3, target_restores=True) == pytest.approx(2 * 5.0 + 20.0 + 0.3 * (20.0 + 5.0))
    assert copies.step_ms(0.3, target_restores=False) == pytest.approx(2 * 5.0)
    curve = CostCurve.flat(10.0)
    plain = PairCosts(curve, CostCurve.flat(1.0), replays=True)
    copying = PairCosts(curve, CostCurve.flat(1.0), replays=True, checkpoints=copies)
    cond = [0.7]
    partial = 1 - 0.7**3
    ms = plain.step_ms(3) + sum(p * (10.0 + 1.0) for p in [0.3, 0.7 * 0.3, 0.49 * 0.3])
    tokens = expected_tokens(cond, 3) + partial
    assert plain.predict_tps(cond, 3) == pytest.approx(1000.0 * tokens / ms)
    assert copying.predict_tps(cond, 3) == pytest.approx(1000.0 * tokens / (ms + copies.step_ms(partial, True)))
    assert copying.predict_tps(cond, 0) == plain.predict_tps(cond, 0)  # no draft, nothing copied
