"""engine.planning.advice.recommend and `spectune recommend / presets`: budgets (NVML stand-in), fits and near-misses,
the ranking and its reasons, and the command line through a subprocess."""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from engine.cli.catalog import register
from engine.models.catalog import CATALOG_DIR, CatalogError, load_catalog
from engine.models.gguf_inspect import inspect_gguf
from engine.models.synthetic import ModelShape, PairSpec, write_pair
from engine.planning.advice.catalog_models import CatalogModels, quant_quality
from engine.planning.advice.model_numbers import model_info_from_numbers
from engine.planning.advice.presets import preset_fits
from engine.planning.advice.recommend import MIN_SPEEDUP, PACE_CAP, RecommendError, expected_speedup, recommend
from engine.planning.constants import ACCEPTANCE_PRIOR
from engine.planning.hardware import probe
from engine.planning.memory.budget import (
    HEADROOM_MIN,
    Budget,
    BudgetError,
    budget_from_hardware,
    budget_from_size,
    headroom,
)
from engine.planning.memory.memory_plan import GpuBudget, plan_memory
from engine.planning.speed.cost_model import leviathan_speedup
from engine.planning.speed.device_speed import DeviceSpeed, gpu_device

from .conftest import run_registered
from .fake_nvml import NVML_ERROR_DRIVER_NOT_LOADED, FakeNVML, h100, rtx4090

ROOT = Path(__file__).resolve().parent.parent
GiB = 2**30


@pytest.fixture(scope="module")
def catalog():
    return load_catalog()


def gpu_budget(gib: float, bandwidth_gb_s: float | None = 1008) -> Budget:
    return budget_from_size(f"{gib}GiB", bandwidth_gb_s)


# -- the constructor from numbers plans exactly like a file -------------------------------------------


def test_a_model_from_numbers_plans_like_the_same_model_from_a_file(tmp_path):
    """Qwen2.5-0.5B's layer shape written as a real GGUF, and the same numbers without a file: llama.cpp's
    plan is identical item by item, on the CPU and with a GPU."""
    shape = ModelShape(n_embd=896, n_layer=2, n_head=14, n_head_kv=2, n_ff=4864, n_ctx_train=32768)
    target, _ = write_pair(tmp_path, PairSpec(shape=shape, dtype="f16"))
    info = inspect_gguf(target)
    numbers = model_info_from_numbers(
        architecture="llama",
        n_layer=2,
        n_embd=896,
        n_head=14,
        n_head_kv=2,
        head_dim=64,
        n_ff=4864,
        n_vocab=info.vocab.n_tokens,
        n_ctx_train=32768,
        tied_embeddings="output.weight" not in {t.name for t in info.tensors},
        weight_type="F16",
    )
    assert numbers.parameter_count == info.parameter_count and numbers.tensor_bytes == info.tensor_bytes
    for gpus in ([], [GpuBudget("CUDA0", 8 * GiB)]):
        from_file, from_numbers = plan_memory(info, 4096, gpus=gpus), plan_memory(numbers, 4096, gpus=gpus)
        key = sorted((i.model, i.kind, i.buffer_type, i.device, i.bytes) for i in from_file.items)
        assert key == sorted((i.model, i.kind, i.buffer_type, i.device, i.bytes) for i in from_numbers.items)


def test_rows_a_quant_cannot_hold_fall_back_as_llama_quantize_does():
    info = model_info_from_numbers(
        architecture="qwen2",
        n_layer=1,
        n_embd=896,
        n_head=14,
        n_head_kv=2,
        head_dim=64,
        n_ff=4864,
        n_vocab=1024,
        n_ctx_train=4096,
        weight_type="Q4_K",
        bits_per_weight=4.9,
    )
    types = {t.name: t.type_name for t in info.tensors}
    # 896 is not a whole number of 256-element Q4_K blocks: Q5_0 (src/llama-quant.cpp); 4864 is
    assert types["blk.0.attn_q.weight"] == "Q5_0" and types["blk.0.ffn_down.weight"] == "Q4_K"
    assert types["blk.0.attn_norm.weight"] == "F32"


# -- budgets ------------------------------------------------------------------------------------------


def test_a_given_size_is_one_gpu_with_headroom():
    b = budget_from_size("12GiB")
    assert b.kind == "gpu" and b.gpus == (GpuBudget("CUDA0", 12 * GiB),) and b.bandwidth_bytes_per_s is None
    assert b.headroom_bytes == int(12 * GiB * 0.05) and b.usable_bytes == 12 * GiB - b.headroom_bytes
    assert headroom(4 * GiB) == HEADROOM_MIN
    with pytest.raises(BudgetError, match="cannot read the size '12 apples'"):
        budget_from_size("12 apples")
    with pytest.raises(BudgetError, match="leaves nothing"):
        budget_from_size("100M")


def test_auto_reads_free_vram_and_bandwidth_from_nvml():
    b = budget_from_hardware(FakeNVML([rtx4090(0), h100(1)]))
    assert b.kind == "gpu"
    assert b.gpus == (GpuBudget("CUDA0", 23 * GiB), GpuBudget("CUDA1", 80 * GiB - 512 * 2**20))
    # the slower GPU sets the pace of a split model: the RTX 4090's 1008 GB/s, not the H100's 3.35 TB/s
    assert b.bandwidth_bytes_per_s == pytest.approx(1008.1e9, rel=1e-3)
    assert "NVIDIA GeForce RTX 4090" in b.source


def test_auto_without_a_driver_falls_back_to_ram():
    b = budget_from_hardware(FakeNVML(init_error=NVML_ERROR_DRIVER_NOT_LOADED))
    assert b.kind == "cpu" and b.gpus == () and b.ram_bytes and b.ram_bytes > 0
    assert "no NVIDIA driver" in b.source and b.usable_bytes == b.ram_bytes - headroom(b.ram_bytes)


# -- the cost model ------------------------------------------------------------------------------------


def test_expected_speedup_is_leviathans_best_k():
    speedup, k, alpha = expected_speedup(0.155, 0.0)
    assert alpha == ACCEPTANCE_PRIOR  # the speed model's prior: one prior for every prediction
    assert speedup == max(leviathan_speedup(alpha, kk, 0.155) for kk in range(1, 9))
    assert speedup == pytest.approx(leviathan_speedup(alpha, k, 0.155))
    # Llama 3.1 8B Q8_0 + 3.2 1B Q8_0: the prior lands near the 1.71x llama.cpp issue 5877 measured
    assert 1.5 < speedup < 1.9
    # a coarse draft quant agrees less often; a costly draft gains nothing
    assert expected_speedup(0.155, 0.5)[0] < speedup
    assert expected_speedup(0.9, 0.0)[0] < MIN_SPEEDUP


def test_quant_quality_comes_from_the_table_or_is_interpolated(catalog):
    assert quant_quality(catalog, "Q4_K_M") == (0.1754, False)
    ppl, estimated = quant_quality(catalog, "IQ4_XS")  # 4.43 bits: between Q3_K_L (4.31) and Q4_K_S (4.68)
    assert estimated and 0.2689 < ppl < 0.5562


# -- fits, near-misses and the ranking --------------------------------------------------------------------


@pytest.mark.slow
def test_recommendations_fit_with_headroom_and_carry_their_plan(catalog):
    budget = gpu_budget(24)
    r = recommend(catalog, budget, ctx=8192)
    assert r.recommended, "a 24 GiB GPU runs something"
    models = CatalogModels(catalog)
    for c in r.recommended:
        totals = c.plan.device_totals()
        assert totals["CUDA0"] == c.needed_bytes <= budget.usable_bytes
        # screening adds the two models planned alone; the shown plan is llama.cpp's plan of the pair
        assert (
            models.pair_totals(
                budget, 8192, catalog.model(c.target.model), c.target.quant, catalog.model(c.draft.model), c.draft.quant
            )
            == totals
        )
        assert c.plan.n_ctx == 8192 and {i.model for i in c.plan.items} == {"target", "draft"}
        assert catalog.tokenizer_of(c.target.model) == catalog.tokenizer_of(c.draft.model)
        assert c.speedup >= MIN_SPEEDUP
    scores = [c.score for c in r.recommended]
    assert scores == sorted(scores, reverse=True)
    assert all(c.why_not for c in r.near_misses)


def test_every_rank_explains_itself(catalog):
    r = recommend(catalog, gpu_budget(24), ctx=8192, family="qwen2.5-coder")
    best = r.recommended[0]
    assert best.score == pytest.approx(sum(best.score_parts.values()), abs=0.01)
    assert best.score_parts["size"] == pytest.approx(10 * math.log2(best.params / 1e9), abs=0.01)
    assert best.score_parts["speed"] == pytest.approx(10 * math.log2(best.speedup), abs=0.01)
    reasons = "\n".join(best.reasons())
    assert "B-parameter target" in reasons and "perplexity on Llama-3-8B" in reasons
    assert f"K={best.draft_n_max}" in reasons and "bytes per token" in reasons and "tokens/s" in reasons
    # the published measurements of the pair come along
    pub = [c for c in r.recommended if c.draft.model == "qwen2.5-coder-1.5b-instruct"]
    assert all(c.published and c.published[0]["source"].startswith("https://") for c in pub)
    # the same 32B target: a finer quant outranks a coarser one when both fit
    by_quant = {c.target.quant: c for c in r.recommended if c.target.model == "qwen2.5-coder-32b-instruct"}
    assert by_quant["Q4_K_M"].score > by_quant["Q3_K_M"].score
    assert r.recommended.index(by_quant["Q4_K_M"]) < r.recommended.index(by_quant["Q3_K_M"])


def test_the_fit_boundary_and_a_near_miss(catalog):
    """A budget sized to one candidate's plan plus headroom fits it; a MiB less makes it a near-miss whose
    reason says by how much."""
    probe = recommend(catalog, gpu_budget(24), ctx=8192, family="qwen2.5-coder", limit=1).recommended[0]
    need = probe.needed_bytes
    for free in (need + headroom(need) * 2, need):
        b = Budget((GpuBudget("CUDA0", free),), source="test")
        if free == need:
            r = recommend(catalog, b, ctx=8192, family="qwen2.5-coder")
            miss = next(c for c in r.near_misses if c.label == probe.label)
            assert not miss.fits_memory and miss.needed_bytes == need
            assert "more than the" in miss.why_not and "usable" in miss.why_not
            assert probe.label not in [c.label for c in r.recommended]
        else:
            fits = [c for c in recommend(catalog, b, ctx=8192, family="qwen2.5-coder").recommended]
            assert probe.label in [c.label for c in fits]


def test_a_near_miss_says_when_a_shorter_context_fits(catalog):
    r = recommend(catalog, gpu_budget(12), ctx=16384, family="qwen2.5-coder")
    shorter = [c for c in r.near_misses if "fits with --ctx" in c.why_not]
    assert shorter
    c = shorter[0]
    ctx = int(c.why_not.rsplit("--ctx ", 1)[1])
    assert ctx in (8192, 4096)
    again = recommend(catalog, gpu_budget(12), ctx=ctx, family="qwen2.5-coder", limit=50)
    assert c.label in [x.label for x in again.recommended]


def test_context_longer_than_trained_and_models_without_a_draft_are_named(catalog):
    r = recommend(catalog, gpu_budget(48), ctx=16384)
    left = "\n".join(r.left_out)
    assert "gemma-2-9b-it: trained for 8192 tokens of context, less than the 16384 asked" in left
    assert "phi-4: no other model with its tokenizer (phi-4)" in left
    assert not any(c.target.model.startswith("gemma-2") for c in r.recommended + r.near_misses)
    assert not any(c.target.bundled for c in r.recommended), "the demo pair is not a recommendation"


def test_a_draft_that_costs_too_much_is_a_near_miss_with_its_reason(tmp_path):
    """A toy family whose only draft is an F16 model for a Q3 target: it fits but cannot pay for itself."""
    root = tmp_path / "catalog"
    shutil.copytree(CATALOG_DIR, root)

    def toy(mid, layers, quants):
        return {
            "id": mid,
            "name": mid,
            "arch": {
                "llama_arch": "llama",
                "n_layer": layers,
                "n_embd": 2048,
                "n_head": 16,
                "n_head_kv": 8,
                "head_dim": 128,
                "n_ff": 8192,
                "n_vocab": 32000,
                "n_ctx_train": 8192,
                "tied_embeddings": True,
                "params": 1,
            },
            "gguf": {"repo": "toy/" + mid + "-GGUF", "file_pattern": mid + "-{quant}.gguf", "quants": quants},
        }

    target, draft = toy("toy-big", 30, ["Q3_K_M"]), toy("toy-small", 7, ["F16"])
    for m in (target, draft):
        m["arch"]["params"] = model_info_from_numbers(
            architecture="llama",
            **{
                k: v
                for k, v in m["arch"].items()
                if k in ("n_layer", "n_embd", "n_head", "n_head_kv", "head_dim", "n_ff", "n_vocab", "n_ctx_train")
            },
        ).parameter_count
    (root / "families" / "toy.json").write_text(
        json.dumps({"format": 1, "family": {"id": "toy", "name": "Toy", "tokenizer": "toy"}, "models": [target, draft]})
    )
    tokenizers = json.loads((root / "tokenizers.json").read_text(encoding="utf-8"))
    tokenizers["tokenizers"].append({"id": "toy", "name": "Toy", "vocab_gguf": None})
    (root / "tokenizers.json").write_text(json.dumps(tokenizers), encoding="utf-8")
    catalog = load_catalog(root)
    r = recommend(catalog, gpu_budget(24), ctx=4096, family="toy")
    assert r.recommended == []
    (miss,) = r.near_misses
    assert miss.fits_memory and miss.speedup < MIN_SPEEDUP
    assert "not worth its memory" in miss.why_not and "of the target per token" in miss.why_not


def test_a_cpu_budget_plans_everything_in_ram(catalog):
    b = Budget(ram_bytes=16 * GiB, source="test")
    r = recommend(catalog, b, ctx=4096, limit=3)
    assert r.recommended
    for c in r.recommended:
        assert set(c.plan.device_totals()) == {"CPU"} and c.needed_bytes <= b.usable_bytes
        assert c.tokens_per_s_bound is None, "no bandwidth, no tokens/s figure"


# -- ranked by the speed the device gives ---------------------------------------------------------------

# this project's 2-core VM as its CPU probe measured it; an RTX 4090 as the GPU table and NVML see it
SLOW_CPU = DeviceSpeed("CPU", bandwidth_bytes_per_s=14e9, flops_per_s=72e9, overhead_ms=0.5, source="test")


@pytest.mark.slow
def test_on_a_slow_cpu_big_targets_are_near_misses_that_say_how_slow(catalog):
    b = Budget(ram_bytes=23 * GiB, source="test")
    r = recommend(catalog, b, ctx=4096, device=SLOW_CPU, speed_floor=5)
    assert r.recommended, "small targets reach 5 tokens/s on 2 cores"
    for c in r.recommended:
        assert c.tokens_per_s >= 5 and c.prediction.device == SLOW_CPU
        # what a token reads decides: dense targets under 8B, and mixtures of experts that use about 3B a token
        assert (c.active_params or c.params) < 8e9
    slow = [c for c in r.near_misses if "tokens/s here" in c.why_not]
    assert slow and all(c.fits_memory and c.tokens_per_s < 5 for c in slow)
    assert re.search(r"fits, but about [\d.]+ tokens/s here, under the floor of 5 tokens/s", slow[0].why_not)
    # the old ranking (no device) put a 32B target first: it fits in 23 GiB of RAM
    assert recommend(catalog, b, ctx=4096).recommended[0].params > 30e9
    # no floor: everything that fits is ranked, the slowest last among equals
    assert len(recommend(catalog, b, ctx=4096, device=SLOW_CPU, speed_floor=0, limit=50).recommended) > len(
        r.recommended
    )


def test_where_verifying_costs_more_than_the_draft_saves_the_target_runs_alone(catalog):
    """A compute-bound CPU: verifying K + 1 tokens costs nearly K + 1 times one, so no K pays. The pair is
    still ranked by its target's plain speed, says so, and its download leaves the draft out."""
    b = Budget(ram_bytes=23 * GiB, source="test")
    # 20: the 30B-class mixtures of experts, run alone, fill the first 11 places
    r = recommend(catalog, b, ctx=4096, device=SLOW_CPU, speed_floor=5, limit=20)
    alone = [c for c in r.recommended if not c.uses_draft]
    assert alone and any(c.uses_draft for c in r.recommended), "a heavier quant still gains at K=1 on this roofline"
    c = alone[0]
    assert not c.uses_draft and c.prediction.best_k is None and c.speedup < 1
    assert c.tokens_per_s == pytest.approx(c.plain_tokens_per_s)
    assert "without the draft" in c.speed_text()
    assert any("speculation does not pay here" in reason for reason in c.reasons())
    d = c.to_dict()
    assert d["uses_draft"] is False and all(c.draft.filename not in cmd for cmd in d["pull"])


@pytest.mark.slow
def test_on_a_gpu_speculation_pays_and_the_speed_points_stop_at_the_cap(catalog):
    device = gpu_device(probe(FakeNVML([rtx4090(0)])))
    r = recommend(catalog, gpu_budget(23), ctx=8192, device=device)
    top = r.recommended[0]
    assert top.uses_draft and top.prediction.best_k == top.draft_n_max
    assert top.speedup > 1.3 and top.tokens_per_s == pytest.approx(top.plain_tokens_per_s * top.speedup)
    for c in r.recommended:
        pace = min(c.tokens_per_s, PACE_CAP * 10)
        assert c.score_parts["speed"] == pytest.approx(10 * math.log2(pace / 10), abs=0.01)
    # a floor above what any pair reaches leaves nothing recommended and the fastest near-misses first
    fast = recommend(catalog, gpu_budget(23), ctx=8192, device=device, speed_floor=10_000)
    assert not fast.recommended
    speeds = [c.tokens_per_s for c in fast.near_misses]
    assert speeds == sorted(speeds, reverse=True)
    with pytest.raises(RecommendError, match="speed floor must be 0"):
        recommend(catalog, gpu_budget(23), device=device, speed_floor=-1)


def test_moe_targets_are_recommended_whole_where_they_fit_and_with_experts_in_ram_where_not(catalog):
    """Qwen3-30B-A3B at Q4_K_M: whole on a 24 GiB GPU; on 16 GiB llama.cpp's default does not fit, so the
    recommendation keeps the experts of its first layers in RAM and says which flag does it."""
    device = gpu_device(probe(FakeNVML([rtx4090(0)])))
    whole = recommend(catalog, gpu_budget(24), ctx=8192, family="qwen3", device=device, limit=50)
    moe = {c.target.quant: c for c in whole.recommended if c.target.model == "qwen3-30b-a3b-instruct-2507"}
    assert moe["Q4_K_M"].placement is None and moe["Q4_K_M"].active_params
    assert any("mixture of experts" in reason for reason in moe["Q4_K_M"].reasons())
    # the MoE target reads about 3B parameters a token: predicted faster than the dense 32B on the same GPU
    dense = next(c for c in whole.recommended if c.target.model == "qwen3-32b" and c.target.quant == "Q4_K_M")
    assert moe["Q4_K_M"].plain_tokens_per_s > 2 * dense.plain_tokens_per_s
    placed = recommend(catalog, gpu_budget(16), ctx=8192, family="qwen3", device=device, limit=50)
    c = next(c for c in placed.recommended if c.target.model == "qwen3-30b-a3b" and c.target.quant == "Q4_K_M")
    assert c.fits_memory and c.placement is not None and c.placement.n_cpu_moe > 0
    assert c.placement_flags()[:2] == ["-ncmoe", str(c.placement.n_cpu_moe)]
    assert c.to_dict()["placement"]["n_cpu_moe"] == c.placement.n_cpu_moe and c.to_dict()["active_params"]
    assert c.plan.device_totals()["CUDA0"] == c.needed_bytes <= c.usable_bytes


def test_experts_in_ram_need_the_ram_to_hold_them(catalog):
    """--vram 16GiB --ram SIZE: Qwen3-30B-A3B at Q4_K_M fits with the experts of its first layers in RAM when
    the RAM holds them; with too little RAM it is a near-miss that says so, and with --vram auto the RAM is
    this machine's (the stand-in's report)."""
    device = gpu_device(probe(FakeNVML([rtx4090(0)])))

    def qwen3_30b(budget):
        r = recommend(catalog, budget, ctx=8192, family="qwen3", device=device, limit=50, near_miss_limit=50)
        return next(
            c for c in r.recommended + r.near_misses if c.target.model == "qwen3-30b-a3b" and c.target.quant == "Q4_K_M"
        )

    roomy = qwen3_30b(budget_from_size("16GiB", ram="64GiB"))
    assert roomy.fits_memory and roomy.placement is not None and roomy.placement.n_cpu_moe > 0
    assert roomy.host_bytes == roomy.plan.device_totals()["CPU"] > 2 * 2**30
    assert any(r.startswith("RAM: ") for r in roomy.reasons())
    assert roomy.to_dict()["host_bytes"] == roomy.host_bytes
    short = qwen3_30b(budget_from_size("16GiB", ram="2GiB"))
    assert not short.fits_memory and "in RAM, more than the" in short.why_not
    unknown = qwen3_30b(budget_from_size("16GiB"))  # no --ram: not checked, as before
    assert unknown.fits_memory and unknown.ram_usable_bytes is None
    # --vram auto: the RAM the hardware report reads
    auto = budget_from_hardware(FakeNVML([rtx4090(0)]))
    assert auto.ram_bytes == probe(FakeNVML([rtx4090(0)])).cpu.ram_available_bytes
    assert "RAM" in auto.describe()


def test_a_target_with_an_mtp_head_is_also_predicted_drafting_for_itself(catalog):
    """Qwen3.5 carries an MTP block: beside its pair with the 0.8B draft, each candidate says what draft-mtp
    alone is predicted to give on this GPU (the block and the output head as the draft, no replay)."""
    device = gpu_device(probe(FakeNVML([rtx4090(0)])))
    rec = recommend(catalog, gpu_budget(24), ctx=8192, family="qwen3.5", device=device, limit=50)
    c = next(c for c in rec.recommended if c.target.model == "qwen3.5-27b")
    assert c.mtp_head and c.mtp_prediction is not None and c.mtp_prediction.method == "draft-mtp"
    assert c.mtp_prediction.plain_tokens_per_s == pytest.approx(c.prediction.plain_tokens_per_s)
    best = max(c.mtp_prediction.speedup_by_k.values())
    assert 1.0 < best < 4.0
    assert any(f"predicted x{best:.2f}" in r for r in c.reasons())
    assert c.to_dict()["mtp_prediction"]["method"] == "draft-mtp"


def test_unknown_family_and_bad_context(catalog):
    with pytest.raises(CatalogError, match="no family 'qwen9'.*qwen2.5-coder"):
        recommend(catalog, gpu_budget(24), family="qwen9")
    with pytest.raises(RecommendError, match="--ctx must be 1 or more"):
        recommend(catalog, gpu_budget(24), ctx=0)


def test_presets_report_sizes_and_fit(catalog):
    fits = {f.name: f for f in preset_fits(catalog, gpu_budget(12), ctx=8192)}
    assert set(fits) == {p.name for p in catalog.presets}
    small, big = fits["qwen2.5-coder-7b+0.5b-q4km"], fits["qwen2.5-coder-32b+0.5b-q4km"]
    assert small.fits is True and big.fits is False and "over" in big.why
    assert 4.5e9 < small.download_bytes < 5.6e9 and small.sizes_estimated
    assert fits["spectune-demo-f16"].fits is True
    assert all(f.fits is None for f in preset_fits(catalog, None))


@pytest.mark.slow
def test_a_preset_fits_the_gpu_its_description_names(catalog):
    """ "for 24 GB GPUs" means the pair fits 24 GiB with headroom at the default context."""
    claims = {
        p.name: int(m.group(2) or m.group(1))
        for p in catalog.presets
        if (m := re.search(r"(\d+)(?:-(\d+))? GB", p.description))
    }
    assert len(claims) >= 10
    assert {8, 12, 16, 24, 32} <= set(claims.values()), "a preset for each common GPU size"
    descriptions = {p.name: p.description for p in catalog.presets}
    placed = []
    for name, gib in claims.items():
        fit = next(f for f in preset_fits(catalog, gpu_budget(gib)) if f.name == name)
        assert fit.fits, f"{name}: {fit.why}"
        if fit.placement is not None:
            # a preset that fits only placed otherwise says so, and what it needs besides the GPU
            where = "system RAM" if fit.placement.n_cpu_moe else "CPU"
            assert where in descriptions[name], f"{name}: fits only with {fit.placement.describe()}"
            assert fit.to_dict()["placement_flags"] == fit.placement.flags() and fit.placement.describe() in fit.why
            placed.append((name, fit.placement))
    # the MoE presets for small GPUs keep experts in RAM (-ncmoe), more of them on the smaller card
    ncmoe = {name: p.n_cpu_moe for name, p in placed if p.n_cpu_moe}
    assert ncmoe["qwen3-30b-a3b+0.6b-q4km"] > ncmoe["qwen3-coder-30b-a3b+0.6b-q3km"] > 0


# -- the command line ----------------------------------------------------------------------------------


def run_cli(args: list[str], capsys, nvml=None) -> tuple[int, str, str]:
    return run_registered(register, args, capsys, nvml=nvml)


def test_cli_auto_uses_nvml(capsys):
    rc, out, _ = run_cli(["recommend", "--json", "--family", "qwen3", "--limit", "2"], capsys, FakeNVML([rtx4090(0)]))
    assert rc == 0
    d = json.loads(out)
    assert d["budget"]["gpus"] == [{"name": "CUDA0", "free_bytes": 23 * GiB}]
    assert len(d["recommendations"]) == 2
    assert d["device"]["name"] == "CUDA0 (NVIDIA GeForce RTX 4090)" and d["speed_floor"] == 10
    for c in d["recommendations"]:
        assert c["plan"]["totals"]["by_device"]["CUDA0"] == c["needed_bytes"]
        # the speed model's numbers for every pair, as `spectune predict --json` prints them
        p = c["prediction"]
        assert set(p) >= {"plain_tokens_per_s", "verify_ms_by_batch", "draft_ms", "speedup_by_k", "best_k", "basis"}
        assert p["basis"] == "prior" and c["plain_tokens_per_s"] == pytest.approx(p["plain_tokens_per_s"], abs=0.01)
        assert c["tokens_per_s"] >= 10 and c["tokens_per_s_bound"] is None
    rc, out, _ = run_cli(["presets", "--ctx", "4096"], capsys, FakeNVML([rtx4090(0)]))
    assert rc == 0 and "qwen2.5-coder-32b+0.5b-q4km" in out and "fits" in out


def spectune(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run(
        [sys.executable, "-m", "engine.cli", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )


@pytest.mark.slow
def test_cli_recommend_json_through_a_subprocess():
    p = spectune(
        "recommend", "--vram", "24GiB", "--bandwidth", "936", "--family", "qwen2.5-coder", "--ctx", "8192", "--json"
    )
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    assert d["ctx"] == 8192 and d["family"] == "qwen2.5-coder"
    assert d["budget"]["usable_bytes"] == 24 * GiB - int(24 * GiB * 0.05)
    assert d["recommendations"]
    for c in d["recommendations"]:
        assert c["target"]["model"].startswith("qwen2.5-coder-")
        assert c["needed_bytes"] <= d["budget"]["usable_bytes"] and c["fits_memory"]
        assert set(c["score_parts"]) == {"size", "quant", "speed"} and c["reasons"]
        assert c["target"]["repo"] and c["target"]["filename"].endswith(".gguf")
        assert c["plan"]["n_ctx"] == 8192
        assert c["prediction"]["speedup_by_k"] and c["tokens_per_s"] > 0  # --bandwidth: a GPU of that speed
    assert all("why_not" in c for c in d["near_misses"])


@pytest.mark.slow
def test_cli_presets_json_through_a_subprocess():
    p = spectune("presets", "--vram", "12GiB", "--json")
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    by_name = {x["name"]: x for x in d["presets"]}
    assert by_name["qwen2.5-coder-7b+0.5b-q4km"]["fits"] is True
    assert by_name["llama-3.3-70b+3.2-1b-q4km"]["fits"] is False
    assert all(x["download_bytes"] > 0 for x in d["presets"])


@pytest.mark.slow
@pytest.mark.parametrize(
    "args, message",
    [
        (["recommend", "--vram", "12 apples"], "cannot read the size '12 apples'"),
        (["recommend", "--vram", "24GiB", "--family", "qwen9"], "no family 'qwen9' in the catalog; known:"),
        (["recommend", "--vram", "24GiB", "--ctx", "0"], "--ctx must be 1 or more"),
        (["presets", "--vram", "24GiB", "--catalog", "/nonexistent/catalog"], "catalog folder missing"),
        (["recommend", "--ram", "32GiB"], "--ram goes with --vram SIZE"),
        (["recommend", "--vram", "24GiB", "--ram", "100MiB"], "--ram 100MiB leaves nothing after"),
    ],
)
def test_cli_errors_are_one_line(args, message):
    p = spectune(*args)
    assert p.returncode == 2
    assert p.stdout == "" and "Traceback" not in p.stderr
    assert p.stderr.count("\n") == 1 and p.stderr.startswith("spectune: error: ") and message in p.stderr


@pytest.mark.slow
def test_a_workload_set_sets_the_acceptance_the_pairs_are_predicted_at(catalog, capsys):
    """`spectune recommend --workload SET`: the speed model's prior for that kind of text (summaries restate
    their source and are drafted more easily than free writing), lowered for the draft's quant as always."""
    from engine.planning.speed.speed_model import ACCEPTANCE_PRIORS

    device = gpu_device(probe(FakeNVML([rtx4090(0)])))
    by_set = {
        w: recommend(catalog, gpu_budget(24), family="qwen2.5-coder", device=device, workload=w)
        for w in ("creative", "summarization")
    }
    first = by_set["creative"].recommended[0]
    same = next(c for c in by_set["summarization"].recommended if (c.target, c.draft) == (first.target, first.draft))
    assert first.acceptance_prior <= ACCEPTANCE_PRIORS["creative"]
    assert same.acceptance_prior - first.acceptance_prior == pytest.approx(
        ACCEPTANCE_PRIORS["summarization"] - ACCEPTANCE_PRIORS["creative"]
    )
    assert same.speedup > first.speedup
    with pytest.raises(RecommendError, match="no workload set 'poetry'; the shipped ones: code-completion"):
        recommend(catalog, gpu_budget(24), workload="poetry")
    code, out, err = run_cli(["recommend", "--vram", "24GiB", "--workload", "summarization", "--json"], capsys)
    assert code == 0, err
    assert json.loads(out)["recommendations"][0]["acceptance_prior"] <= ACCEPTANCE_PRIORS["summarization"]
