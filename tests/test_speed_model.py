"""The speed model: what a token costs a model (from real synthetic GGUFs), the roofline, the prediction,
the device figures (NVML through its stand-in), the CPU probe (a real worker) and `spectune predict`."""

from __future__ import annotations

import dataclasses
import json
import math
import subprocess
import sys
import threading

import pytest

from engine.core.paths import cache_dir
from engine.core.settings import LoadSettings, SamplingSettings, SpecSettings
from engine.measure.calibration import measured_pair
from engine.measure.device_probe import ProbeCancelled, probe_cpu_speed
from engine.measure.history import History, record_summary
from engine.measure.pair_speed import predict_pairs
from engine.models.gguf_inspect import TensorInfo, inspect_gguf
from engine.planning.hardware import probe
from engine.planning.speed.cost_model import leviathan_speedup
from engine.planning.speed.device_speed import (
    PROBE_BATCHES,
    PROBE_LONG_PAST,
    PROBE_N_PAST,
    DeviceSpeed,
    ProbeTimes,
    assumed_cpu_speed,
    cached_cpu_speed,
    cpu_key,
    gpu_device,
    gpu_speed,
    latest_cpu_speed,
    local_device,
    save_cpu_speed,
    solve_cpu_speed,
)
from engine.planning.speed.model_cost import WEIGHT_CLASSES, ModelCost, is_borrowed, model_cost, weight_class
from engine.planning.speed.speed_model import Measured, plausible_verify_curve, predict

from .conftest import own_cache_env
from .fake_nvml import FakeNVML, h100, rtx4090


def test_a_dense_models_cost_counts_every_matrix_but_the_embedding_lookup(pair):
    info = inspect_gguf(pair[0])
    cost = model_cost(info)
    names = {t.name for t in info.tensors}
    embd = next(t for t in info.tensors if t.name == "token_embd.weight")
    if "output.weight" in names:
        assert cost.weight_bytes == info.tensor_bytes - embd.n_bytes
    else:  # tied embeddings: the output product reads the whole table
        assert cost.weight_bytes == info.tensor_bytes
    matrices = sum(t.n_elements for t in info.tensors if len(t.shape) >= 2)
    assert cost.weight_macs == matrices - (embd.n_elements if "output.weight" in names else 0)
    assert sum(m for _, _, m in cost.by_class) == cost.weight_macs  # every product, in its weight class
    layers, kv, dim = info.block_count, info.n_head_kv, info.head_dim_k
    assert cost.kv_bytes_per_position == layers * kv * 2 * dim * 2  # K and V, f16
    assert cost.bytes_read(100) == cost.weight_bytes + 100 * cost.kv_bytes_per_position


def test_an_moe_layer_reads_only_its_active_experts(pair):
    info = inspect_gguf(pair[0])
    experts = TensorInfo("blk.0.ffn_up_exps.weight", (64, 128, 8), "F16", 1, 0, 64 * 128 * 8, 64 * 128 * 8 * 2)
    moe = dataclasses.replace(
        info,
        tensors=[*info.tensors, experts],
        metadata={**info.metadata, f"{info.architecture}.expert_count": 8, f"{info.architecture}.expert_used_count": 2},
    )
    dense = model_cost(info)
    assert model_cost(moe).weight_bytes - dense.weight_bytes == experts.n_bytes // 4
    assert model_cost(moe).weight_macs - dense.weight_macs == experts.n_elements // 4


def test_sliding_window_layers_read_and_attend_to_their_window_only(tmp_path):
    """A gemma3 pair whose layers 0-4 and 6 slide over 64 tokens: past the window only layer 5's cache grows."""
    from engine.models.synthetic import ModelShape, PairSpec, write_pair

    target, _ = write_pair(tmp_path, PairSpec(shape=ModelShape(n_layer=7, sliding_window=64)))
    info = inspect_gguf(target)
    cost = model_cost(info)
    per_layer = info.n_head_kv * (info.head_dim_k + info.head_dim_v) * 2  # K and V, f16
    assert (cost.kv_bytes_per_position, cost.swa_kv_bytes_per_position) == (per_layer, 6 * per_layer)
    assert cost.swa_window == 64
    kv = lambda n_past: cost.bytes_read(n_past) - cost.weight_bytes  # noqa: E731
    assert kv(32) == 7 * 32 * per_layer  # inside the window every layer reads every position
    assert kv(4096) == 4096 * per_layer + 6 * 64 * per_layer  # past it, the six sliding layers stop at 64
    full, swa = cost.attention_macs_per_position, cost.swa_attention_macs_per_position
    assert (full, swa) == (info.n_head * (info.head_dim_k + info.head_dim_v), 6 * full)
    assert cost.flops(1, 4096) == 2.0 * (cost.weight_macs + 4096 * full + 64 * swa)


def test_a_hybrid_targets_replays_lower_the_predicted_speedup():
    """Qwen3.5-style: a partly kept draft costs a second verify of a + 2 tokens and keeps one more token."""
    target = ModelCost(10**9, 5 * 10**8, kv_bytes_per_position=0, attention_macs_per_position=0)
    draft = ModelCost(10**8, 5 * 10**7, kv_bytes_per_position=0, attention_macs_per_position=0)
    gpu = DeviceSpeed("gpu", 1e12, 1e15)  # memory-bound: every pass costs about one token's
    dense = predict(target, draft, gpu, acceptance=0.6, k_max=6)
    hybrid = predict(dataclasses.replace(target, replays=True), draft, gpu, acceptance=0.6, k_max=6)
    assert hybrid.plain_tokens_per_s == dense.plain_tokens_per_s
    for k in range(1, 7):
        p_partial = 1 - 0.6**k
        # each partial step adds one flat pass (plus the draft's feed) and one token
        v, d = dense.verify_ms_by_batch[1], dense.draft_ms
        tokens = (1 - 0.6 ** (k + 1)) / 0.4 + p_partial
        ms = k * d + d + v + p_partial * (v + d)
        assert hybrid.speedup_by_k[k] == pytest.approx(tokens / ms * v, rel=1e-3)
        assert hybrid.speedup_by_k[k] < dense.speedup_by_k[k]


def test_the_roofline_is_memory_bound_for_one_token_and_compute_bound_for_many():
    cost = ModelCost(weight_bytes=10**9, weight_macs=5 * 10**8, kv_bytes_per_position=0, attention_macs_per_position=0)
    cpu = DeviceSpeed("CPU", bandwidth_bytes_per_s=20e9, flops_per_s=200e9, overhead_ms=1.0)
    assert cpu.forward_ms(cost, 1, 0) == pytest.approx(1.0 + 50.0)  # 1 GB at 20 GB/s
    assert cpu.forward_ms(cost, 64, 0) == pytest.approx(1.0 + 1000 * 64 * 1e9 / 200e9)  # 64 GFLOP at 200
    gpu = DeviceSpeed("GPU", bandwidth_bytes_per_s=1e12, flops_per_s=100e12)
    assert gpu.forward_ms(cost, 1, 0) == pytest.approx(gpu.forward_ms(cost, 16, 0))  # flat: bandwidth-bound


def test_a_flat_verify_curve_gives_leviathans_speedup_and_a_rising_one_says_no():
    flat = Measured(verify_ms={1: 10.0, 32: 10.0}, draft_ms={1: 1.0, 32: 1.0}, acceptance_by_position=[0.7])
    p = predict(ModelCost(1, 1, 0, 0), ModelCost(1, 1, 0, 0), None, measured=flat, k_max=8)
    # per step: K draft tokens, a draft pass over K + 1 and one verify: c = 0.1 per draft pass
    for k in (1, 4, 8):
        expected = (1 - 0.7 ** (k + 1)) / (1 - 0.7) / ((k + 1) * 0.1 + 1)
        assert p.speedup_by_k[k] == pytest.approx(expected)
    assert p.basis == "measured" and p.pays and "pays here" in p.why()
    assert leviathan_speedup(0.7, 4, 0.1) > p.speedup_by_k[4]  # the draft's own verify-feed pass costs too
    # verify of K + 1 tokens costs K + 1 times one token (compute-bound, as on 2 CPU cores): no K pays
    steep = Measured(verify_ms={1: 10.0, 17: 170.0}, draft_ms={1: 1.0, 17: 17.0}, acceptance_by_position=[0.7])
    q = predict(ModelCost(1, 1, 0, 0), ModelCost(1, 1, 0, 0), None, measured=steep, k_max=8)
    assert q.best_k is None and not q.pays and "does not pay" in q.why() and "5.0x one token" in q.why()
    assert q.to_dict()["best_k"] is None and set(q.to_dict()) >= {
        "plain_tokens_per_s",
        "verify_ms_by_batch",
        "draft_ms",
        "speedup_by_k",
        "best_k",
        "basis",
    }


def test_priors_come_from_the_device_and_acceptance_overrides_either():
    cost = ModelCost(
        weight_bytes=4 * 10**9, weight_macs=2 * 10**9, kv_bytes_per_position=0, attention_macs_per_position=0
    )
    small = dataclasses.replace(cost, weight_bytes=10**8, weight_macs=5 * 10**7)
    gpu = DeviceSpeed("GPU", bandwidth_bytes_per_s=1e12, flops_per_s=100e12)
    p = predict(cost, small, gpu, n_past=0)
    assert p.basis == "prior" and p.plain_tokens_per_s == pytest.approx(1000 / 4.0)
    assert p.best_k is not None and p.speedup_by_k[p.best_k] > 1.5  # bandwidth-bound: speculation pays
    assert predict(cost, small, gpu, acceptance=0.0).best_k is None  # nothing accepted: nothing gained
    with pytest.raises(ValueError, match="device's speed or a measurement"):
        predict(cost, small, None)
    assert predict(cost, None, gpu).speedup_by_k == {}


def test_gpu_figures_from_nvml_and_the_table():
    report = probe(FakeNVML([rtx4090(0), h100(1)]))
    speeds = [gpu_speed(g) for g in report.gpus]
    assert speeds[0] is not None and speeds[1] is not None
    # the peak NVML computes from the memory clock and bus width, priced by the fitted GPU model of its generation
    peak = report.gpus[0].peak_memory_bandwidth_bytes_per_s
    assert speeds[0].bandwidth_bytes_per_s == pytest.approx(peak) and speeds[0].gpu_fit is not None
    assert speeds[0].generation == "Ada" and speeds[1].generation == "Hopper"
    assert speeds[0].flops_per_s == 330.3e12 and "table" in speeds[0].source  # the FP16-accumulate rate
    assert speeds[1].flops_per_s == 989e12
    unknown = dataclasses.replace(report.gpus[0], name="NVIDIA Future GPU", compute_capability="12.0")
    assert gpu_speed(unknown).flops_per_s == 60e12 and "compute capability 12.0" in gpu_speed(unknown).source
    assert gpu_speed(dataclasses.replace(report.gpus[0], peak_memory_bandwidth_bytes_per_s=None)) is None
    assert gpu_device(report) == speeds[0]
    assert gpu_device(probe(FakeNVML([]))) is None


def test_the_cpu_solve_recovers_the_figures_its_timings_came_from():
    cost = ModelCost(
        weight_bytes=200 * 2**20, weight_macs=100 * 2**20, kv_bytes_per_position=0, attention_macs_per_position=0
    )
    small = ModelCost(
        weight_bytes=30 * 2**20, weight_macs=15 * 2**20, kv_bytes_per_position=0, attention_macs_per_position=0
    )
    # a CPU as llama.cpp's kernels behave: one token waits on memory; from two on memory and compute add up,
    # and a multi-token pass reads 40% again
    truth = DeviceSpeed(
        "CPU", bandwidth_bytes_per_s=10e9, flops_per_s=100e9, overhead_ms=0.5, overlap=False, reread=0.4
    )
    times = ProbeTimes({b: truth.forward_ms(cost, b, 16) for b in (1, *PROBE_BATCHES)}, truth.forward_ms(small, 1, 16))
    got = solve_cpu_speed({"F16": (cost, small, times)}, beyond_ms=0.0)
    assert got.bandwidth_bytes_per_s == pytest.approx(10e9) and got.flops_per_s == pytest.approx(100e9)
    assert got.reread == pytest.approx(0.4) and got.overhead_ms == pytest.approx(0.5) and not got.overlap
    # the solved device predicts the timings it was solved from, and the passes between
    for b in (1, 2, 5, 16):
        assert got.forward_ms(cost, b, 16) == pytest.approx(truth.forward_ms(cost, b, 16))
    # a plain generation slower than its forward pass: the difference is a cost every pass pays
    assert solve_cpu_speed({"F16": (cost, small, times)}, beyond_ms=1.5).overhead_ms == pytest.approx(2.0)


def test_the_cpu_solve_tells_a_layers_fixed_cost_from_the_bandwidth():
    """Two pairs of 16 and 1 layers, one wide and one thin: their one-token passes give the bandwidth and what
    each layer costs beyond its bytes, so a narrow model of many layers is predicted slower per byte than a
    wide one. Without the thin pair the bandwidth carries the layers (layer_ms 0)."""

    def model(n_bytes: int, layers: int) -> ModelCost:
        return ModelCost(n_bytes, n_bytes // 2, 0, 0, n_layers=layers)

    truth = DeviceSpeed(
        "CPU", bandwidth_bytes_per_s=20e9, flops_per_s=100e9, overhead_ms=0.4, overlap=False, layer_ms=0.25
    )

    def timed(cost: ModelCost, small: ModelCost) -> tuple[ModelCost, ModelCost, ProbeTimes]:
        batches = {b: truth.forward_ms(cost, b, 16) for b in (1, *PROBE_BATCHES)}
        return cost, small, ProbeTimes(batches, truth.forward_ms(small, 1, 16))

    wide = timed(model(700 * 2**20, 16), model(90 * 2**20, 1))
    thin = timed(model(40 * 2**20, 16), model(17 * 2**20, 1))
    got = solve_cpu_speed({"F16": wide}, beyond_ms=0.0, thin=thin)
    assert got.layer_ms == pytest.approx(0.25) and got.bandwidth_bytes_per_s == pytest.approx(20e9)
    assert got.overhead_ms == pytest.approx(0.4)
    narrow = model(400 * 2**20, 24)
    assert got.forward_ms(narrow, 1, 16) == pytest.approx(truth.forward_ms(narrow, 1, 16))
    blind = solve_cpu_speed({"F16": wide}, beyond_ms=0.0)
    assert blind.layer_ms == 0.0 and blind.forward_ms(narrow, 1, 16) < truth.forward_ms(narrow, 1, 16)


def test_the_cpu_solve_tells_a_rows_fixed_cost_from_the_bandwidth_by_class():
    """The wide and thin pairs and, by class, two models that differ in their vocabulary alone: the output
    layer's 256-long rows weigh their bytes differently from the wide pair's, so the solve recovers each
    class's cost per row beside its bandwidth and the layers' cost, and a narrow model (more rows per byte)
    is predicted as slow as it runs. Without the vocabularies the bandwidth carries the rows, as before."""

    def model(n_bytes: int, layers: int, rows: int, cls: str = "F16") -> ModelCost:
        return ModelCost(
            n_bytes, n_bytes // 2, 0, 0, by_class=((cls, n_bytes, n_bytes // 2),), n_layers=layers,
            rows_by_class=((cls, rows),),
        )  # fmt: skip

    truth = DeviceSpeed(
        "CPU", bandwidth_bytes_per_s=20e9, flops_per_s=100e9, overhead_ms=0.4, overlap=False, layer_ms=0.02,
        class_rates={"Q8_0": (30e9, 100e9, 0.0)}, row_ns={"F16": 8.0, "Q8_0": 12.0},
    )  # fmt: skip

    def timed(cost: ModelCost, small: ModelCost) -> tuple[ModelCost, ModelCost, ProbeTimes]:
        batches = {b: truth.forward_ms(cost, b, 16) for b in (1, *PROBE_BATCHES)}
        return cost, small, ProbeTimes(batches, truth.forward_ms(small, 1, 16))

    def pairs(cls: str, per_weight: float) -> tuple:
        wide = timed(model(int(690e6 * per_weight), 16, 216_000, cls), model(int(80e6 * per_weight), 1, 43_000, cls))
        rows = timed(model(int(70e6 * per_weight), 2, 267_000, cls), model(int(20e6 * per_weight), 2, 70_000, cls))
        return wide, rows

    (wide, rows), (wide8, rows8) = pairs("F16", 1.0), pairs("Q8_0", 0.53)
    thin = timed(model(40 * 2**20, 16, 39_000), model(17 * 2**20, 1, 34_000))
    got = solve_cpu_speed({"F16": wide, "Q8_0": wide8}, 0.0, thin, {"F16": rows, "Q8_0": rows8})
    assert got.layer_ms == pytest.approx(0.02) and got.row_ns["F16"] == pytest.approx(8.0)
    assert got.row_ns["Q8_0"] == pytest.approx(12.0) and got.rates("Q8_0")[0] == pytest.approx(30e9)
    assert got.bandwidth_bytes_per_s == pytest.approx(20e9) and got.overhead_ms == pytest.approx(0.4)
    narrow = model(int(400e6 * 0.53), 24, 456_000, "Q8_0")  # 896 wide, as Qwen2.5 0.5B
    assert got.forward_ms(narrow, 1, 16) == pytest.approx(truth.forward_ms(narrow, 1, 16))
    blind = solve_cpu_speed({"F16": wide, "Q8_0": wide8}, 0.0, thin)
    assert blind.row_ns == {} and blind.forward_ms(narrow, 1, 16) < 0.9 * truth.forward_ms(narrow, 1, 16)


def test_a_models_rows_are_counted_with_the_output_layers_and_not_the_embeddings_lookup(pair):
    """rows_by_class: every matrix's rows (ggml's shape: the row length first), the output layer's vocabulary
    rows among them, the untied token embedding (a lookup of one row) not."""
    info = inspect_gguf(pair[0])
    matrices = [t for t in info.tensors if len(t.shape) >= 2 and t.name != "token_embd.weight"]
    output = next(t for t in matrices if t.name == "output.weight")
    assert model_cost(info).rows == sum(t.n_elements // t.shape[0] for t in matrices) > output.shape[1]


def test_the_cpu_solve_tells_the_attentions_rate_from_reading_the_cache():
    """A one-token pass deep in the context takes its extra positions' K and V at the bandwidth plus their
    attention at its own rate (on a CPU far below the matrix products'): the solve recovers that rate from
    the probe's pass at PROBE_LONG_PAST, and a deep pass of another model is then priced by it. Without that
    pass a one-token pass is charged nothing for its attention, as before (0)."""
    cost = ModelCost(700 * 2**20, 350 * 2**20, 16 * 2 * 256 * 2, 16 * 10 * 256, n_layers=16)
    small = ModelCost(90 * 2**20, 45 * 2**20, 2 * 256 * 2, 10 * 256, n_layers=1)
    truth = DeviceSpeed("CPU", bandwidth_bytes_per_s=20e9, flops_per_s=100e9, overlap=False, attention_flops_per_s=8e9)
    times = ProbeTimes(
        {b: truth.forward_ms(cost, b, PROBE_N_PAST) for b in (1, *PROBE_BATCHES)},
        truth.forward_ms(small, 1, PROBE_N_PAST),
        long=truth.forward_ms(cost, 1, PROBE_LONG_PAST),
    )
    got = solve_cpu_speed({"F16": (cost, small, times)}, beyond_ms=0.0)
    assert got.attention_flops_per_s == pytest.approx(8e9, rel=1e-3)
    other = ModelCost(400 * 2**20, 200 * 2**20, 28 * 2 * 256 * 2, 28 * 12 * 256, n_layers=28)
    for b, n_past in ((1, 2000), (4, 600)):
        assert got.forward_ms(other, b, n_past) == pytest.approx(truth.forward_ms(other, b, n_past), rel=1e-3)
    # 1600 positions more: their attention at 8 GFLOPs (28 x 12 x 256 x 2 x 1600 / 8e9 s = 34.4 ms) and their
    # K and V at 20 GB/s (28 x 2 x 256 x 2 bytes x 1600 = 45.9 MB: 2.3 ms)
    assert got.forward_ms(other, 1, 2000) - got.forward_ms(other, 1, 400) == pytest.approx(36.7, rel=0.01)
    # a hybrid's state update does not grow with the context: it is not charged at the attention's rate
    hybrid = ModelCost(400 * 2**20, 200 * 2**20, 0, 0, recurrent_macs=10**8, n_layers=28)
    rate_less = dataclasses.replace(got, attention_flops_per_s=0.0)
    for b in (1, 4):
        assert got.forward_ms(hybrid, b, 2000) == pytest.approx(rate_less.forward_ms(hybrid, b, 2000))
    blind = solve_cpu_speed({"F16": (cost, small, dataclasses.replace(times, long=None))}, beyond_ms=0.0)
    assert blind.attention_flops_per_s == 0.0
    assert blind.forward_ms(other, 1, 2000) - blind.forward_ms(other, 1, 400) < 2.5  # the K and V bytes alone


def test_batches_are_priced_by_the_probes_table_at_each_size_not_by_a_line(tmp_path):
    """llama.cpp's CPU kernels batch in tiles: a token beyond the first costs more in a pass of 2-6 tokens than
    in one of 12-16 (measured on the 2-core VM: 16-18 against 9-12 ms per GMAC for Q4_K). The table keeps
    each size's cost, a line through 2..16 would not; a size timed faster than a smaller one keeps the
    smaller one's cost."""
    cost = ModelCost(100 * 2**20, 2 * 10**9, 0, 0, by_class=(("Q4_K", 100 * 2**20, 2 * 10**9),), n_layers=16)
    small = ModelCost(10 * 2**20, 10**8, 0, 0, by_class=(("Q4_K", 10 * 2**20, 10**8),), n_layers=1)
    per_token = {2: 17.0, 3: 17.0, 4: 17.0, 5: 17.0, 6: 16.0, 8: 14.0, 12: 10.0, 16: 7.4}
    batches = {1: 10.0, **{b: 10.0 + 2.0 * (b - 1) * per_token[b] for b in PROBE_BATCHES}}
    batches[16] = batches[12] - 1.0  # timed faster than 12 tokens: noise
    got = solve_cpu_speed({"F16": (cost, small, ProbeTimes(batches, 2.0))}, beyond_ms=0.0)
    table = dict(got.batch_extra["F16"])
    assert table[2] == pytest.approx(17.0) and table[5] == pytest.approx(68.0) and table[16] == table[12]
    # another model of the class: its one-token pass plus its multiply-adds at the table's rate
    other = ModelCost(300 * 2**20, 3 * 10**9, 0, 0, by_class=(("Q4_K", 300 * 2**20, 3 * 10**9),), n_layers=16)
    one = got.forward_ms(other, 1, 16)
    assert got.forward_ms(other, 5, 16) == pytest.approx(one + 3.0 * 68.0)
    assert got.forward_ms(other, 7, 16) == pytest.approx(one + 3.0 * (table[6] + table[8]) / 2)
    # the class the model holds has no table of its own: F16's stands in
    assert got.extra_per_gmac("Q6_K", 4) == pytest.approx(table[4])
    # the table survives the cache
    save_cpu_speed("k", got, tmp_path)
    assert cached_cpu_speed("k", tmp_path) == got


def test_a_tune_in_the_history_is_this_pairs_measurement(pair, tmp_path):
    target, draft = pair
    db = tmp_path / "history.sqlite"
    load = LoadSettings(target, draft, ctx=2048)
    tune = {"verify_ms": {"1": 2.0, "4": 5.0}, "draft_ms": {"1": 0.5, "4": 0.8}, "acceptance_by_position": [0.8, 0.6]}
    with History(db) as h:
        assert measured_pair(target, draft, h) is None
        record_summary("tune", load, SpecSettings("draft-simple"), SamplingSettings(), tune, path=db)
        found = measured_pair(target, draft, h)
        assert found is not None and found.verify_ms == {1: 2.0, 4: 5.0} and found.acceptance_by_position == [0.8, 0.6]
        assert measured_pair(target, None, h) is None  # another pair: the draft differs
        # a later tune taken on a disturbed machine (a pass of 2 tokens 56x one, of 3 a fifth of one): passed over
        disturbed = {**tune, "verify_ms": {"1": 15.4, "2": 858.7, "3": 3.0, "4": 3.0}}
        record_summary("tune", load, SpecSettings("draft-simple"), SamplingSettings(), disturbed, path=db)
        assert measured_pair(target, draft, h).verify_ms == {1: 2.0, 4: 5.0}


def test_a_verify_curve_batching_cannot_give_is_implausible():
    assert plausible_verify_curve({1: 2.0, 2: 2.1, 4: 2.9, 8: 6.0})  # a GPU's flat start, a CPU's rise
    assert plausible_verify_curve({1: 10.0, 2: 19.0, 16: 150.0})  # compute-bound: near B passes of one
    assert not plausible_verify_curve({1: 15.4, 2: 858.7, 3: 3.0})
    assert not plausible_verify_curve({1: 10.0, 4: 5.0})  # four tokens in half the time of one
    assert not plausible_verify_curve({1: 1.0, 2: 4.0})  # two tokens slower than three passes of one
    assert not plausible_verify_curve({2: 3.0}) and not plausible_verify_curve({1: 0.0, 2: 1.0})


def test_local_pairs_are_predicted_from_their_tune_or_the_device(pair, tmp_path):
    """What the library shows beside each pair: the device's prediction until the pair is tuned here, then the
    tune's; a file that cannot be read says why, and the other pairs are still predicted."""
    target, draft = pair
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"GGUF" + b"\0" * 12)
    device = DeviceSpeed("CPU", bandwidth_bytes_per_s=13e9, flops_per_s=70e9, overhead_ms=0.4, source="measured")
    pairs = [(str(target), str(draft)), (str(broken), str(draft))]
    db = tmp_path / "history.sqlite"
    with History(db) as h:
        got = predict_pairs(pairs, device, history=h)
        prior = got[pairs[0]]
        assert not isinstance(prior, str) and prior.basis == "prior" and prior.device == device
        direct = predict(model_cost(inspect_gguf(target)), model_cost(inspect_gguf(draft)), device)
        assert prior.plain_tokens_per_s == direct.plain_tokens_per_s and prior.speedup_by_k == direct.speedup_by_k
        assert isinstance(got[pairs[1]], str) and "broken.gguf" in got[pairs[1]]
        assert prior.speed_text().startswith("~") and "tok/s" in prior.speed_text()
        tune = {"verify_ms": {"1": 2.0, "5": 2.4}, "draft_ms": {"1": 0.1}, "acceptance_by_position": [0.9] * 4}
        load = LoadSettings(target, draft, ctx=2048)
        record_summary("tune", load, SpecSettings("draft-simple"), SamplingSettings(), tune, path=db)
        measured = predict_pairs(pairs[:1], None, history=h)[pairs[0]]
        assert not isinstance(measured, str) and measured.basis == "measured" and measured.pays
        assert measured.plain_tokens_per_s == pytest.approx(1000 / 2.0)
        assert measured.speed_text().endswith(f"at K={measured.best_k})")
        # without a tune or a device there is nothing to predict from: said, not raised
        assert "no device" in predict_pairs([(str(draft), str(target))], None, history=h)[(str(draft), str(target))]


@pytest.mark.server
def test_the_cpu_probe_times_llama_cpp_once_and_then_reads_its_cache(tmp_path):
    """The probe is real: a model of a real one's proportions in an engine worker, timed by llama.cpp; its
    scratch models are gone afterwards, and a probe asked to stop caches nothing."""
    stopped = threading.Event()
    stopped.set()
    with pytest.raises(ProbeCancelled):
        probe_cpu_speed(cache=tmp_path, cancel=stopped)
    assert not list(tmp_path.glob("cpu-*.json"))
    said: list[str] = []
    speed = probe_cpu_speed(progress=said.append, reps=2, cache=tmp_path)
    assert speed.name == "CPU" and speed.bandwidth_bytes_per_s > 0 and speed.flops_per_s > 0
    assert speed.overhead_ms >= 0 and speed.source.startswith("measured")
    assert any("F16 forward passes" in s for s in said)
    assert not (cache_dir() / "cpu-probe").exists(), "the 1.4 GB of scratch models were deleted"
    # llama-quantize made a file of each class alone, and each was timed: its own figures, cached too
    assert set(speed.class_rates) == set(WEIGHT_CLASSES) and not speed.overlap
    assert all(bw > 0 and fl > 0 and r >= 0 for bw, fl, r in speed.class_rates.values())
    assert any("Q6_K forward passes" in s for s in said) and any("Q5_0" in s for s in said)
    # and a matrix row's fixed cost by class, from the two vocabularies (0 where noise left none)
    assert any("what a matrix row costs" in s for s in said)
    assert set(speed.row_ns) == set(WEIGHT_CLASSES) and all(ns >= 0 for ns in speed.row_ns.values())
    again: list[str] = []
    assert probe_cpu_speed(progress=again.append, cache=tmp_path) == speed and again == []


@pytest.mark.server
def test_spectune_predict_prints_the_json_and_refuses_a_bad_acceptance(pair, tmp_path):
    target, draft = pair
    argv = [sys.executable, "-m", "engine.cli", "predict", "--target", str(target), "--draft", str(draft)]
    env = own_cache_env(tmp_path)  # the CPU probe it takes stays out of the user's cache
    r = subprocess.run([*argv, "--cpu", "--prior", "--json"], capture_output=True, text=True, timeout=580, env=env)
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    assert got["basis"] == "prior" and got["device"]["name"] == "CPU"
    assert got["plain_tokens_per_s"] > 0 and all(math.isfinite(s) for s in got["speedup_by_k"].values())
    assert set(got["verify_ms_by_batch"]) >= {"1", "2", "5"} and "speculation" in got["why"]
    r = subprocess.run([*argv, "--acceptance", "2"], capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 2 and "--acceptance must be between 0 and 1" in r.stderr
    assert list((tmp_path / "device-speed").glob("cpu-*.json")), "the probe was kept in the test's cache"


def test_the_planner_uses_the_gpu_then_this_cpus_last_probe_then_an_assumption(tmp_path):
    gpu_report = probe(FakeNVML([rtx4090(0)]))
    assert local_device(gpu_report, tmp_path) == gpu_device(gpu_report)
    cpu_report = probe(FakeNVML([]))
    assumed = local_device(cpu_report, tmp_path)
    assert assumed == assumed_cpu_speed(cpu_report.cpu.logical_cores) and "assumed" in assumed.source
    # more cores, more compute; the bandwidth stops where two memory channels do
    assert assumed_cpu_speed(16).flops_per_s == 8 * assumed_cpu_speed(2).flops_per_s
    assert assumed_cpu_speed(64).bandwidth_bytes_per_s == assumed_cpu_speed(32).bandwidth_bytes_per_s
    measured = DeviceSpeed("CPU", bandwidth_bytes_per_s=13e9, flops_per_s=70e9, overhead_ms=0.4, source="measured")
    save_cpu_speed(cpu_key("build 1"), measured, tmp_path)
    # kept for its build, and as this processor's newest probe, which the planner reads without an engine
    assert cached_cpu_speed(cpu_key("build 1"), tmp_path) == measured
    assert cached_cpu_speed(cpu_key("build 2"), tmp_path) is None
    assert latest_cpu_speed(tmp_path) == measured
    assert local_device(cpu_report, tmp_path) == measured


def test_each_weight_class_runs_at_its_own_measured_rates():
    """A Q4_K matrix unpacked block by block and a Q8_0 one on int8 dot products: a device with rates per
    class charges each class's products at its own, and anything else at the plain figures."""
    types = ("F16", "bf16", "F32", "Q8_0", "Q4_0", "Q5_0", "Q5_1", "Q4_K", "Q5_K", "Q6_K", "IQ4_XS")
    assert [weight_class(t) for t in types] == [
        "F16",
        "F16",
        "F16",
        "Q8_0",
        "Q4_K",
        "Q5_0",
        "Q5_0",
        "Q4_K",
        "Q6_K",
        "Q6_K",
        "Q6_K",
    ]
    # the types the probe does not time are known as borrowed, so that a prediction can say so
    assert [t for t in types if is_borrowed(t)] == ["Q4_0", "Q5_1", "Q5_K", "IQ4_XS"]
    cost = ModelCost(
        weight_bytes=3_000_000,
        weight_macs=4_000_000,
        kv_bytes_per_position=1000,
        attention_macs_per_position=0,
        by_class=(("Q4_K", 1_000_000, 2_000_000), ("Q8_0", 2_000_000, 2_000_000)),
    )
    plain = DeviceSpeed("CPU", bandwidth_bytes_per_s=1e9, flops_per_s=1e9, overhead_ms=0.5)
    # a roofline over everything (a GPU's way: reading and computing overlap)
    assert plain.forward_ms(cost, 1, 0) == pytest.approx(0.5 + 1000 * max(3e6 / 1e9, 8e6 / 1e9))
    rated = dataclasses.replace(plain, class_rates={"Q4_K": (2e9, 4e9, 0.5), "Q8_0": (1e9, 8e9, 0.25)}, overlap=False)
    # one token waits on memory alone: Q4_K 0.5 ms, Q8_0 2, the KV cache (100 positions) at 1 GB/s 0.1
    assert rated.forward_ms(cost, 1, 100) == pytest.approx(0.5 + 0.5 + 2 + 0.1)
    # eight: Q4_K 0.5 x 1.5 + 8; Q8_0 2 x 1.25 + 4 (the weights partly read again)
    assert rated.forward_ms(cost, 8, 0) == pytest.approx(0.5 + 8.75 + 6.5)


def test_verifying_a_batch_reads_more_of_an_moe_s_experts_and_speculation_pays_less():
    """Each token of a verify batch routes to its own experts: a batch of B reads 1 - (1 - share)^B of them.
    Measured here on a generated qwen3moe (32 experts, 2 used, 8 layers, F16) with specrt's timed passes:
    8 tokens cost 7.4x one token, where the dense model of the same active size took 2.9x."""
    from engine.planning.advice.model_numbers import model_info_from_numbers

    numbers = dict(architecture="qwen3moe", n_layer=48, n_embd=2048, n_head=32, n_head_kv=4, head_dim=128)
    numbers.update(n_ff=6144, n_vocab=151936, n_ctx_train=40960, weight_type="Q4_K", bits_per_weight=4.9)
    moe = model_cost(model_info_from_numbers(**numbers, n_expert=128, n_expert_used=8, n_ff_exp=768))
    assert moe.expert_share == 8 / 128
    assert moe.experts_touched(1) == pytest.approx(1 / 16)
    assert moe.experts_touched(5) == pytest.approx(1 - (15 / 16) ** 5)
    assert moe.bytes_read(512, 1) == moe.bytes_read(512)
    assert moe.bytes_read(512, 5) > 2.5 * moe.bytes_read(512, 1)  # most bytes of an MoE are its experts
    # a dense model with the MoE's active bytes: its verify costs what one token does on a GPU
    dense = dataclasses.replace(moe, expert_share=0.0, expert_bytes_by_class=())
    gpu = DeviceSpeed("GPU", 1.0e12, 1.5e14, 0.3)
    assert gpu.forward_ms(dense, 5, 512) == pytest.approx(gpu.forward_ms(dense, 1, 512))
    assert gpu.forward_ms(moe, 5, 512) > 2.5 * gpu.forward_ms(moe, 1, 512)
    p_dense = predict(dense, dense, gpu, acceptance=0.8)
    p_moe = predict(moe, dense, gpu, acceptance=0.8)
    assert max(p_moe.speedup_by_k.values()) < max(p_dense.speedup_by_k.values())


def test_each_shipped_workload_set_has_its_prior_measured_on_a_real_pair_in_both_modes():
    from engine.core.workloads import shipped_names
    from engine.planning.constants import ACCEPTANCE_PRIOR
    from engine.planning.speed.speed_model import (
        ACCEPTANCE_PRIORS,
        ACCEPTANCE_PRIORS_RAW,
        ACCEPTANCE_PRIORS_SOURCE,
        acceptance_prior,
        acceptance_prior_text,
    )

    assert set(ACCEPTANCE_PRIORS) == set(ACCEPTANCE_PRIORS_RAW) == set(shipped_names())
    assert all(0.0 < p < 1.0 for p in [*ACCEPTANCE_PRIORS.values(), *ACCEPTANCE_PRIORS_RAW.values()])
    assert "Qwen2.5-Coder" in ACCEPTANCE_PRIORS_SOURCE and "bench/acceptance_priors.py" in ACCEPTANCE_PRIORS_SOURCE
    # free writing is the hardest text to draft, in either mode
    assert min(ACCEPTANCE_PRIORS, key=lambda w: ACCEPTANCE_PRIORS[w]) == "creative"
    assert acceptance_prior("creative", chat=False) == ACCEPTANCE_PRIORS_RAW["creative"]
    assert acceptance_prior(None) == acceptance_prior("my own text") == ACCEPTANCE_PRIOR
    # wherever a prior is shown it says it is one
    assert "(prior: the creative set on a real Qwen2.5-Coder pair" in acceptance_prior_text("creative")
    assert "prior" in acceptance_prior_text(None)
    cost = ModelCost(10**9, 5 * 10**8, kv_bytes_per_position=0, attention_macs_per_position=0)
    draft = ModelCost(10**8, 5 * 10**7, kv_bytes_per_position=0, attention_macs_per_position=0)
    gpu = DeviceSpeed("gpu", 1e12, 1e15)
    by_set = {w: predict(cost, draft, gpu, workload=w) for w in ("creative", "summarization")}
    assert by_set["creative"].acceptance == [ACCEPTANCE_PRIORS["creative"]]
    assert by_set["summarization"].acceptance == [ACCEPTANCE_PRIORS["summarization"]]
    assert by_set["creative"].speedup_by_k[4] < by_set["summarization"].speedup_by_k[4]


def test_per_layer_embedding_tables_are_looked_up_not_read_whole():
    """Gemma 4 E2B's per-layer embedding table holds half its parameters, but a token reads one row of it:
    the speed model counts the catalog E2B's bytes per token by the 2.3B it uses, not the 4.6B it stores."""
    from engine.models.catalog import load_catalog
    from engine.planning.advice.model_numbers import model_info_from_architecture

    arch = load_catalog().model("gemma-4-e2b-it").architecture
    info = model_info_from_architecture(arch)
    table = next(t for t in info.tensors if t.name == "per_layer_token_embd.weight")
    cost = model_cost(info)
    assert table.n_bytes > 0.4 * sum(t.n_bytes for t in info.tensors)
    assert cost.weight_bytes == pytest.approx(2 * arch.active_params, rel=0.05)  # F16: 2 bytes a parameter


def test_a_prediction_shows_the_band_of_its_held_out_errors_and_doubts_a_verdict_inside_it():
    """engine.planning.speed.prediction_band: a probed CPU's prior carries the dense band, a measured curve the
    calibrated one, a GPU's figures none (and say they are unchecked); a speedup within the band of x1.00
    "may not pay"."""
    from engine.planning.speed.prediction_band import MEASURED, PRIOR_DENSE, PRIOR_MOE, PRIOR_SMALL, SMALL_MODEL_BYTES

    cost = ModelCost(10**9, 5 * 10**8, kv_bytes_per_position=0, attention_macs_per_position=0)
    draft = ModelCost(10**8, 5 * 10**7, kv_bytes_per_position=0, attention_macs_per_position=0)
    cpu = DeviceSpeed("CPU", 20e9, 200e9, overlap=False, source="measured")
    p = predict(cost, draft, cpu, acceptance=0.7)
    assert p.band == PRIOR_DENSE and f"±{100 * PRIOR_DENSE.plain:.0f} %" in p.speed_text()
    assert p.to_dict()["band"]["plain"] == PRIOR_DENSE.plain
    moe = dataclasses.replace(cost, expert_share=0.1)
    assert predict(moe, draft, cpu, acceptance=0.7).band == PRIOR_MOE
    small = dataclasses.replace(cost, weight_bytes=SMALL_MODEL_BYTES - 1)
    assert predict(small, draft, cpu, acceptance=0.7).band == PRIOR_SMALL
    gpu = predict(cost, draft, DeviceSpeed("gpu", 1e12, 1e15), acceptance=0.7)
    assert gpu.band is None and "not yet checked on this kind of device" in gpu.speed_text()
    assumed = predict(cost, draft, dataclasses.replace(cpu, assumed=True), acceptance=0.7)
    assert assumed.band is None and "not measured yet" in assumed.speed_text()
    # a measured curve where K=1 gains a few percent: inside the calibrated band, so it may not pay
    near = Measured(verify_ms={1: 10.0, 2: 10.6, 3: 11.0}, draft_ms={1: 0.5}, acceptance_by_position=[0.2])
    q = predict(cost, draft, None, measured=near, k_max=2)
    best = max(q.speedup_by_k.values())
    assert q.band == MEASURED and abs(best - 1) <= MEASURED.speedup, q.speedup_by_k
    assert q.verdict == "may not pay" and "may not pay" in q.speed_text() and "may not pay here" in q.why()
    far = Measured(verify_ms={1: 10.0, 2: 10.2, 3: 10.4}, draft_ms={1: 0.2}, acceptance_by_position=[0.9])
    assert predict(cost, draft, None, measured=far, k_max=2).verdict == "pays"


def test_a_hybrid_models_state_is_what_llama_server_logs_and_copying_it_each_step_is_priced_on_a_gpu():
    """A hybrid (Gated DeltaNet) target restores a separate draft's rejection from a copy of its recurrent state,
    and a hybrid draft copies its own around every draft (cost_model's checkpoints). The state's size is what
    llama-server logs for these models (62.8 MiB a checkpoint of Qwen3.6-35B-A3B's, which shares Qwen3.5's
    architecture; 82.079 MiB with the 0.8B draft's; 149.6 MiB of a 27B's), and on a GPU each copy costs
    STATE_COPY_MS_PER_MIB: more than a target step, so a separate draft does not pay there, as published runs
    on an RTX 3090 measured (x0.26 to x0.29 for the 35B-A3B, x0.70 for the 27B)."""
    from engine.models.catalog import load_catalog
    from engine.planning.advice.named_models import resolve
    from engine.planning.speed.gpu_speed import STATE_COPY_MS_PER_MIB, load_fit
    from engine.planning.speed.gpu_table import described_report, find_gpu

    catalog = load_catalog()
    target, big = (model_cost(resolve(n, catalog).info) for n in ("qwen3.5-35b-a3b:Q4_K_M", "qwen3.5-27b:Q4_K_M"))
    draft = model_cost(resolve("qwen3.5-0.8b:Q4_K_M", catalog).info)
    mib = 2**20
    assert target.checkpoint_bytes / mib == pytest.approx(62.8, abs=0.05)
    assert (target.checkpoint_bytes + draft.checkpoint_bytes) / mib == pytest.approx(82.079, abs=0.01)
    assert big.checkpoint_bytes / mib == pytest.approx(149.6, abs=0.05)
    gpu = gpu_device(described_report(find_gpu("RTX 3090"), 1, cpu=None))
    assert gpu is not None
    p = predict(target, draft, gpu, acceptance=0.7)
    copy_ms = (target.checkpoint_bytes + 2 * draft.checkpoint_bytes) / mib * STATE_COPY_MS_PER_MIB
    assert p.checkpoint_ms == pytest.approx(copy_ms) and p.checkpoint_ms > p.verify_ms_by_batch[1]
    no_state = [dataclasses.replace(m, checkpoint_bytes=0) for m in (target, draft)]
    free = predict(no_state[0], no_state[1], gpu, acceptance=0.7)
    assert free.checkpoint_ms == 0.0 and all(p.speedup_by_k[k] < free.speedup_by_k[k] for k in p.speedup_by_k)
    assert not p.pays and "copies the hybrid model's recurrent state to host memory" in p.why()
    # such predictions carry the band of the published runs that paid for copies, the others theirs
    assert p.band is not None and p.band.speedup == load_fit().band["speedup_copies"]
    assert free.band is not None and free.band.speedup == load_fit().band["speedup"]
    # the target's own MTP block rolls back on the device: nothing is copied, and its runs' band judges it
    from engine.planning.speed.model_cost import mtp_cost

    block = mtp_cost(resolve("qwen3.5-27b:Q4_K_M", catalog).info)
    assert block is not None
    mtp = predict(big, block, gpu, acceptance=0.7)
    assert mtp.checkpoint_ms == 0.0 and mtp.method == "draft-mtp" and mtp.pays
    assert mtp.band is not None and mtp.band.speedup == load_fit().band["speedup_mtp"]
    # with requests at once every slot copies its own state, and replays join the next verify pass
    from engine.planning.speed.speed_model import concurrent_speedups

    shared = concurrent_speedups(target, draft, gpu, 2, acceptance=0.7)
    assert max(shared.values()) < 1.0
    assert all(shared[k] < v for k, v in concurrent_speedups(*no_state, gpu, 2, acceptance=0.7).items())
    # a CPU copies within host memory: a read and a write at its bandwidth
    cpu = DeviceSpeed("CPU", 20e9, 200e9, overlap=False)
    assert cpu.state_copy_ms(target.checkpoint_bytes) == pytest.approx(1000.0 * 2 * target.checkpoint_bytes / 20e9)
    # the experts kept in host memory (--n-cpu-moe): the recurrent state stays on the GPU, and so do its copies
    from engine.planning.speed.model_cost import split_cost

    on_gpu, on_host = split_cost(resolve("qwen3.5-35b-a3b:Q4_K_M", catalog).info, lambda name: "_exps" in name)
    assert on_gpu.checkpoint_bytes == target.checkpoint_bytes and on_gpu.replays
    split = predict(on_gpu, draft, gpu, acceptance=0.7, host=cpu, target_on_host=on_host)
    assert split.checkpoint_ms == pytest.approx(p.checkpoint_ms) and split.band == p.band
    # a tune's passes are timed bare: with the device known, its copies are added to them too
    tuned = Measured(verify_ms={1: 10.0, 2: 10.5, 3: 11.0, 5: 12.0}, draft_ms={1: 1.0, 2: 1.1, 3: 1.2, 5: 1.4})
    bare = predict(target, draft, None, measured=tuned, acceptance=0.7, k_max=4)
    priced = predict(target, draft, gpu, measured=tuned, acceptance=0.7, k_max=4)
    assert bare.checkpoint_ms == 0.0 and priced.checkpoint_ms == pytest.approx(p.checkpoint_ms)
    assert all(priced.speedup_by_k[k] < bare.speedup_by_k[k] for k in bare.speedup_by_k) and priced.basis == "measured"
    # a dense pair copies nothing
    dense = ModelCost(10**9, 5 * 10**8, kv_bytes_per_position=0, attention_macs_per_position=0)
    assert predict(dense, dataclasses.replace(dense, weight_bytes=10**8), gpu, acceptance=0.7).checkpoint_ms == 0.0
