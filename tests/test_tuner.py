"""The auto-tuner end to end on a small synthetic pair (speed itself is measured in bench/)."""

import threading

import pytest

from engine.core.settings import LoadSettings, SpecSettings
from engine.measure.tuner import TuneCancelled, Tuner
from engine.runtime.client import EngineClient

from .conftest import PROMPTS


@pytest.fixture
def loaded(pair):
    """A worker with the synthetic pair loaded, one thread: (client, its LoadSettings)."""
    load = LoadSettings(pair[0], pair[1], ctx=1024, threads=1)
    with EngineClient() as client:
        client.start()
        client.load(load)
        yield client, load


@pytest.mark.slow
def test_tuner_reports_a_measured_best_with_predictions(loaded):
    client, load = loaded
    lines = []
    tuner = Tuner(client, load, list(PROMPTS), max_tokens=24, budget_s=600, seed=3, k_max=6, progress=lines.append)
    result = tuner.run()
    out = result.to_dict()
    assert out["baseline_tps"] > 0 and out["best"]["measured_tps"] > 0
    assert out["search_ratio"] == round(result.best.measured_tps / result.baseline_tps, 4) and "speedup" not in out
    assert out["beats_baseline"] is result.verdict.above_one  # the paired check decides (test_tuner_verdict.py)
    # the speedup compares like with like: the baseline ran on exactly the best's prompts
    ran = result.best.prompts_run
    assert ran and set(ran) <= set(tuner._baseline)
    tokens = sum(tuner._baseline[p]["tokens_generated"] - 1 for p in ran)  # each first token is the prompt's
    wall = sum(tuner._baseline[p]["wall_ms"] for p in ran)
    assert result.baseline_tps == pytest.approx(tokens * 1000.0 / wall)
    predicted = [r for r in out["candidates"] if r["predicted_tps"]]
    assert predicted and all(r["setting"].startswith("draft-simple") for r in predicted)
    assert sorted(out["verify_ms"]) == [1, 2, 3, 4, 5, 6, 8, 10, 12, 16]
    assert len(out["acceptance_by_position"]) == 8 and 0 < out["acceptance_by_position"][0] <= 1
    # the best was measured on at least as many prompts as anyone else
    assert out["best"]["prompts"] == max(r["prompts"] for r in out["candidates"])
    assert any("round with" in line for line in lines)
    # the model's curve covers every K, not only the candidates that were kept for measuring
    assert sorted(result.predicted_by_k) == list(range(1, 7))
    assert all(
        c.predicted_tps == round(result.predicted_by_k[c.spec.draft_n_max], 3)
        for c in result.candidates
        if c.predicted_tps
    )


def test_same_seed_same_plan():
    a = Tuner(None, LoadSettings("t.gguf"), list(PROMPTS), seed=5)
    b = Tuner(None, LoadSettings("t.gguf"), list(PROMPTS), seed=5)
    c = Tuner(None, LoadSettings("t.gguf"), list(PROMPTS), seed=6)
    assert a.prompts == b.prompts
    assert sorted(a.prompts) == sorted(c.prompts)


def test_a_stop_before_the_first_request_touches_no_engine():
    # client None: any engine request would fail with AttributeError, so a clean TuneCancelled proves none was made
    tuner = Tuner(None, LoadSettings("t.gguf"), list(PROMPTS), should_stop=lambda: True, progress=lambda m: None)
    with pytest.raises(TuneCancelled):
        tuner.run()
    assert tuner.runs == 0


@pytest.mark.slow
def test_stop_between_runs_leaves_the_engine_usable(loaded):
    client, load = loaded
    tuner = Tuner(
        client,
        load,
        list(PROMPTS),
        max_tokens=8,
        seed=1,
        k_max=4,
        progress=lambda m: None,
        should_stop=lambda: tuner.runs >= 3,
    )
    with pytest.raises(TuneCancelled):
        tuner.run()
    assert tuner.runs == 3
    # nothing is left running in the worker: the next request is served at once
    events = list(client.generate(PROMPTS[0], 4, spec={"spec_type": "draft-simple", "draft_n_max": 2}))
    assert events[-1]["event"] == "done"


@pytest.mark.slow
def test_an_engine_cancel_mid_generation_becomes_a_stop(pair):
    """The GUI's Cancel: set the flag and cancel the running generation. The generation ends cancelled,
    not finished, and the tuner stops there."""
    target, draft = pair
    load = LoadSettings(target, draft, ctx=4096, threads=1)
    stop = threading.Event()
    ends: list[dict] = []
    with EngineClient() as client:
        client.start()
        client.load(load)

        def on_event(ev: dict) -> None:
            # on the reader thread: the first cycle of the first generation (a 3000-token baseline)
            if ev["event"] == "cycle" and not stop.is_set():
                stop.set()
                client.cancel()
            elif ev["event"] in ("done", "cancelled"):
                ends.append(ev)

        client.on_event = on_event
        tuner = Tuner(
            client,
            load,
            list(PROMPTS),
            max_tokens=3000,
            seed=1,
            k_max=4,
            progress=lambda m: None,
            should_stop=stop.is_set,
        )
        with pytest.raises(TuneCancelled):
            tuner.run()
    assert stop.is_set() and tuner.runs == 1
    assert [e["event"] for e in ends] == ["cancelled"], "the generation under way was cancelled, not waited for"
    assert 0 < ends[0]["summary"]["tokens_generated"] < 3000


@pytest.mark.slow
def test_a_close_call_is_settled_head_to_head_on_every_prompt(loaded):
    from engine.measure.tuner import Candidate

    client, load = loaded
    lines = []
    tuner = Tuner(client, load, list(PROMPTS), max_tokens=8, seed=1, progress=lines.append)
    order = []
    run = tuner._run
    tuner._run = lambda spec, prompt, baseline=False: order.append(spec.spec_type) or run(spec, prompt, baseline)
    a = Candidate(SpecSettings("ngram-simple", ngram_size_n=3, ngram_size_m=8))
    b = Candidate(SpecSettings("draft-simple", draft_n_max=2))
    tuner._close_call([a, b])
    n = len(PROMPTS)
    assert a.prompts_run == b.prompts_run == tuner.prompts and len(a.measured) == len(b.measured) == n
    # alternating which goes first, so neither always runs on the other's warm-up
    assert order[:4] == ["ngram-simple", "draft-simple", "draft-simple", "ngram-simple"]
    assert tuner.close_call and tuner.runs == 2 * n and "close call" in lines[0]


@pytest.mark.slow
def test_forward_times_take_every_size_in_each_round_in_alternating_order(loaded):
    """The calibration's forward times (engine.measure.forward_times): each round times every size, the order
    reversed every other round, so a slow spell of the machine falls on all sizes alike; each size keeps the
    median of its rounds."""
    from engine.measure.forward_times import forward_times

    client, _ = loaded
    calls: list[list[int]] = []
    real = client.measure

    def recording(which, sizes, **kw):
        calls.append(list(sizes))
        return real(which, sizes, **kw)

    client.measure = recording
    try:
        got = forward_times(client, "target", [1, 2, 4], n_past=32, rounds=3, reps=1)
    finally:
        client.measure = real
    assert calls == [[1, 2, 4], [4, 2, 1], [1, 2, 4]]
    assert set(got) == {1, 2, 4} and all(ms > 0 for ms in got.values())
