"""specrt through ctypes, in process: losslessness, counting, knobs between cycles."""

from __future__ import annotations

import pytest

from engine.core.settings import LoadSettings, SamplingSettings, SpecSettings
from engine.runtime.binding import Engine, SpecrtError

from .conftest import PROMPTS

GREEDY = SamplingSettings(temp=0.0)
NGRAM = dict(ngram_size_n=2, ngram_size_m=8, ngram_mod_n_match=3, ngram_mod_n_min=1, ngram_mod_n_max=8)


@pytest.fixture(scope="module")
def engine(pair):
    target, draft = pair
    with Engine(LoadSettings(target, draft, ctx=1024)) as e:
        yield e


def run(
    engine: Engine, spec: SpecSettings, prompt: str, n: int = 96, baseline: bool = False, between=None
) -> tuple[list[int], list]:
    engine.set_spec(spec)
    engine.set_sampling(GREEDY)
    engine.begin(prompt, n, baseline)
    tokens, cycles = [], []
    while (c := engine.step()) is not None:
        tokens += c.tokens
        cycles.append(c)
        if between:
            between(engine, c)
    return tokens, cycles


@pytest.mark.parametrize(
    "spec_type",
    ["draft-simple", "ngram-simple", "ngram-mod", "ngram-map-k", "ngram-simple,draft-simple", "ngram-mod,draft-simple"],
)
def test_speculation_is_lossless_at_temperature_zero(engine, spec_type):
    drafted = 0
    for prompt in PROMPTS:
        base, _ = run(engine, SpecSettings("none"), prompt, baseline=True)
        spec, cycles = run(engine, SpecSettings(spec_type, draft_n_max=4, **NGRAM), prompt)
        assert spec == base, f"{spec_type} changed the text for {prompt!r}"
        drafted += sum(c.drafted for c in cycles)
    assert drafted > 0, f"{spec_type} never drafted, so the comparison proves nothing"


def test_identical_draft_accepts_everything(identical_pair):
    target, draft = identical_pair
    with Engine(LoadSettings(target, draft, ctx=512)) as e:
        _, cycles = run(e, SpecSettings("draft-simple", draft_n_max=5), PROMPTS[0], n=64)
    gen = [c for c in cycles if not c.is_prompt]
    assert all(c.accepted == c.drafted for c in gen)
    assert all(c.drafted == 5 for c in gen[:-2])  # the last cycles are capped by the token budget
    assert sum(c.emitted for c in cycles) == 64


def test_cycle_accounting(engine):
    tokens, cycles = run(engine, SpecSettings("draft-simple", draft_n_max=4), PROMPTS[1], n=80)
    assert cycles[0].is_prompt and cycles[0].drafted == 0 and cycles[0].emitted == 1
    assert [c.index for c in cycles] == list(range(len(cycles)))
    for c in cycles[1:]:
        assert 0 <= c.accepted <= c.drafted <= 4
        # every cycle emits the accepted draft tokens plus one from the target (unless the budget ends it)
        assert c.emitted == c.accepted + 1 or c is cycles[-1]
        assert c.cycle_ms >= c.draft_ms + c.verify_ms - 1e-6
        assert c.verify_ms >= c.decode_ms > 0
    assert len(tokens) == 80
    rates = [c.accepted / c.drafted for c in cycles[1:] if c.drafted]
    assert 0 < sum(rates) / len(rates) < 1, "the default synthetic pair should disagree sometimes"


def test_k_change_is_used_by_the_next_cycle(engine):
    seen = []

    def knob(e, c):
        seen.append(c.draft_n_max)
        if c.index == 5:
            e.set_spec(SpecSettings("draft-simple", draft_n_max=1))

    _, cycles = run(engine, SpecSettings("draft-simple", draft_n_max=6), PROMPTS[2], n=64, between=knob)
    assert [c.draft_n_max for c in cycles[1:6]] == [6] * 5
    assert all(c.draft_n_max == 1 and c.drafted <= 1 for c in cycles[6:])
    assert cycles[6].settings_epoch == cycles[5].settings_epoch + 1


def test_method_switch_mid_run_stays_lossless(engine):
    """ngram-only for a while (the draft model sits idle), then draft-simple: the draft catches up."""
    base, _ = run(engine, SpecSettings("none"), PROMPTS[3], baseline=True)

    def switch(e, c):
        if c.index == 8:
            e.set_spec(SpecSettings("draft-simple", draft_n_max=3))
        if c.index == 20:
            e.set_spec(SpecSettings("ngram-mod", **NGRAM))

    spec, cycles = run(engine, SpecSettings("ngram-simple", **NGRAM), PROMPTS[3], between=switch)
    assert spec == base
    assert any(c.drafted for c in cycles[9:21])


def test_baseline_flag_ignores_spec_settings(engine):
    _, cycles = run(engine, SpecSettings("draft-simple", draft_n_max=4), PROMPTS[0], baseline=True)
    assert sum(c.drafted for c in cycles) == 0


def test_invalid_settings_are_refused_with_a_reason(engine):
    with pytest.raises(SpecrtError, match="draft_n_max"):
        engine.set_spec(SpecSettings("draft-simple", draft_n_max=1000))
    with pytest.raises(SpecrtError, match="unknown speculative type"):
        engine.set_spec(SpecSettings("draft-fancy"))
    with pytest.raises(SpecrtError, match="sampling"):
        engine.set_sampling(SamplingSettings(top_p=0.0))


def test_step_without_begin_is_a_state_error(pair):
    target, draft = pair
    with Engine(LoadSettings(target, draft, ctx=256)) as e:
        with pytest.raises(SpecrtError) as exc:
            e.step()
        assert exc.value.kind == "bad_state"


def test_prompt_longer_than_context(pair):
    target, _ = pair
    with Engine(LoadSettings(target, None, ctx=64)) as e:
        e.set_spec(SpecSettings("none"))
        e.begin("the value " * 400, 8)  # llama.cpp pads tiny contexts up to 256
        with pytest.raises(SpecrtError, match="does not fit the context") as exc:
            e.step()
        assert exc.value.kind == "context_full"


def test_cancel_stops_the_generation(engine):
    engine.set_spec(SpecSettings("draft-simple", draft_n_max=3))
    engine.begin(PROMPTS[0], 500)
    assert engine.step() is not None
    engine.cancel()
    with pytest.raises(SpecrtError) as exc:
        engine.step()
    assert exc.value.kind == "cancelled"
    # the engine is usable again afterwards
    tokens, _ = run(engine, SpecSettings("none"), PROMPTS[0], n=8, baseline=True)
    assert len(tokens) == 8


def test_tokenize_roundtrip_and_memory(engine):
    ids = engine.tokenize("def the value", add_special=False)
    assert engine.detokenize(ids) == " def the value" or engine.detokenize(ids).strip() == "def the value"
    assert engine.tokenize("x")[0] == 1  # BOS added
    mem = engine.memory()
    models = {m["model"] for m in mem}
    assert models == {"target", "draft"}
    assert sum(m["model_bytes"] for m in mem if m["model"] == "target") > 0
    assert sum(m["context_bytes"] for m in mem) > 0
    with pytest.raises(SpecrtError, match="outside the vocabulary"):
        engine.detokenize([10**6])


def test_incompatible_vocab_is_refused_at_load(incompatible_pair):
    target, draft = incompatible_pair
    with pytest.raises(SpecrtError, match="vocab") as exc:
        Engine(LoadSettings(target, draft, ctx=256))
    assert exc.value.kind == "incompatible"


def test_draft_type_without_draft_model(pair):
    target, _ = pair
    with Engine(LoadSettings(target, None, ctx=256)) as e:
        with pytest.raises(SpecrtError, match="needs a"):
            e.set_spec(SpecSettings("draft-simple"))
        e.set_spec(SpecSettings("ngram-simple", **NGRAM))  # n-gram methods need no draft
