"""Acceptance counting on tiny hand-made cycles (no models)."""

import pytest

from engine.core.stats import RunStats


def add(s: RunStats, drafted: int, accepted: int, emitted: int | None = None, prompt: bool = False) -> None:
    s.add(
        is_prompt=prompt,
        n_prompt=5 if prompt else 0,
        drafted=drafted,
        accepted=accepted,
        emitted=accepted + 1 if emitted is None else emitted,
        draft_ms=1.0,
        verify_ms=2.0,
        decode_ms=1.5,
        other_ms=0.5,
        cycle_ms=3.5,
        wall_ms=4.0,
        text="x",
    )


def test_partial_accepts_count_by_position():
    s = RunStats()
    add(s, 0, 0, emitted=1, prompt=True)
    add(s, 4, 2)  # positions 0,1 accepted, 2,3 rejected
    add(s, 4, 4)  # all accepted
    add(s, 3, 0)  # first rejected
    add(s, 0, 0)  # a cycle without a draft counts for neither
    out = s.summary()
    assert out["drafted"] == 11 and out["accepted"] == 6
    assert out["steps"] == 3 and out["cycles"] == 4
    assert out["acceptance_rate"] == pytest.approx(6 / 11)
    assert out["mean_accepted_length"] == pytest.approx(1 + 6 / 3)
    assert out["accepted_by_position"] == [2, 2, 1, 1]
    assert out["acceptance_by_position"] == pytest.approx([2 / 3, 2 / 3, 1 / 3, 1 / 3])
    assert out["accepted_length_histogram"] == [1, 0, 1, 0, 1]
    assert out["tokens_generated"] == 1 + 3 + 5 + 1 + 1
    # the prompt cycle's token and time stay out of tokens/s
    assert out["tokens_per_s"] == pytest.approx((out["tokens_generated"] - 1) * 1000 / (4 * 4.0))
    assert out["prompt_ms"] == 4.0 and out["prompt_tokens"] == 5
    assert out["outside_decode_share"] == pytest.approx(0.5 / 3.5)


def test_no_draft_means_no_rate():
    s = RunStats()
    add(s, 0, 0, emitted=1, prompt=True)
    assert s.acceptance_rate == 0.0 and s.mean_accepted_length == 1.0 and s.tokens_per_s == 0.0


def test_impossible_counts_are_rejected():
    with pytest.raises(ValueError):
        add(RunStats(), 2, 3)


def test_combined_summaries_are_ratios_of_sums():
    from engine.core.stats import combine_summaries

    a, b = RunStats(), RunStats()
    for st, cycles in ((a, [(4, 4), (4, 0)]), (b, [(2, 1), (4, 3), (0, 0)])):
        st.add(
            is_prompt=True,
            n_prompt=5,
            drafted=0,
            accepted=0,
            emitted=1,
            draft_ms=0,
            verify_ms=0,
            decode_ms=0,
            other_ms=0,
            cycle_ms=3,
            wall_ms=3,
            text="x",
        )
        for drafted, accepted in cycles:
            st.add(
                is_prompt=False,
                n_prompt=0,
                drafted=drafted,
                accepted=accepted,
                emitted=accepted + 1,
                draft_ms=1,
                verify_ms=2,
                decode_ms=0,
                other_ms=0.5,
                cycle_ms=3.5,
                wall_ms=4,
                text="y",
            )
    c = combine_summaries([a.summary(), b.summary()])
    assert c["generations"] == 2
    assert (c["drafted"], c["accepted"], c["steps"]) == (14, 8, 4)
    assert c["acceptance_rate"] == pytest.approx(8 / 14)
    assert c["mean_accepted_length"] == pytest.approx(1 + 8 / 4)
    assert c["accepted_by_position"] == [3, 2, 2, 1]
    assert c["accepted_length_histogram"] == [1, 1, 0, 1, 1]
    # tokens after each prompt's first one, over the generation cycles' wall time
    assert c["tokens_generated"] == a.tokens_generated + b.tokens_generated
    assert c["tokens_per_s"] == pytest.approx((c["tokens_generated"] - 2) * 1000 / (5 * 4))
    with pytest.raises(ValueError):
        combine_summaries([])


def test_a_cycle_event_counts_as_the_same_cycle_added_by_hand():
    by_hand, from_events = RunStats(), RunStats()
    cycles = [(0, 0, 1, True), (4, 2, 3, False), (3, 3, 4, False), (0, 0, 1, False)]
    for drafted, accepted, emitted, prompt in cycles:
        add(by_hand, drafted, accepted, emitted=emitted, prompt=prompt)
        from_events.add_event(
            {
                "event": "cycle",
                "prompt": prompt,
                "n_prompt": 5 if prompt else 0,
                "drafted": drafted,
                "accepted": accepted,
                "emitted": emitted,
                "draft_ms": 1.0,
                "verify_ms": 2.0,
                "decode_ms": 1.5,
                "other_ms": 0.5,
                "cycle_ms": 3.5,
                "wall_ms": 4.0,
                "text": "x",
            }
        )
    assert from_events.summary() == by_hand.summary()
    quiet = RunStats()
    quiet.add_event({"prompt": False, "drafted": 2, "accepted": 1, "emitted": 2, "text": "ab"}, keep_text=False)
    assert quiet.text == "" and quiet.accepted == 1


def test_a_sum_of_summaries_counts_each_generation_once():
    one, two = RunStats(), RunStats()
    add(one, 0, 0, emitted=1, prompt=True)
    add(one, 4, 3)
    add(two, 0, 0, emitted=1, prompt=True)
    add(two, 2, 0)
    total = RunStats.of_summaries([one.summary(), two.summary()])
    assert total.generations == 2 and total.drafted == 6 and total.accepted == 3
    # each generation's first token belongs to its prompt cycle: (5 + 2 - 2) tokens over 8 ms of cycles
    assert total.tokens_per_s == pytest.approx(5 * 1000.0 / 8.0)
    running = RunStats(generations=0)
    for s in (one.summary(), two.summary()):
        running.add_summary(s)
    assert running.summary() == total.summary()
    assert RunStats(generations=0).tokens_per_s == 0.0
