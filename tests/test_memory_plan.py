"""engine.planning.memory.memory_plan against llama.cpp's own memory breakdown, and its offload arithmetic alone."""

from __future__ import annotations

from collections import Counter

import pytest

from engine.core.settings import LoadSettings
from engine.llama.quantize import quantize
from engine.models.gguf_inspect import GGML_TYPE_IDS, GGML_TYPES, TensorInfo, inspect_gguf
from engine.models.synthetic import ModelShape, PairSpec, write_pair
from engine.planning.hardware import cpu_features
from engine.planning.memory.memory_plan import (
    CPU,
    GpuBudget,
    PlanError,
    compute_buffer_bytes,
    cpu_extra_buffer,
    gpu_tensor_bytes,
    layer_devices,
    parse_size,
    plan_memory,
)
from engine.runtime.binding import Engine

from .test_gguf_inspect import vocab_dir, write_model

TOLERANCE = 0.05
KINDS = (("weights", "model_bytes"), ("kv_cache", "context_bytes"), ("compute", "compute_bytes"))


# -- models with real shapes and a small vocabulary ---------------------------------------------------


@pytest.fixture(scope="module")
def qwen_pair(tmp_path_factory):
    """Qwen2.5-0.5B's layer shape (n_embd 896, 14 heads, 2 KV heads, n_ff 4864), 4 of its 24 layers: 121 MB."""
    shape = ModelShape(n_embd=896, n_layer=4, n_head=14, n_head_kv=2, n_ff=4864, n_ctx_train=32768)
    return write_pair(tmp_path_factory.mktemp("qwen_shape"), PairSpec(shape=shape, dtype="f16"))


@pytest.fixture(scope="module")
def llama_1b(tmp_path_factory):
    """Llama-3.2-1B's layer shape (n_embd 2048, 32 heads, 8 KV heads, n_ff 8192), 1 of its 16 layers: 121 MB."""
    return write_model(
        tmp_path_factory.mktemp("llama_shape") / "llama1b.gguf",
        n_embd=2048,
        n_layer=1,
        n_head=32,
        n_head_kv=8,
        n_ff=8192,
    )


@pytest.fixture(scope="module")
def big_vocab(tmp_path_factory):
    """A 40k vocabulary with tied embeddings: the output (logits) phase decides the compute buffer."""
    return write_model(
        tmp_path_factory.mktemp("big_vocab") / "big_vocab.gguf",
        n_embd=256,
        n_layer=2,
        n_head=4,
        n_head_kv=2,
        n_ff=640,
        extra_tokens=40000,
        tie=True,
    )


@pytest.fixture(scope="module")
def quantized_qwen_pairs(tmp_path_factory):
    """Qwen2.5-0.5B's layer shape with 2 layers (the draft 1): Q8_0 as the synthetic writer makes it, and
    Q4_K_M quantized by llama.cpp from the F16 pair. 33 MB and 22 MB targets, written in a few seconds."""
    shape = ModelShape(n_embd=896, n_layer=2, n_head=14, n_head_kv=2, n_ff=4864, n_ctx_train=32768)
    pairs = {"q8_0": write_pair(tmp_path_factory.mktemp("qwen_q8_0"), PairSpec(shape=shape, dtype="q8_0"))}
    f16 = write_pair(tmp_path_factory.mktemp("qwen_f16_small"), PairSpec(shape=shape, dtype="f16"))
    pairs["q4_k_m"] = tuple(quantize(p, p.with_name(f"{p.stem}-q4_k_m.gguf"), "Q4_K_M") for p in f16)
    return pairs


def compare(plan, breakdown) -> list[tuple[str, str, str, int, int, float]]:
    """(model, kind, buffer type, llama.cpp bytes, planned bytes, relative error) for every reported item."""
    rows = []
    for entry in breakdown:
        for kind, key in KINDS:
            if entry[key]:
                planned = plan.total(model=entry["model"], kind=kind, buffer_type=entry["buffer_type"])
                rows.append(
                    (
                        entry["model"],
                        kind,
                        entry["buffer_type"],
                        entry[key],
                        planned,
                        (planned - entry[key]) / entry[key],
                    )
                )
    # and nothing planned that llama.cpp does not have (the output buffer is not in its breakdown)
    reported = {(r[0], r[1], r[2]) for r in rows}
    extra = [i for i in plan.items if i.kind != "output" and (i.model, i.kind, i.buffer_type) not in reported]
    assert not extra, f"planned but not reported by llama.cpp: {extra}"
    return rows


def check_against_llama_cpp(plan, target, draft, ctx: int, repack: bool = True) -> list:
    with Engine(LoadSettings(target, draft, ctx=ctx, repack=repack)) as engine:
        breakdown = engine.memory()
    rows = compare(plan, breakdown)
    for model, kind, buffer_type, actual, planned, error in rows:
        print(
            f"ctx {ctx:5d} {model:6} {kind:8} {buffer_type:10} llama.cpp {actual:11d} plan {planned:11d} "
            f"error {error:+.3%}"
        )
        assert abs(error) <= TOLERANCE, f"{model} {kind} {buffer_type}: {planned} planned, {actual} reported"
    actual_total = sum(r[3] for r in rows)
    planned_total = plan.total() - plan.total(kind="output")
    print(
        f"ctx {ctx:5d} total llama.cpp {actual_total} plan {planned_total} "
        f"error {(planned_total - actual_total) / actual_total:+.3%}"
    )
    assert abs(planned_total - actual_total) <= TOLERANCE * actual_total
    return rows


@pytest.mark.parametrize("ctx", [300, 2048])
def test_qwen_shape_pair_matches_llama_cpp(qwen_pair, ctx):
    target, draft = qwen_pair
    plan = plan_memory(inspect_gguf(target), ctx, draft=inspect_gguf(draft), cpu_features=cpu_features())
    check_against_llama_cpp(plan, target, draft, ctx)
    # the draft keeps its own cache, sized to the target's (padded) context
    assert plan.n_ctx == (512 if ctx == 300 else ctx)
    assert plan.total(model="draft", kind="kv_cache") == plan.n_ctx * 1 * (2 * 128 + 2 * 128)


@pytest.mark.slow
@pytest.mark.parametrize("ctx", [300, 2048])
@pytest.mark.parametrize("quant", ["q8_0", "q4_k_m"])
def test_quantized_qwen_shape_pair_matches_llama_cpp(quantized_qwen_pairs, quant, ctx):
    target, draft = quantized_qwen_pairs[quant]
    info, draft_info = inspect_gguf(target), inspect_gguf(draft)
    types = Counter(t.type_name for t in info.tensors)
    # what the files hold: Q8_0 matmuls; Q4_K_M's mix at n_embd 896, where only ffn_down has rows of 256-blocks
    assert set(types) == ({"Q8_0", "F32"} if quant == "q8_0" else {"Q4_K", "Q6_K", "Q5_0", "Q8_0", "F32"}), types
    features = cpu_features()
    plan = plan_memory(info, ctx, draft=draft_info, cpu_features=features)
    rows = check_against_llama_cpp(plan, target, draft, ctx)
    # weights and caches are byte arithmetic, not a fit: to the byte, every buffer
    for model, kind, buffer_type, actual, planned, _ in rows:
        assert kind == "compute" or planned == actual, f"{quant} {model} {kind} {buffer_type}: {planned - actual:+d} B"
    weights = {(r[0], r[2]) for r in rows if r[1] == "weights"}
    if quant == "q4_k_m" and "avx2" in features and "amx" not in features:
        assert ("target", "CPU_REPACK") in weights  # the Q4_K rows, repacked for AVX2
    if "amx" not in features:
        assert quant == "q4_k_m" or not any(b in ("AMX", "CPU_REPACK") for _, b in weights)


@pytest.mark.slow
def test_q4_k_m_pair_without_repacking_matches_llama_cpp(quantized_qwen_pairs):
    """--no-repack: llama.cpp uses no CPU extra buffer, as a plan made without CPU features."""
    target, draft = quantized_qwen_pairs["q4_k_m"]
    plan = plan_memory(inspect_gguf(target), 1024, draft=inspect_gguf(draft), cpu_features=())
    rows = check_against_llama_cpp(plan, target, draft, 1024, repack=False)
    assert {r[2] for r in rows if r[1] == "weights"} == {"CPU_Mapped"}
    assert all(r[1] == "compute" or r[3] == r[4] for r in rows), rows


@pytest.mark.parametrize("ctx", [512, 4096])
def test_llama_1b_shape_matches_llama_cpp(llama_1b, ctx):
    plan = plan_memory(inspect_gguf(llama_1b), ctx, cpu_features=cpu_features())
    check_against_llama_cpp(plan, llama_1b, None, ctx)
    assert plan.total(kind="kv_cache") == ctx * (512 + 512) * 2


def test_output_phase_compute_matches_llama_cpp(big_vocab):
    plan = plan_memory(inspect_gguf(big_vocab), 1024, cpu_features=cpu_features())
    check_against_llama_cpp(plan, big_vocab, None, 1024)


# -- the arithmetic on its own --------------------------------------------------------------------------

ONE_GPU = [GpuBudget("CUDA0", 24 * 2**30)]


def test_layer_devices_follow_llama_cpp_offload_rules():
    assert layer_devices(4, -1, []) == [CPU] * 5  # no GPU: everything on the CPU
    assert layer_devices(4, -1, ONE_GPU) == ["CUDA0"] * 5  # -1: all layers and the output
    assert layer_devices(4, 5, ONE_GPU) == ["CUDA0"] * 5
    assert layer_devices(4, 99, ONE_GPU) == ["CUDA0"] * 5
    # ngl counts the output layer: ngl = n_layer leaves the FIRST repeating layer on the CPU
    assert layer_devices(4, 4, ONE_GPU) == [CPU, "CUDA0", "CUDA0", "CUDA0", "CUDA0"]
    assert layer_devices(4, 2, ONE_GPU) == [CPU, CPU, CPU, "CUDA0", "CUDA0"]
    assert layer_devices(4, 1, ONE_GPU) == [CPU] * 4 + ["CUDA0"]
    assert layer_devices(4, 0, ONE_GPU) == [CPU] * 5


def test_layers_split_over_gpus_by_free_memory():
    gpus = [GpuBudget("CUDA0", 8 * 2**30), GpuBudget("CUDA1", 24 * 2**30)]
    # 8 layers + output = 9 offloaded; split points 0.25 and 1.0; layer il goes where il / 9 falls
    assert layer_devices(8, -1, gpus) == ["CUDA0"] * 3 + ["CUDA1"] * 6
    # with 4 of them offloaded, i_gpu_start = 5 and the fractions are 0, .25, .5, .75
    assert layer_devices(8, 4, gpus) == [CPU] * 5 + ["CUDA0"] + ["CUDA1"] * 3


def _aligned(n: int, a: int) -> int:
    return n + (-n) % a


def test_partial_offload_puts_each_tensor_where_llama_cpp_does(qwen_pair):
    target, _ = qwen_pair
    info = inspect_gguf(target)
    # layer 3 and the output on the GPU; with a GPU the pinned host buffer comes before AMX, so no AMX
    plan = plan_memory(info, 4096, n_gpu_layers=2, gpus=ONE_GPU, cpu_features=("amx", "avx2", "avx512"))
    assert plan.layers["target"] == {"by_device": {CPU: 3, "CUDA0": 1}, "output_device": "CUDA0"}
    assert {i.buffer_type for i in plan.items if i.kind == "weights"} == {"CUDA0", "CPU_Mapped"}
    on_gpu = [t for t in info.tensors if t.name.startswith(("blk.3.", "output"))]
    assert plan.total(kind="weights", buffer_type="CUDA0") == sum(_aligned(t.n_bytes, 128) for t in on_gpu)
    # the CPU tensors are mapped from the file: the span from token_embd to the end of blk.2
    on_cpu = [t for t in info.tensors if t not in on_gpu]
    span = max(t.offset + t.n_bytes for t in on_cpu) - min(t.offset for t in on_cpu)
    assert plan.total(kind="weights", buffer_type="CPU_Mapped") == span
    per_layer_kv = 4096 * (128 + 128) * 2
    assert plan.total(kind="kv_cache", device="CUDA0") == per_layer_kv
    assert plan.total(kind="kv_cache", device=CPU) == 3 * per_layer_kv
    compute = {i.buffer_type: i.bytes for i in plan.items if i.kind == "compute"}
    assert set(compute) == {"CUDA0", "CUDA_Host"}
    output = [i for i in plan.items if i.kind == "output"]
    assert output[0].buffer_type == "CUDA_Host" and output[0].device == CPU
    # without mmap the CPU tensors are read into the pinned host buffer, each rounded to 32 bytes
    unmapped = plan_memory(info, 4096, n_gpu_layers=2, gpus=ONE_GPU, use_mmap=False)
    assert unmapped.total(kind="weights", buffer_type="CUDA_Host") == sum(_aligned(t.n_bytes, 32) for t in on_cpu)
    assert unmapped.total(kind="weights", buffer_type="CUDA_Host", device=CPU) > 0
    assert plan_memory(info, 4096, use_mmap=False).total(kind="weights", buffer_type=CPU) == sum(
        _aligned(t.n_bytes, 32) for t in info.tensors
    )


def test_tied_output_is_copied_to_the_gpu(big_vocab):
    info = inspect_gguf(big_vocab)
    embd = next(t for t in info.tensors if t.name == "token_embd.weight")
    full = plan_memory(info, 1024, gpus=ONE_GPU)
    gpu_tensors = [t for t in info.tensors if t.name != "token_embd.weight"] + [embd]  # + the output copy
    assert full.total(kind="weights", buffer_type="CUDA0") == sum(_aligned(t.n_bytes, 128) for t in gpu_tensors)
    assert full.total(kind="weights", buffer_type="CPU_Mapped") == embd.n_bytes  # the input layer stays
    cpu_only = plan_memory(info, 1024)
    assert cpu_only.total(kind="weights") == info.tensor_bytes, "on the CPU the copy reads the same mapping"


def test_quantized_kv_cache_sizes(qwen_pair):
    info = inspect_gguf(qwen_pair[0])
    plan = plan_memory(info, 4096, cache_type_k="q8_0", cache_type_v="q4_0")
    # n_embd_k_gqa = 2 KV heads x 64 = 128 per token: q8_0 4 blocks of 34 bytes, q4_0 4 blocks of 18
    assert plan.total(kind="kv_cache") == 4 * 4096 * (4 * 34 + 4 * 18)
    gpu = plan_memory(info, 4096, cache_type_k="q8_0", cache_type_v="q4_0", gpus=ONE_GPU)
    # CUDA pads a quantized tensor by one row of 512 - 128 elements and rounds to 128 bytes
    k = _aligned(4096 * 136 + 12 * 34, 128)
    v = _aligned(4096 * 72 + 12 * 18, 128)
    assert gpu.total(kind="kv_cache", device="CUDA0") == 4 * (k + v)
    assert plan_memory(info, 4096, cache_type_k="f32").total(kind="kv_cache") == 4 * 4096 * (128 * 4 + 128 * 2)


def test_gpu_padding_of_quantized_weights():
    # 896 % 512 = 384: one row of 128 more elements, 4 Q4_0 blocks of 18 bytes
    assert gpu_tensor_bytes("Q4_0", (896, 4864), 896 * 4864 // 32 * 18) == 896 * 4864 // 32 * 18 + 72
    assert gpu_tensor_bytes("F16", (896, 4864), 896 * 4864 * 2) == 896 * 4864 * 2  # only quantized types
    assert gpu_tensor_bytes("Q8_0", (1024, 1024), 1024 * 1024 // 32 * 34) == 1024 * 1024 // 32 * 34


def _tensor(name: str, type_name: str, shape: tuple[int, ...]) -> TensorInfo:
    type_id = GGML_TYPE_IDS[type_name]
    _, block, size = GGML_TYPES[type_id]
    n = 1
    for d in shape:
        n *= d
    return TensorInfo(name, shape, type_name, type_id, 0, n, n // block * size)


def test_cpu_extra_buffer_rules():
    amx = ("amx", "avx2", "avx512")
    assert cpu_extra_buffer(_tensor("blk.0.attn_q.weight", "F16", (896, 896)), amx) == ("AMX", 896 * 896 * 2)
    # the matmul output rows must be a multiple of 32, the row length of 16 (F16)
    assert cpu_extra_buffer(_tensor("output.weight", "F16", (896, 580)), amx) is None
    # AMX keeps a 4-byte compensation per Q8_0 block
    q8 = _tensor("blk.0.ffn_up.weight", "Q8_0", (2048, 8192))
    assert cpu_extra_buffer(q8, amx) == ("AMX", q8.n_bytes + 2048 // 32 * 8192 * 4)
    assert cpu_extra_buffer(_tensor("blk.0.attn_q.weight", "F32", (896, 896)), amx) is None
    # not matmuls: embeddings (get_rows), norms, experts (mul_mat_id)
    assert cpu_extra_buffer(_tensor("token_embd.weight", "F16", (896, 4096)), amx) is None
    assert cpu_extra_buffer(_tensor("blk.0.attn_norm.weight", "F32", (896,)), amx) is None
    assert cpu_extra_buffer(_tensor("blk.0.ffn_up_exps.weight", "Q4_0", (896, 4864, 8)), amx) is None
    # without AMX, x86 repacks Q4_0 (AVX2) with rows in multiples of 8; Q2_K needs AVX-512
    q4 = _tensor("blk.0.ffn_up.weight", "Q4_0", (896, 4864))
    assert cpu_extra_buffer(q4, ("avx2",)) == ("CPU_REPACK", q4.n_bytes)
    assert cpu_extra_buffer(q4, ()) is None
    assert cpu_extra_buffer(_tensor("blk.0.ffn_up.weight", "Q2_K", (1024, 64)), ("avx2",)) is None
    assert cpu_extra_buffer(_tensor("blk.0.ffn_up.weight", "Q2_K", (1024, 64)), ("avx512",))[0] == "CPU_REPACK"


def test_budget_verdict(qwen_pair):
    target, draft = (inspect_gguf(p) for p in qwen_pair)
    roomy = plan_memory(target, 4096, draft=draft, gpus=ONE_GPU)
    assert roomy.fits is True
    vram = roomy.device_totals()["CUDA0"]
    assert vram == roomy.total(device="CUDA0") > target.tensor_bytes
    tight = plan_memory(target, 4096, draft=draft, gpus=[GpuBudget("CUDA0", vram - 1)])
    assert tight.fits is False
    d = tight.to_dict()
    assert d["gpus"][0]["headroom_bytes"] == -1 and d["totals"]["vram_bytes"] == vram
    assert plan_memory(target, 4096).fits is None


def test_draft_batch_is_capped_by_the_padded_target_context(qwen_pair):
    target, draft = (inspect_gguf(p) for p in qwen_pair)
    plan = plan_memory(target, 300, draft=draft)
    assert plan.n_ubatch == {"target": 300, "draft": 512}
    assert plan_memory(target, 0).n_ctx == 32768, "0 means the trained context"


def test_compute_fit_phases(qwen_pair):
    info = inspect_gguf(qwen_pair[0])
    # multi-layer FFN phase with q = E at 512 tokens and 1024 cells: what llama.cpp reported for this shape
    assert (
        compute_buffer_bytes(info, 1024, 512, 65)
        == 3 * 512 * 4864 * 4 + 4 * 512 * 896 * 4 + 2 * 1024 * 512 + 24 * 512 + 288
        == 38285600
    )
    # without flash attention the n_kv x T x n_head score matrix appears
    assert compute_buffer_bytes(info, 1024, 512, 65, flash_attn=False) > 1024 * 512 * 14 * 4


def test_refusals(qwen_pair, tmp_path):
    info = inspect_gguf(qwen_pair[0])
    with pytest.raises(PlanError, match="quantized V cache .q8_0. needs flash attention"):
        plan_memory(info, 4096, cache_type_v="q8_0", flash_attn=False)
    with pytest.raises(PlanError, match="K cache type 'q3_k' is not one llama.cpp accepts"):
        plan_memory(info, 4096, cache_type_k="q3_k")
    vocab_only = inspect_gguf(vocab_dir() / "ggml-vocab-llama-spm.gguf")
    with pytest.raises(PlanError, match="holds no tensors"):
        plan_memory(vocab_only, 4096)


def test_parse_size():
    assert parse_size("24GiB") == 24 * 2**30
    assert parse_size("8000M") == 8000 * 2**20
    assert parse_size("1.5T") == int(1.5 * 2**40)
    assert parse_size("123456") == 123456
    with pytest.raises(PlanError, match="cannot read the size 'lots'"):
        parse_size("lots")
