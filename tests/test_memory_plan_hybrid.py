"""Hybrid models (Qwen3.5) in the memory plan: which layers are recurrent (engine.planning.memory.recurrent), their
state and the attention layers' KV caches against llama.cpp's own report on a generated qwen35 pair, with
and without its MTP block, and what that does to a catalog model's plan."""

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
from engine.planning.memory.memory_plan import GpuBudget, PlanError, load_options, plan_memory
from engine.planning.memory.recurrent import recurrent_layout, snapshots_at_load, trunk_layers
from engine.runtime.binding import Engine

from .conftest import own_cache_env
from .test_memory_plan import compare

# the generator's delta-net sizes (engine.models.synthetic): conv kernel 4, state 16, 2 key heads, 4 value heads
N_EMBD_R = (4 - 1) * (16 * 4 + 2 * 2 * 16)  # 384 floats of convolution state
N_EMBD_S = 16 * 16 * 4  # 1024 floats of delta-net state
ROW = (N_EMBD_R + N_EMBD_S) * 4  # bytes of one row of one recurrent layer
KV_CELL = 2 * 2 * 32 * 2  # K and V, 2 KV heads of 32, f16: bytes per cell of one attention layer
# compute buffers are an empirical fit (exact on this pair; within 0.64% on 14 generated hybrid shapes)
COMPUTE_TOLERANCE = 0.01


def _generate(out: Path, *extra: str) -> tuple[Path, Path]:
    argv = [sys.executable, "-m", "testmodels.synthetic", str(out), "--hybrid", "--dtype", "f16", *extra]
    written = json.loads(subprocess.run(argv, capture_output=True, text=True, check=True).stdout)
    return Path(written["target"]), Path(written["draft"])


@pytest.fixture(scope="module")
def hybrid_pair(tmp_path_factory):
    """`python -m testmodels.synthetic OUT --hybrid --dtype f16`: an 8-layer qwen35 target (layers 3 and 7
    attend, the others are delta-net layers) and a 4-layer draft (layer 3 attends)."""
    return _generate(tmp_path_factory.mktemp("hybrid"))


@pytest.fixture(scope="module")
def mtp_pair(tmp_path_factory):
    """The same with --mtp: the target's block_count 9 counts an MTP block (nextn_predict_layers 1)."""
    return _generate(tmp_path_factory.mktemp("hybrid_mtp"), "--mtp")


def test_the_generated_models_are_qwen35_hybrids(hybrid_pair, mtp_pair):
    target, draft = (inspect_gguf(p) for p in hybrid_pair)
    layout = recurrent_layout(target)
    assert target.architecture == "qwen35"
    assert layout.layers == (True, True, True, False, True, True, True, False)
    assert (layout.n_embd_r, layout.n_embd_s) == (N_EMBD_R, N_EMBD_S)
    assert recurrent_layout(draft).layers == (True, True, True, False)
    mtp = inspect_gguf(mtp_pair[0])
    assert (mtp.block_count, trunk_layers(mtp)) == (9, 8)
    assert recurrent_layout(mtp).layers == layout.layers  # the MTP block is no trunk layer


def _check(plan, breakdown, label: str, mtp: bool = False) -> None:
    rows = compare(plan, breakdown) if not mtp else _compare_mtp(plan, breakdown)
    seen = set()
    for model, kind, buffer_type, actual, planned, error in rows:
        print(f"{label} {model:6} {kind:8} {buffer_type:10} llama.cpp {actual:9d} plan {planned:9d} {error:+.3%}")
        if kind in ("kv_cache", "weights"):
            assert actual == planned, (label, model, kind, buffer_type)
            seen.add((model, kind))
        else:
            assert abs(error) <= COMPUTE_TOLERANCE, (label, model, kind, buffer_type)
    expected = {("target", "kv_cache"), ("target", "weights"), ("draft", "kv_cache")}
    assert seen == expected | (set() if mtp else {("draft", "weights")})


def _compare_mtp(plan, breakdown):
    """compare() for an MTP context, which runs on the target's weights: specrt reports them once, with the
    target (llama.cpp's breakdown lists them again for the context), so that what a worker holds adds up
    (engine.planning.memory.budget.held_by_device) and matches the plan, which counts them once too."""
    assert [e for e in breakdown if e["model"] == "draft" and e["model_bytes"]] == []
    return compare(plan, breakdown)


@pytest.mark.parametrize("ctx", [512, 2048])
def test_a_hybrid_pair_matches_llama_cpp_to_the_byte(hybrid_pair, ctx):
    target, draft = hybrid_pair
    info, draft_info = inspect_gguf(target), inspect_gguf(draft)
    options = load_options(info, draft_info)
    assert options == {"n_rs_seq": 0, "mtp": False}  # a draft model: no snapshots, no MTP context
    plan = plan_memory(info, ctx, draft=draft_info, cpu_features=cpu_features(), **options)
    with Engine(LoadSettings(target, draft, ctx=ctx)) as engine:
        _check(plan, engine.memory(), f"ctx {ctx}")
    # 2 attention layers x ctx cells + 6 recurrent layers x 1 row; the draft: 1 and 3
    kv = {m: plan.total(model=m, kind="kv_cache") for m in ("target", "draft")}
    assert kv == {"target": 2 * ctx * KV_CELL + 6 * ROW, "draft": ctx * KV_CELL + 3 * ROW}
    if ctx == 512:
        assert kv["target"] == 295936  # what llama.cpp reported when this was written
    assert not any("not modelled" in n for n in plan.notes)


@pytest.mark.parametrize("ctx", [512, 2048])
@pytest.mark.parametrize("k", [3, 6])
def test_draft_mtp_on_a_hybrid_target_matches_llama_cpp_to_the_byte(mtp_pair, ctx, k):
    target = mtp_pair[0]
    info = inspect_gguf(target)
    options = load_options(info, None, draft_n_max=k)
    assert options == {"n_rs_seq": k, "mtp": True}  # specrt loads a target with an MTP head for draft-mtp
    plan = plan_memory(info, ctx, cpu_features=cpu_features(), **options)
    with Engine(LoadSettings(target, None, ctx=ctx, draft_n_max_at_load=k)) as engine:
        _check(plan, engine.memory(), f"ctx {ctx} K {k}", mtp=True)
    # the main context: the trunk's 2 attention layers and 6 recurrent layers of 1 + K rows each; the MTP
    # context: a plain KV cache for the MTP block alone
    assert plan.total(model="target", kind="kv_cache") == 2 * ctx * KV_CELL + 6 * (1 + k) * ROW
    assert plan.total(model="draft", kind="kv_cache") == ctx * KV_CELL
    assert plan.total(model="draft", kind="weights") == 0


def test_a_draft_model_leaves_the_mtp_block_unloaded(mtp_pair):
    target, draft = mtp_pair
    info, draft_info = inspect_gguf(target), inspect_gguf(draft)
    options = load_options(info, draft_info)
    assert options == {"n_rs_seq": 0, "mtp": False}
    plan = plan_memory(info, 512, draft=draft_info, cpu_features=cpu_features(), **options)
    with Engine(LoadSettings(target, draft, ctx=512)) as engine:
        _check(plan, engine.memory(), "mtp target with a draft")
    loaded = plan_memory(info, 512, cpu_features=cpu_features(), mtp=True)
    assert loaded.total(model="target", kind="weights") > plan.total(model="target", kind="weights")


def test_snapshots_follow_llama_cpps_rule():
    numbers = dict(QWEN35_27B, n_layer=8)
    qwen35 = model_info_from_numbers(**numbers)
    assert snapshots_at_load(qwen35, ["draft-mtp"]) == 3  # llama.cpp's default K
    assert snapshots_at_load(qwen35, ["draft-eagle3"], 5) == 5
    assert snapshots_at_load(qwen35, ["draft-simple"], 5) == 0
    assert snapshots_at_load(qwen35, ["ngram-mod", "draft-mtp"], 4) == 4
    # qwen3next is a hybrid llama.cpp cannot roll back in place: no snapshots, but the same layout
    next_ = model_info_from_numbers(**(numbers | {"architecture": "qwen3next"}))
    assert snapshots_at_load(next_, ["draft-mtp"], 4) == 0
    assert recurrent_layout(next_).layers == recurrent_layout(qwen35).layers
    with pytest.raises(PlanError, match="MTP"):
        plan_memory(qwen35, 4096, mtp=True)  # no next-n layers to draft with


def test_the_gguf_keys_decide_which_layers_are_recurrent():
    info = model_info_from_numbers(**(QWEN35_27B | {"n_layer": 4}))
    assert recurrent_layout(info).layers == (True, True, True, False)
    info.metadata["qwen35.full_attention_interval"] = 2
    assert recurrent_layout(info).layers == (True, False, True, False)
    info.metadata["qwen35.attention.recurrent_layers"] = [False, True, True, True]
    assert recurrent_layout(info).layers == (False, True, True, True)


# Qwen3.5-27B's config.json (Qwen/Qwen3.5-27B on Hugging Face): 64 layers, full attention every 4th, 24 heads
# and 4 KV heads of 256, delta-net: 16 key heads and 48 value heads of 128, conv kernel 4
QWEN35_27B = dict(
    architecture="qwen35",
    n_layer=64,
    n_embd=5120,
    n_head=24,
    n_head_kv=4,
    head_dim=256,
    n_ff=17408,
    n_vocab=248320,
    n_ctx_train=262144,
    weight_type="Q4_K",
    bits_per_weight=4.85,
    full_attention_interval=4,
    ssm_conv_kernel=4,
    ssm_state_size=128,
    ssm_group_count=16,
    ssm_time_step_rank=48,
    ssm_inner_size=6144,
)


def test_qwen35_27b_at_32k_caches_only_its_attention_layers():
    info = model_info_from_numbers(**QWEN35_27B)
    layout = recurrent_layout(info)
    assert (layout.n_attention, layout.n_recurrent) == (16, 48)
    plan = plan_memory(info, 32768)
    kv = sum(i.bytes for i in plan.items if i.kind == "kv_cache" and "recurrent" not in i.detail)
    state = sum(i.bytes for i in plan.items if i.kind == "kv_cache" and "recurrent" in i.detail)
    assert kv == 16 * 32768 * (4 * 256 * 2 * 2)  # 2 GiB: K and V, 4 heads of 256, f16
    # per recurrent layer: conv 3 x (6144 + 2 x 16 x 128) and state 128 x 6144 floats, one row
    assert state == 48 * (3 * (6144 + 2 * 16 * 128) + 128 * 6144) * 4
    assert not any("not modelled" in n for n in plan.notes)
    # the same model with every layer attending would cache four times as much
    dense = model_info_from_numbers(**(QWEN35_27B | {"architecture": "qwen3"}))
    assert sum(i.bytes for i in plan_memory(dense, 32768).items if i.kind == "kv_cache") == 4 * kv


def test_the_catalog_plans_qwen35_with_its_mtp_block():
    from engine.models.catalog import load_catalog
    from engine.planning.advice.catalog_models import CatalogModels

    catalog = load_catalog()
    info = CatalogModels(catalog).info(catalog.model("qwen3.5-27b"), "Q4_K_M")
    assert (info.block_count, trunk_layers(info)) == (65, 64)  # the MTP block follows the trunk
    assert recurrent_layout(info).n_attention == 16
    options = load_options(info, None, draft_n_max=4)
    assert options == {"n_rs_seq": 4, "mtp": True}
    plan = plan_memory(info, 32768, **options)
    per_cell = 4 * 256 * 2 * 2
    assert plan.total(model="draft", kind="kv_cache") == 32768 * per_cell  # the MTP context: one layer
    trunk_kv = sum(
        i.bytes for i in plan.items if i.model == "target" and "recurrent" not in i.detail and i.kind == "kv_cache"
    )
    assert trunk_kv == 16 * 32768 * per_cell
    state = recurrent_layout(info).state_bytes(n_rs_seq=4)
    assert plan.total(model="target", kind="kv_cache") == trunk_kv + state
    # without draft-mtp the MTP block is not loaded: a GPU holds its weights only for draft-mtp (on the CPU the
    # file mapping's span still covers them, where they lie between the trunk and the output layer)
    gpu = [GpuBudget("CUDA0", 80 * 2**30)]
    mtp_block = sum(t.n_bytes for t in info.tensors if t.name.startswith("blk.64."))
    with_head = plan_memory(info, 32768, gpus=gpu, **options).total(kind="weights", device="CUDA0")
    without = plan_memory(info, 32768, gpus=gpu).total(kind="weights", device="CUDA0")
    assert with_head - without == pytest.approx(mtp_block, rel=0.01)


def test_the_speed_model_reads_kv_of_the_attention_layers_and_the_state_of_the_others():
    from engine.planning.speed.model_cost import model_cost

    info = model_info_from_numbers(**(QWEN35_27B | {"nextn_layers": 1}))
    cost = model_cost(info)
    layout = recurrent_layout(info)
    assert cost.kv_bytes_per_position == 16 * 4 * (256 + 256) * 2  # 16 attention layers, f16
    assert cost.state_bytes_per_pass == 2 * layout.state_bytes()  # read and written once a pass
    assert cost.recurrent_macs == 3 * 48 * 128 * 6144
    # the MTP block is not part of a forward pass of the model
    mtp_bytes = sum(t.n_bytes for t in info.tensors if t.name.startswith("blk.64."))
    trunk = model_cost(model_info_from_numbers(**QWEN35_27B))
    assert mtp_bytes > 0 and cost.weight_bytes == trunk.weight_bytes
    # at 32k of context a decoding pass reads 2 GiB of KV instead of the 8 full attention would
    assert cost.bytes_read(32768) - cost.bytes_read(0) == 16 * 32768 * 4096


@pytest.mark.parametrize(
    "change, message",
    [
        ({"hybrid": None}, "needed for, and only for"),
        ({"llama_arch": "qwen3"}, "needed for, and only for"),
        ({"n_ff_shared": 512}, "needs a mixture of experts"),
        ({"hybrid": {"full_attention_interval": 4}}, "ssm_conv_kernel"),
    ],
)
def test_the_catalog_checks_a_hybrid_layout(change, message):
    from engine.models.catalog import CatalogError, _architecture

    raw = dict(
        llama_arch="qwen35",
        n_layer=24,
        n_embd=1024,
        n_head=8,
        n_head_kv=2,
        head_dim=256,
        n_ff=3584,
        n_vocab=248320,
        n_ctx_train=262144,
        tied_embeddings=True,
        params=752336896,
        hybrid=dict(
            full_attention_interval=4,
            ssm_conv_kernel=4,
            ssm_state_size=128,
            ssm_group_count=16,
            ssm_time_step_rank=16,
            ssm_inner_size=2048,
        ),
        nextn_layers=1,
    )
    assert _architecture(raw, "test").estimated_params() == 752336896
    with pytest.raises(CatalogError, match=message):
        _architecture({k: v for k, v in (raw | change).items() if v is not None}, "test")


def test_a_qwen35_recommendation_says_it_can_draft_alone():
    from engine.models.catalog import load_catalog
    from engine.planning.advice.recommend import recommend
    from engine.planning.memory.budget import Budget

    catalog = load_catalog()
    r = recommend(catalog, Budget(ram_bytes=23 * 2**30, source="test"), ctx=8192, family="qwen3.5", limit=50)
    qwen35 = [c for c in r.recommended + r.near_misses if c.target.model.startswith("qwen3.5-")]
    assert qwen35 and all(c.mtp_head for c in qwen35)
    assert any("draft-mtp needs no separate draft model" in reason for reason in qwen35[0].reasons())


def test_every_plan_of_an_mtp_target_follows_the_k_it_loads_for(mtp_pair):
    """The fit check, the placement search and the export plan a hybrid MTP target for the K it is loaded
    with (K snapshots of the recurrent state and the MTP context), not llama.cpp's default of 3; and what the
    loaded worker reports holding adds up to the plan (the MTP context's weights are the target's)."""
    from engine.core.settings import SpecSettings
    from engine.deploy.export import export_warnings
    from engine.planning.advice.placement import Placement
    from engine.planning.memory.budget import Budget, held_bytes
    from engine.planning.memory.fit import plan_fit

    target = mtp_pair[0]
    info = inspect_gguf(target)
    budget = Budget((), 1 << 40, tuple(cpu_features()))
    by_k = {k: plan_fit(info, 512, budget, draft_n_max=k).plan for k in (3, 6)}
    assert by_k[6].total(kind="kv_cache") - by_k[3].total(kind="kv_cache") == 6 * 3 * ROW
    served = plan_fit(info, 512, budget, draft_n_max=6, spec_types=["draft-mtp"]).plan
    assert served.total() == by_k[6].total()
    plain = plan_fit(info, 512, budget, spec_types=[]).plan  # a server without draft-mtp: no MTP context
    assert plain.total(model="draft") == 0 and plain.total(model="target", kind="kv_cache") < by_k[3].total()
    placed = Placement().plan(info, None, 512, [GpuBudget("CUDA0", 1 << 40)], draft_n_max=6)
    assert placed.total(kind="kv_cache") == by_k[6].total(kind="kv_cache")
    # the export's memory check runs (no warning about a plan it could not make)
    load = LoadSettings(target, None, ctx=512)
    warnings = export_warnings(load, SpecSettings("draft-mtp", draft_n_max=6), gpus=[], ram_available=1 << 40)
    assert not any("could not" in w or "no memory plan" in w for w in warnings), warnings
    with Engine(LoadSettings(target, None, ctx=512, draft_n_max_at_load=6)) as engine:
        held = engine.memory()
    assert sum(e["model_bytes"] for e in held) == by_k[6].total(kind="weights")  # counted once, not twice
    assert held_bytes(held)[0] == 0


@pytest.fixture(scope="module")
def hybrid_moe_pair(tmp_path_factory):
    """`--hybrid --n-expert 8 --n-expert-used 4 --n-ff 512`: qwen35moe, experts of 128 rows (512 / 4), a shared
    expert of 512 rows (n_ff, llama.cpp's default width)."""
    return _generate(tmp_path_factory.mktemp("hybrid_moe"), "--n-expert", "8", "--n-expert-used", "4", "--n-ff", "512")


def test_the_generated_hybrid_moe_is_a_qwen35moe_with_a_shared_expert(hybrid_moe_pair):
    info = inspect_gguf(hybrid_moe_pair[0])
    assert info.architecture == "qwen35moe"
    assert recurrent_layout(info).layers == (True, True, True, False, True, True, True, False)
    shapes = {t.name: t.shape for t in info.tensors}
    assert shapes["blk.0.ffn_gate_exps.weight"] == (128, 128, 8)  # {n_embd, n_ff_exp, n_expert}
    assert shapes["blk.0.ffn_up_shexp.weight"] == (128, 512) and shapes["blk.0.ffn_gate_inp_shexp.weight"] == (128,)
    assert "blk.0.ffn_up.weight" not in shapes


@pytest.mark.parametrize("ctx", [512, 2048])
def test_a_hybrid_moe_pair_matches_llama_cpp_to_the_byte(hybrid_moe_pair, ctx):
    # compute included: 4 experts of 128 rows a token and a shared expert of 512, so 3 x 512 floats a token at
    # once and 6E more (compute_buffer_bytes' hybrid MoE phase), where the MoE phase alone was 10 % low
    target, draft = hybrid_moe_pair
    plan = plan_memory(inspect_gguf(target), ctx, draft=inspect_gguf(draft), cpu_features=cpu_features())
    with Engine(LoadSettings(target, draft, ctx=ctx)) as engine:
        rows = compare(plan, engine.memory())
    for model, kind, buffer_type, actual, planned, error in rows:
        print(f"ctx {ctx} {model:6} {kind:8} {buffer_type:10} llama.cpp {actual:9d} plan {planned:9d} {error:+.3%}")
        if model == "target" or kind != "compute":
            assert actual == planned, (model, kind, buffer_type)
        else:
            # the 4-layer draft, whose one attention layer is its last, packs tighter: the plan is high there
            assert actual < planned <= 1.36 * actual


@pytest.mark.slow
def test_the_speed_model_predicts_draft_mtp_from_the_targets_own_block(mtp_pair, hybrid_pair, tmp_path):
    """draft-mtp runs the target's MTP block like a draft model (common/speculative.cpp): K passes of the
    block and the output head, and one over each verified batch. A hybrid target then rolls back from its
    snapshots, so no replay enters the step; `spectune predict` without a draft predicts it."""
    import dataclasses

    from engine.planning.speed.device_speed import DeviceSpeed
    from engine.planning.speed.model_cost import model_cost, mtp_cost
    from engine.planning.speed.speed_model import predict

    info = inspect_gguf(mtp_pair[0])
    assert mtp_cost(inspect_gguf(hybrid_pair[0])) is None  # no MTP block
    block = mtp_cost(info)
    n_trunk = trunk_layers(info)
    names = {t.name for t in info.tensors}
    head = "output.weight" if "output.weight" in names else "token_embd.weight"  # a tied model's head
    expected = sum(
        t.n_bytes
        for t in info.tensors
        if (t.name.startswith(f"blk.{n_trunk}.") and ".embed_tokens" not in t.name)
        or t.name in (head, "output_norm.weight")
    )
    assert block.mtp and block.weight_bytes == expected
    trunk = model_cost(info)
    assert block.kv_bytes_per_position > 0 and block.state_bytes_per_pass == 0 and not block.replays
    assert block.weight_bytes < trunk.weight_bytes / 2
    cpu = DeviceSpeed("CPU", 20e9, 100e9, 0.5, overlap=False, reread=0.4)
    got = predict(trunk, block, cpu, acceptance=0.7, k_max=4)
    as_draft = predict(trunk, dataclasses.replace(block, mtp=False), cpu, acceptance=0.7, k_max=4)  # would replay
    assert got.method == "draft-mtp" and as_draft.method == "draft-simple"
    assert all(got.speedup_by_k[k] > as_draft.speedup_by_k[k] for k in range(1, 5))
    argv = [sys.executable, "-m", "engine.cli", "predict", "--target", str(mtp_pair[0]), "--cpu", "--prior", "--json"]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=580, env=own_cache_env(tmp_path))
    assert r.returncode == 0, r.stderr
    printed = json.loads(r.stdout)
    assert printed["method"] == "draft-mtp" and set(printed["speedup_by_k"]) == {str(k) for k in range(1, 13)}
