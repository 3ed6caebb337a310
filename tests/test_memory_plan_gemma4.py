"""Gemma 4 in the memory plan: per-layer head sizes and KV heads (engine.planning.memory.kv_layers), the
window caches of its sliding layers (engine.planning.memory.sliding_window) and the shared-KV layers that keep
no cache, against llama.cpp's own sizes on a generated gemma4 pair."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from engine.core.settings import LoadSettings
from engine.models.gguf_inspect import inspect_gguf
from engine.planning.advice.model_numbers import model_info_from_architecture, model_info_from_numbers
from engine.planning.hardware import cpu_features
from engine.planning.memory.kv_layers import kv_layers_from_start, kv_row_widths
from engine.planning.memory.memory_plan import load_options, plan_memory
from engine.planning.memory.sliding_window import sliding_window
from engine.runtime.binding import Engine

from .test_memory_plan import compare

WINDOW = 64
SLIDING = (True,) * 5 + (False,) + (True,) * 5 + (False,)  # the generator's five to one, 12 layers


@pytest.fixture(scope="module")
def gemma4_pair(tmp_path_factory):
    """What `python -m testmodels.synthetic OUT --gemma4 --head-dim-global 128 --n-head-kv-global 1
    --shared-kv-layers 6` writes (F16): a 12-layer gemma4 target whose layers 5 and 11 are global (heads
    of 128, one KV head: rows of 128) and the others slide over 64 tokens (heads of 32, two KV heads: rows
    of 64), the last six reading the caches of layers 4 and 5; the draft is its first six layers."""
    out = tmp_path_factory.mktemp("gemma4")
    argv = [sys.executable, "-m", "testmodels.synthetic", str(out), "--gemma4", "--dtype", "f16"]
    argv += ["--head-dim-global", "128", "--n-head-kv-global", "1", "--shared-kv-layers", "6"]
    written = json.loads(subprocess.run(argv, capture_output=True, text=True, check=True).stdout)
    return Path(written["target"]), Path(written["draft"])


def test_the_generated_model_is_a_gemma4_with_two_head_sizes_and_shared_layers(gemma4_pair):
    target, draft = (inspect_gguf(p) for p in gemma4_pair)
    assert target.architecture == "gemma4" and target.arch_value("attention.sliding_window") == WINDOW
    window = sliding_window(target)
    assert window.window == WINDOW and window.layers == SLIDING
    assert kv_layers_from_start(target) == 6 and kv_layers_from_start(draft) == 6
    widths = [kv_row_widths(target, il, window) for il in range(12)]
    assert widths == [(64, 64)] * 5 + [(128, 128)] + [None] * 6
    names = {t.name for t in target.tensors}
    assert "rope_freqs.weight" in names and "blk.5.attn_k.weight" in names and "blk.6.attn_k.weight" not in names


@pytest.mark.parametrize("ctx", [512, 2048])
def test_kv_cache_and_weights_match_llama_cpp_to_the_byte(gemma4_pair, ctx):
    target, draft = gemma4_pair
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
    # five sliding layers of pad_256(min(ctx, 64 + 512)) cells, rows of 64 (K and V, f16: 256 bytes a cell)
    # and one global layer of ctx cells, rows of 128 (512 bytes a cell); the shared layers add nothing, so
    # the target's cache is the draft's
    cells = min(ctx, -(-(WINDOW + 512) // 256) * 256)
    kv = {i.model: i.bytes for i in plan.items if i.kind == "kv_cache"}
    assert kv == {"target": 5 * cells * 256 + ctx * 512, "draft": 5 * cells * 256 + ctx * 512}


def _numbers(**changes):
    numbers = dict(
        architecture="gemma4",
        n_layer=6,
        n_embd=1024,
        n_head=8,
        n_head_kv=4,
        head_dim=256,
        n_ff=4096,
        n_vocab=1000,
        n_ctx_train=8192,
        sliding_window=512,
    )
    return numbers | changes


def test_widths_follow_the_layer_kind_and_fall_back_to_the_full_layers():
    info = model_info_from_numbers(**_numbers())
    info.metadata["gemma4.attention.sliding_window_pattern"] = [True, True, False, True, True, False]
    info.metadata["gemma4.attention.head_count_kv"] = [4, 4, 1, 4, 4, 1]
    info.metadata["gemma4.attention.key_length"] = info.metadata["gemma4.attention.value_length"] = 512
    window = sliding_window(info)
    # without the _swa keys a sliding layer has the full layers' head size, as llama.cpp defaults it
    assert kv_row_widths(info, 0, window) == (2048, 2048) and kv_row_widths(info, 2, window) == (512, 512)
    info.metadata["gemma4.attention.key_length_swa"] = info.metadata["gemma4.attention.value_length_swa"] = 256
    assert [kv_row_widths(info, il, window) for il in range(6)] == [(1024, 1024)] * 2 + [(512, 512)] + [
        (1024, 1024)
    ] * 2 + [(512, 512)]
    info.metadata["gemma4.attention.shared_kv_layers"] = 3
    assert kv_layers_from_start(info) == 3
    assert [kv_row_widths(info, il, window) for il in range(6)] == [(1024, 1024)] * 2 + [(512, 512)] + [None] * 3
    # 8192 cells for the global layer, pad_256(512 + 512) = 1024 for each sliding one, f16 K and V
    kv = sum(i.bytes for i in plan_memory(info, 8192).items if i.kind == "kv_cache")
    assert kv == (2 * 1024 * 1024 + 8192 * 512) * 2 * 2


def test_other_architectures_keep_one_width_and_every_layer():
    llama = model_info_from_numbers(**_numbers(architecture="llama", sliding_window=None))
    assert kv_layers_from_start(llama) is None
    assert all(kv_row_widths(llama, il, None) == (1024, 1024) for il in range(6))
    llama.metadata["llama.attention.head_count_kv"] = [4, 0, 4, 4, 4, 4]  # a layer without attention
    assert kv_row_widths(llama, 1, None) is None


def test_gemma4_26b_a4b_caches_from_the_header_the_pinned_llama_cpp_ships():
    """The pinned llama.cpp's ggml-vocab-gemma-4.gguf carries a Gemma 4 26B-A4B's header (no tensors):
    30 layers, 25 sliding over 1024 tokens with 8 KV heads of 256, 5 global with 2 KV heads of 512."""
    from engine.planning.memory.memory_plan import CPU, kv_cache_items

    from .test_gguf_inspect import vocab_dir

    path = vocab_dir() / "ggml-vocab-gemma-4.gguf"
    if not path.is_file():
        pytest.skip(f"{path} is not there")
    info = inspect_gguf(path)
    window = sliding_window(info)
    assert info.block_count == 30 and window.window == 1024 and window.n_sliding == 25
    assert {kv_row_widths(info, il, window) for il in range(30)} == {(2048, 2048), (1024, 1024)}
    items = kv_cache_items(info, "target", [CPU] * 31, 32768, "f16", "f16", 512)
    # 25 x 1536 cells (pad_256(1024 + 512)) x 2048 + 5 x 32768 cells x 1024, K and V, f16: 940 MiB, where
    # the full context and 512-wide heads on every layer (no gemma4 rule, one head size) made 13.1 GiB
    assert sum(i.bytes for i in items) == (25 * 1536 * 2048 + 5 * 32768 * 1024) * 2 * 2 == 985661440


@pytest.mark.parametrize("shared", [0, 6])
def test_a_catalog_gemma4_entry_plans_like_the_generated_file_with_its_numbers(tmp_path, shared):
    """The catalog plans Gemma 4 without a file (engine.planning.advice.recommend: the arch numbers and its 'gemma4'
    object through model_info_from_architecture). A generated gemma4 with the same numbers, read as a file, gets
    the same weights and the same KV caches at several contexts, on the CPU and on a GPU: the keys the
    constructor writes are the ones kv_layers and sliding_window read from a real header."""
    from engine.models.catalog import _architecture
    from engine.models.synthetic import GEMMA4_PERIOD, ModelShape, PairSpec, write_pair
    from engine.planning.memory.memory_plan import GpuBudget

    shape = ModelShape(
        n_embd=256, n_layer=12, n_head=4, n_head_kv=2, n_ff=512, sliding_window=WINDOW, gemma4=True,
        head_dim_global=128, n_head_kv_global=1, shared_kv_layers=shared,
    )  # fmt: skip
    target, _ = write_pair(tmp_path, PairSpec(shape=shape, draft_layers=6))
    info = inspect_gguf(target)
    # the catalog's arch entry for it, as resources/catalog/README.md has the schema
    arch = _architecture(
        {
            "llama_arch": "gemma4", "n_layer": 12, "n_embd": 256, "n_head": 4, "n_head_kv": 2, "head_dim": 64,
            "n_ff": 512, "n_vocab": info.vocab.n_tokens, "n_ctx_train": shape.n_ctx_train, "params": 1,
            "tied_embeddings": False, "sliding_window": WINDOW,
            "gemma4": {"global_every": GEMMA4_PERIOD, "head_dim_global": 128, "n_head_kv_global": 1,
                       **({"shared_kv_layers": shared} if shared else {})},
        },
        "a generated gemma4",
    )  # fmt: skip
    numbers = model_info_from_architecture(arch, weight_type="F32")  # the generator writes F32
    assert {t.name: t.shape for t in numbers.tensors} == {t.name: t.shape for t in info.tensors}
    assert numbers.tensor_bytes == info.tensor_bytes and numbers.parameter_count == info.parameter_count
    # the parameter check counts the same layers (norms and rope_freqs aside)
    norms = sum(t.n_elements for t in info.tensors if len(t.shape) == 1)
    assert arch.estimated_params() == info.parameter_count - norms
    for gpus in ([], [GpuBudget("CUDA0", 8 * 2**30)]):
        for ctx in (256, 4096, 32768):
            plans = [plan_memory(m, ctx, gpus=gpus) for m in (info, numbers)]
            # with a GPU the file span mapped for the CPU tensors (token_embd) depends on the order the tensors
            # were written in, which numbers cannot know (model_info_from_numbers says so); on the CPU alone
            # the span is the whole file and compares too
            from_file, from_numbers = (
                sorted(
                    (i.model, i.kind, i.buffer_type, i.bytes)
                    for i in p.items
                    if i.kind in ("weights", "kv_cache") and not (gpus and i.buffer_type == "CPU_Mapped")
                )
                for p in plans
            )
            assert from_file == from_numbers, (gpus, ctx)
            assert any(kind == "kv_cache" for _, kind, _, _ in from_file)


# -- the compute buffer (engine.planning.memory.compute_buffer) against llama.cpp's report -------------------------


def _compute(target: Path, draft: Path, ctx: int) -> dict[str, tuple[int, int]]:
    """{model: (llama.cpp's compute bytes, the plan's)} for a pair loaded as specrt loads it (CPU only)."""
    info, draft_info = inspect_gguf(target), inspect_gguf(draft)
    plan = plan_memory(info, ctx, draft=draft_info, cpu_features=cpu_features(), **load_options(info, draft_info))
    with Engine(LoadSettings(target, draft, ctx=ctx)) as engine:
        reported = {m["model"]: m["compute_bytes"] for m in engine.memory() if m["compute_bytes"]}
    return {m: (b, plan.total(model=m, kind="compute")) for m, b in reported.items()}


@pytest.fixture(scope="module")
def gemma4_wide_ffn(tmp_path_factory):
    """A 12-layer gemma4 whose FFN (1024 rows, 8 x n_embd) decides the compute buffer; its 6-layer draft."""
    out = tmp_path_factory.mktemp("gemma4_ffn")
    argv = [sys.executable, "-m", "testmodels.synthetic", str(out), "--gemma4", "--dtype", "f16", "--n-ff", "1024"]
    written = json.loads(subprocess.run(argv, capture_output=True, text=True, check=True).stdout)
    return Path(written["target"]), Path(written["draft"])


@pytest.mark.parametrize("ctx", [512, 2048])
def test_the_gemma4_compute_buffer_matches_llama_cpp_to_the_byte(gemma4_pair, gemma4_wide_ffn, ctx):
    # the targets (two global layers, as every Gemma 4 has): the attention phase decides gemma4_pair's (global
    # queries 4 x 128 wide), the FFN phase the other's; both masks (sliding and global) are live; the llama fit
    # was 20-25 % low on these. The drafts (one global layer, their last) come out higher than llama.cpp's,
    # which frees the sliding mask before that layer: on the safe side, and not by more than a third.
    for pair in (gemma4_pair, gemma4_wide_ffn):
        sizes = _compute(*pair, ctx)
        print(ctx, pair[0].parent.name, sizes)
        actual, planned = sizes["target"]
        assert planned == actual
        actual, planned = sizes["draft"]
        assert actual <= planned <= 1.34 * actual


@pytest.fixture(scope="module")
def assistant_pair(tmp_path_factory):
    """A gemma4 target 256 wide and the assistant testmodels.heads writes for it (512 wide)."""
    out = tmp_path_factory.mktemp("gemma4_assistant")
    argv = [sys.executable, "-m", "testmodels.synthetic", str(out), "--gemma4", "--dtype", "f16", "--n-embd", "256"]
    target = Path(json.loads(subprocess.run(argv, capture_output=True, text=True, check=True).stdout)["target"])
    assistant = out / "assistant.gguf"
    argv = [sys.executable, "-m", "testmodels.heads", "gemma4-assistant", str(assistant)]
    subprocess.run(argv + ["--target", str(target)], capture_output=True, text=True, check=True)
    return target, assistant


@pytest.mark.parametrize("ctx", [512, 2048])
def test_the_assistant_compute_buffer_matches_llama_cpp_to_the_byte(assistant_pair, ctx):
    assert inspect_gguf(assistant_pair[1]).speculative_role == "gemma4-assistant"
    sizes = _compute(*assistant_pair, ctx)
    print(ctx, sizes)
    assert sizes["target"][1] == sizes["target"][0]
    # the fit for ordinary models was 15 % low here
    assert sizes["draft"][1] == sizes["draft"][0]
