"""Sliding-window attention in the memory plan: which layers slide (engine.planning.memory.sliding_window), the
window caches' size against llama.cpp's own on a generated gemma3 pair, and what that does to a
catalog model's plan."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from engine.core.settings import LoadSettings
from engine.models.gguf_inspect import inspect_gguf
from engine.planning.advice.model_numbers import model_info_from_numbers
from engine.planning.hardware import cpu_features
from engine.planning.memory.memory_plan import plan_memory
from engine.planning.memory.sliding_window import modelled, sliding_window
from engine.runtime.binding import Engine

from .test_memory_plan import compare

WINDOW = 64


@pytest.fixture(scope="module")
def swa_pair(tmp_path_factory):
    """What `python -m testmodels.synthetic OUT --sliding-window 64 --n-layer 7` writes (F16): a gemma3 target
    with layers 0-4 and 6 sliding and layer 5 full, and a one-layer draft whose layer slides."""
    out = tmp_path_factory.mktemp("swa")
    argv = [sys.executable, "-m", "testmodels.synthetic", str(out), "--sliding-window", str(WINDOW), "--n-layer", "7"]
    done = subprocess.run(argv + ["--dtype", "f16"], capture_output=True, text=True, check=True)
    written = json.loads(done.stdout)
    return Path(written["target"]), Path(written["draft"])


def test_the_generated_model_is_a_gemma3_with_a_window(swa_pair):
    info = inspect_gguf(swa_pair[0])
    assert info.architecture == "gemma3" and info.arch_value("attention.sliding_window") == WINDOW
    window = sliding_window(info)
    assert window.window == WINDOW and window.layers == (True, True, True, True, True, False, True)
    assert {"blk.0.post_attention_norm.weight", "blk.0.post_ffw_norm.weight"} <= {t.name for t in info.tensors}


@pytest.mark.parametrize("ctx", [512, 2048])
def test_window_caches_match_llama_cpp_to_the_byte(swa_pair, ctx):
    target, draft = swa_pair
    plan = plan_memory(inspect_gguf(target), ctx, draft=inspect_gguf(draft), cpu_features=cpu_features())
    with Engine(LoadSettings(target, draft, ctx=ctx)) as engine:
        rows = compare(plan, engine.memory())
    seen = set()
    for model, kind, buffer_type, actual, planned, error in rows:
        print(f"ctx {ctx} {model:6} {kind:8} {buffer_type:10} llama.cpp {actual:10d} plan {planned:10d} {error:+.3%}")
        if kind in ("kv_cache", "weights"):
            assert actual == planned, (model, kind, buffer_type)
            seen.add((model, kind))
    assert seen == {("target", "kv_cache"), ("target", "weights"), ("draft", "kv_cache"), ("draft", "weights")}
    # the window cache: pad_256(min(ctx, 64 + 512)) cells, 256 bytes a cell (K and V, 2 heads of 32, f16)
    cells = min(ctx, -(-(WINDOW + 512) // 256) * 256)
    kv = {i.model: i.bytes for i in plan.items if i.kind == "kv_cache"}
    assert kv == {"target": (6 * cells + ctx) * 256, "draft": cells * 256}
    assert any("sliding-window model" in n for n in plan.notes)  # the compute buffer is said to be a guess


GEMMA3_27B = dict(
    architecture="gemma3",
    n_layer=62,
    n_embd=5376,
    n_head=32,
    n_head_kv=16,
    head_dim=128,
    n_ff=21504,
    n_vocab=262208,
    n_ctx_train=131072,
    tied_embeddings=True,
    weight_type="Q4_K",
    bits_per_weight=4.85,
    sliding_window=1024,
)


def test_gemma3_27b_at_32k_caches_a_fifth_of_what_full_attention_would():
    info = model_info_from_numbers(**GEMMA3_27B)
    window = sliding_window(info)
    assert window.n_sliding == 52  # every layer but 5, 11, ..., 59
    kv = sum(i.bytes for i in plan_memory(info, 32768).items if i.kind == "kv_cache")
    per_cell = 16 * 128 * 2 * 2  # K and V, 16 heads of 128, f16
    assert kv == (10 * 32768 + 52 * 1536) * per_cell  # 1536 = pad_256(1024 + 512)
    full = model_info_from_numbers(**(GEMMA3_27B | {"sliding_window": None}))
    assert sum(i.bytes for i in plan_memory(full, 32768).items if i.kind == "kv_cache") == 62 * 32768 * per_cell


def test_a_pattern_in_the_gguf_wins_over_the_architectures_rule():
    info = model_info_from_numbers(**(GEMMA3_27B | {"n_layer": 4}))
    info.metadata["gemma3.attention.sliding_window_pattern"] = [True, False, False, True]
    assert sliding_window(info).layers == (True, False, False, True)
    info.metadata["gemma3.attention.sliding_window_pattern"] = 2  # a period: every second layer is full
    assert sliding_window(info).layers == (True, False, True, False)


@pytest.mark.parametrize(
    "arch, n_layer, window, expected",
    [
        ("gpt-oss", 4, 128, (True, False, True, False)),
        ("gemma2", 4, None, (True, False, True, False)),  # llama.cpp's default window of 4096
        ("cohere2", 8, 4096, (True, True, True, False, True, True, True, False)),
        ("olmo2", 4, None, None),  # OLMo 2 slides only when its GGUF names a window
        ("exaone4", 4, None, None),  # only the 64-layer (32B) EXAONE 4 slides
        ("llama", 4, 4096, None),  # an architecture without a rule keeps full caches...
    ],
)
def test_each_architectures_rule(arch, n_layer, window, expected):
    numbers = GEMMA3_27B | {"architecture": arch, "n_layer": n_layer, "sliding_window": window}
    found = sliding_window(model_info_from_numbers(**numbers))
    assert (found.layers if found else None) == expected
    if arch == "gemma2" and found:
        assert found.window == 4096


def test_an_unknown_rule_is_said_in_the_notes_and_phi3_is_known_to_cache_fully():
    llama = model_info_from_numbers(**(GEMMA3_27B | {"architecture": "llama", "n_layer": 2}))
    assert not modelled(llama)
    assert any("not known here" in n for n in plan_memory(llama, 4096).notes)
    phi3 = model_info_from_numbers(**(GEMMA3_27B | {"architecture": "phi3", "n_layer": 2}))
    assert modelled(phi3) and sliding_window(phi3) is None  # llama.cpp reads the window, then caches fully
    assert not any("sliding" in n for n in plan_memory(phi3, 4096).notes)


def test_the_catalog_plans_gemma3_with_its_window():
    from engine.models.catalog import load_catalog
    from engine.planning.advice.catalog_models import CatalogModels

    catalog = load_catalog()
    info = CatalogModels(catalog).info(catalog.model("gemma-3-27b-it"), "Q4_K_M")
    window = sliding_window(info)
    assert window.window == 1024 and window.n_sliding == 52
