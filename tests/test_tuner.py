"""The auto-tuner end to end on a small synthetic pair (speed itself is measured in bench/)."""

from engine.client import EngineClient
from engine.settings import LoadSettings
from engine.tuner import Tuner

from .conftest import PROMPTS


def test_tuner_reports_a_measured_best_with_predictions(pair):
    target, draft = pair
    load = LoadSettings(target, draft, ctx=1024, threads=1)
    with EngineClient() as client:
        client.start()
        client.load(load)
        lines = []
        tuner = Tuner(client, load, list(PROMPTS), max_tokens=24, budget_s=600, seed=3, k_max=6,
                      progress=lines.append)
        result = tuner.run()
    out = result.to_dict()
    assert out["baseline_tps"] > 0 and out["best"]["measured_tps"] > 0
    assert out["speedup"] == round(result.best.measured_tps / result.baseline_tps, 4)
    predicted = [r for r in out["candidates"] if r["predicted_tps"]]
    assert predicted and all(r["setting"].startswith("draft-simple") for r in predicted)
    assert sorted(out["verify_ms"]) == [1, 2, 3, 4, 5, 6, 8, 10, 12, 16]
    assert len(out["acceptance_by_position"]) == 8 and 0 < out["acceptance_by_position"][0] <= 1
    # the best was measured on at least as many prompts as anyone else
    assert out["best"]["prompts"] == max(r["prompts"] for r in out["candidates"])
    assert any("round with" in line for line in lines)


def test_same_seed_same_plan():
    a = Tuner(None, LoadSettings("t.gguf"), list(PROMPTS), seed=5)
    b = Tuner(None, LoadSettings("t.gguf"), list(PROMPTS), seed=5)
    c = Tuner(None, LoadSettings("t.gguf"), list(PROMPTS), seed=6)
    assert a.prompts == b.prompts
    assert sorted(a.prompts) == sorted(c.prompts)
