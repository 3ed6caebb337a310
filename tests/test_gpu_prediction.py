"""Predicting for a GPU the user does not have and a model not downloaded (issue 49): the card table matched
forgivingly, described machines and models, the fitted GPU model's form, and the command line that uses them."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

from engine.models.catalog import load_catalog
from engine.planning.advice.named_models import NamedModelError, described, resolve
from engine.planning.speed.device_speed import gpu_device
from engine.planning.speed.gpu_speed import FAMILIES, GpuFit, family, load_fit
from engine.planning.speed.gpu_table import GpuTableError, described_report, find_gpu
from engine.planning.speed.model_cost import model_cost
from engine.planning.speed.speed_model import predict

ROOT = Path(__file__).resolve().parent.parent


def spectune(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "engine.cli", *args], cwd=ROOT, capture_output=True, text=True, timeout=300
    )


@pytest.mark.parametrize("query", ["4090", "RTX 4090", "rtx-4090 24GB", "NVIDIA GeForce RTX 4090", "RTX_4090"])
def test_a_card_is_found_however_it_is_typed(query):
    assert find_gpu(query).name == "NVIDIA GeForce RTX 4090"


def test_the_longest_name_wins_and_memory_picks_a_variant():
    assert find_gpu("4070 Ti").name == "NVIDIA GeForce RTX 4070 Ti"
    assert find_gpu("RTX 4070").name == "NVIDIA GeForce RTX 4070"
    assert find_gpu("4060 Ti 16GB").vram_gb == 16 and find_gpu("4060 Ti 8 GB").vram_gb == 8
    assert find_gpu("NVIDIA H100 80GB HBM3").bandwidth_gb_s == 3350  # NVML's name for the SXM card


@pytest.mark.parametrize(("query", "named"), [("A100", "A100 80GB SXM"), ("H100", "H100 PCIe"), ("4060 Ti", "16GB")])
def test_a_name_sold_in_several_forms_asks_which(query, named):
    with pytest.raises(GpuTableError, match="fits several GPUs") as e:
        find_gpu(query)
    assert named in str(e.value)


def test_an_unknown_card_lists_what_the_table_knows():
    with pytest.raises(GpuTableError, match="no GPU in SpecTune's table matches 'Voodoo 5'.*RTX 4090"):
        find_gpu("Voodoo 5")


def test_a_described_machine_is_what_nvml_would_report():
    report = described_report(find_gpu("RTX 3090"), count=2)
    assert [g.llama_name for g in report.gpus] == ["CUDA0", "CUDA1"]
    assert report.gpus[0].memory_free_bytes == 24 * 2**30
    assert report.gpus[0].peak_memory_bandwidth_bytes_per_s == 936e9
    assert "not this machine" in report.message
    with pytest.raises(GpuTableError, match="1 or more"):
        described_report(find_gpu("RTX 3090"), count=0)


def test_a_described_model_is_the_catalogs_nearest_of_its_architecture():
    catalog = load_catalog()
    named = described(catalog, "llama", "8B", "Q4_0")
    assert named.label.startswith(("llama-3.1-8b-instruct", "deepseek-r1-distill-llama-8b"))
    assert named.info.architecture == "llama" and 4.3e9 < named.info.tensor_bytes < 4.9e9
    with pytest.raises(NamedModelError, match="none within 30 % of 300B|none within 30% of 300B"):
        described(catalog, "llama", "300B", "Q4_0")
    with pytest.raises(NamedModelError, match="no 'mamba9' model"):
        described(catalog, "mamba9", "8B", "Q4_0")
    with pytest.raises(NamedModelError, match="not a quant"):
        described(catalog, "llama", "8B", "Q9_9")


def test_a_preset_names_its_target_and_its_draft():
    catalog = load_catalog()
    named = resolve("qwen3-8b+0.6b-q4km", catalog)
    assert named.label.startswith("qwen3-8b Q4_K_M") and named.draft is not None
    assert named.draft.label.startswith("qwen3-0.6b Q8_0")
    by_id = resolve("qwen3-8b:q4_k_m", catalog)
    assert by_id.info.tensor_bytes == named.info.tensor_bytes
    with pytest.raises(NamedModelError, match="ARCH:SIZE:QUANT"):
        resolve("no-such-thing", catalog)


def test_kernel_families_follow_the_ggml_type():
    assert [family(t) for t in ("F16", "bf16", "Q4_0", "Q8_0", "Q4_K", "IQ3_S", "Q6_K")] == [
        "float",
        "float",
        "legacy",
        "legacy",
        "kquant",
        "kquant",
        "kquant",
    ]


def test_the_shipped_fit_carries_held_out_bands_and_prices_a_card():
    fit = load_fit()
    assert set(fit.efficiency) == set(FAMILIES) and all(0.1 < e <= 1.0 for e in fit.efficiency.values())
    assert set(fit.band) == {"plain", "verify", "speedup", "speedup_copies", "speedup_mtp"} and "held-out" in fit.source
    catalog = load_catalog()
    cost = model_cost(described(catalog, "llama", "8B", "Q4_0").info)
    slow = gpu_device(described_report(find_gpu("RTX 3060")))
    fast = gpu_device(described_report(find_gpu("RTX 4090")))
    assert slow is not None and fast is not None
    # a faster card is faster, each further token of a verify pass costs something, and no more than a token
    assert fast.forward_ms(cost, 1, 64) < slow.forward_ms(cost, 1, 64)
    one, four = fast.forward_ms(cost, 1, 64), fast.forward_ms(cost, 4, 64)
    assert one < four < 4 * one


def test_a_layer_of_routed_experts_costs_its_own_fixed_time_and_a_dense_layer_does_not():
    """GpuFit.moe_layer_ms: the router's and the expert-indexed products' kernels, fitted on the published MoE rows
    (gpt-oss 20B, Qwen3 30B-A3B): each MoE layer adds it to a pass, a dense model's layers do not; it travels
    through the fit's file."""
    catalog = load_catalog()
    moe = model_cost(resolve("qwen3-30b-a3b:Q4_K_M", catalog).info)
    dense = model_cost(described(catalog, "llama", "8B", "Q4_0").info)
    base = GpuFit({f: 0.8 for f in FAMILIES}, 0.04, {})
    priced = dataclasses.replace(base, moe_layer_ms=0.05)
    args = (1, 64, 936e9, 71e12)
    assert priced.forward_ms(moe, *args) - base.forward_ms(moe, *args) == pytest.approx(0.05 * moe.n_layers)
    assert priced.forward_ms(dense, *args) == base.forward_ms(dense, *args)
    assert GpuFit.from_dict(priced.to_dict()) == priced
    assert load_fit().moe_layer_ms > 0


def test_a_fit_without_token_costs_verifies_for_the_price_of_one_token():
    fit = GpuFit({f: 0.8 for f in FAMILIES}, 0.0, {})
    cost = model_cost(described(load_catalog(), "llama", "8B", "Q8_0").info)
    device = dataclasses.replace(gpu_device(described_report(find_gpu("RTX 3090"))), gpu_fit=fit)
    assert device.forward_ms(cost, 8, 0) == pytest.approx(device.forward_ms(cost, 1, 0), rel=0.01)
    # a GPU prediction carries the shipped fit's held-out bands, not the CPU's
    shipped = gpu_device(described_report(find_gpu("RTX 3090")))
    p = predict(cost, model_cost(described(load_catalog(), "llama", "1B", "Q8_0").info), shipped)
    assert p.band is not None and "GPU" in p.band.source and p.band.plain == load_fit().band["plain"]
    assert predict(cost, None, device).band is None  # a fit that carries no held-out errors gives no band


def test_a_card_without_tensor_cores_verifies_at_the_rate_fitted_on_pascal_curves():
    """A Pascal card has no FP16 tensor figure for token_ops to be in: the fit's rate from such cards' curves
    prices its verify passes (a GTX 1080 Ti's verify of 6 tokens cost x2.0 of one at the generic 40 TFLOPs guess,
    and its published speculative run was 0.32 slower than predicted), not a later generation's guess."""
    from engine.planning.speed.device_speed import TFLOPS_BY_COMPUTE_MAJOR, gpu_flops, tensor_tflops

    fit = load_fit()
    assert fit.no_tensor_tflops is not None and 0 < fit.no_tensor_tflops < TFLOPS_BY_COMPUTE_MAJOR[7]
    assert tensor_tflops(None, "6.1", fit)[0] == fit.no_tensor_tflops
    assert "Pascal" in gpu_flops(described_report(find_gpu("GTX 1080 Ti")).gpus[0], fit)[1]
    assert tensor_tflops(None, "6.1", dataclasses.replace(fit, no_tensor_tflops=None))[0] == 40.0
    assert tensor_tflops(None, "8.6", fit)[0] == TFLOPS_BY_COMPUTE_MAJOR[8]  # a card with tensor cores: its guess
    assert tensor_tflops(71.0, "8.6", fit) == (71.0, "FLOPs from SpecTune's GPU table")
    cost = model_cost(described(load_catalog(), "qwen2", "7B", "Q4_0").info)
    pascal = gpu_device(described_report(find_gpu("GTX 1080 Ti")))
    generic = dataclasses.replace(pascal, flops_per_s=40.0e12)
    assert pascal is not None and pascal.forward_ms(cost, 6, 0) > generic.forward_ms(cost, 6, 0)
    assert GpuFit.from_dict(fit.to_dict()) == fit


@pytest.mark.slow
def test_predict_for_a_card_and_a_model_this_machine_does_not_have():
    r = spectune("predict", "--target", "llama:8B:Q4_0", "--gpu", "RTX 3090", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["plain_tokens_per_s"] > 50 and out["band"]["plain"] > 0
    assert sorted(int(b) for b in out["verify_ms_by_batch"]) == list(range(1, 17))
    assert "RTX 3090" in out["device"]["name"] and out["speedup_by_k"] == {}  # no draft named
    r = spectune("predict", "--target", "qwen3-8b+0.6b-q4km", "--gpu", "4060 Ti 16GB", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["draft"].startswith("qwen3-0.6b") and len(out["speedup_by_k"]) >= 8


@pytest.mark.slow
def test_predict_names_what_is_wrong_with_a_card_or_a_model():
    r = spectune("predict", "--target", "llama:8B:Q4_0", "--gpu", "A100")
    assert r.returncode == 2 and "fits several GPUs" in r.stderr
    r = spectune("predict", "--target", "llama:8B:Q4_0", "--gpu", "RTX 3090", "--cpu")
    assert r.returncode == 2 and "--gpu and --cpu" in r.stderr
    r = spectune("predict", "--target", "llama:8B", "--gpu", "RTX 3090")
    assert r.returncode == 2 and "ARCH:SIZE:QUANT" in r.stderr


@pytest.mark.slow
def test_recommend_and_plan_for_a_card_this_machine_does_not_have():
    r = spectune("recommend", "--gpu", "RTX 4060 Ti 16GB", "--limit", "2", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["budget"]["gpus"][0]["free_bytes"] == 16 * 2**30 and "GPU table" in out["budget"]["source"]
    r = spectune("recommend", "--gpu", "RTX 3090", "--vram", "12GiB")
    assert r.returncode == 2 and "give one" in r.stderr
    demo = ROOT / "resources" / "models" / "spectune-demo-target-f16.gguf"
    r = spectune("plan", "--target", str(demo), "--ctx", "2048", "--gpu", "H100 SXM", "--gpu-count", "2", "--json")
    assert r.returncode == 0, r.stderr
    plan = json.loads(r.stdout)
    assert [g["name"] for g in plan["gpus"]] == ["CUDA0", "CUDA1"] and plan["fits"]
    assert plan["gpus"][0]["free_bytes"] == 80 * 2**30
