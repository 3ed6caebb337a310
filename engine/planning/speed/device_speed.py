"""What this machine's devices sustain for llama.cpp: memory bandwidth and compute, for the speed model.

GPUs: the peak bandwidth NVML reports (memory clock x bus width), and dense FP16 tensor throughput from
SpecTune's GPU table by name (engine.planning.speed.gpu_table), with a guess by compute capability behind it,
since NVML says nothing about FLOPs. What llama.cpp's CUDA kernels make of them is engine.planning.speed.gpu_speed's
model, fitted to published measurements (bench/gpu_prediction.py).

The CPU: measured when it can be. engine.measure.device_probe writes a model of a real one's
proportions (PROBE_SHAPE), loads it in an engine worker and times llama.cpp's own forward passes and a
short plain generation; solve_cpu_speed turns those timings into bandwidth, compute and a fixed cost
per pass. About a minute, once per machine and llama.cpp build: the result is cached here (cpu_key,
cached_cpu_speed, save_cpu_speed), and the newest one stands for the processor (latest_cpu_speed).
Until then, assumed_cpu_speed guesses from the core count and says so; local_device picks what the
planner uses.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import platform
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import numpy as np

from engine.core.paths import cache_dir
from engine.models.synthetic import ModelShape
from engine.planning.hardware import GpuInfo, HardwareReport
from engine.planning.speed.cost_model import CostCurve
from engine.planning.speed.gpu_speed import STATE_COPY_MS_PER_MIB, GpuFit, load_fit
from engine.planning.speed.gpu_table import lookup
from engine.planning.speed.model_cost import ModelCost

# dense FP16 tensor TFLOPs of a modest card of each generation, for a card SpecTune's GPU table does not know
TFLOPS_BY_COMPUTE_MAJOR = {7: 25.0, 8: 40.0, 9: 400.0, 10: 1000.0, 12: 60.0}

# an unmeasured CPU (assumed_cpu_speed)
ASSUMED_BANDWIDTH_PER_CORE = 7e9
ASSUMED_BANDWIDTH_CAP = 40e9
# the 2-core VM's slower hours, as the probe of 0.37B models measured them (its faster hours reach 11 GB/s
# and 85 GFLOPs a core)
ASSUMED_FLOPS_PER_CORE = 60e9
ASSUMED_OVERHEAD_MS = 0.2  # measured 0 to 0.45 there
ASSUMED_REREAD = 0.1  # measured 0 to 0.3 there for F16, Q8_0 and Q4_K_M

# The probe's target: a 16-layer 1280-wide decoder with a 32000-token vocabulary, about 0.37B parameters
# (730 MB as F16, 390 as Q8_0, 230 as Q4_K_M), so that every weight class reads several times what a
# desktop CPU's last-level cache holds, as the models users run do. An earlier probe (8 layers of 1024, a
# vocabulary of a few hundred tokens: 190 MB as F16, 57 as Q4_K_M) measured the quantized classes 20-30 %
# slower per byte than 1.4B-parameter models of the same class ran on that VM, and those were predicted
# 19-35 % too slow.
PROBE_SHAPE = ModelShape(n_embd=1280, n_layer=16, n_head=10, n_head_kv=2, n_ff=3584, n_ctx_train=2048)
PROBE_VOCAB = 32000
# Its draft is its first layer and the output layer.
PROBE_DRAFT_LAYERS = 1
# A thin pair of as many layers (256 wide: 1.5 MB a layer as F16, against 46 MB): the difference between
# its target's and draft's one-token passes is mostly the layers' fixed cost, which tells that cost from
# the bandwidth (the wide pair's difference is both). On the 2-core VM the real Qwen2.5-Coder 0.5B (24
# layers of 896) ran its one-token pass 35 % slower than its bytes at the probe's bandwidth said, and Gemma
# 3 270M (18 layers of 640) 27 %, while the 1.5B (28 of 1536) ran within 10 %. (Tried on 2026-12-03 and not
# kept: an 8-layer draft, whose quantized copies read more than the VM's 32 MB L3 where the one-layer Q4_K
# draft reads 33 MB, and a 64-wide thin pair, whose layers' bytes are negligible wherever they come from.
# Q4_K still measured 27.5 GB/s, the fixed cost 0.020 ms a layer, and the real 1.5B Q4_K_M was still
# predicted 20 % too slow.)
PROBE_THIN_SHAPE = ModelShape(n_embd=256, n_layer=16, n_head=4, n_head_kv=2, n_ff=704, n_ctx_train=2048)
# Two models of 2 layers of 256, one with a 262144-token vocabulary and one with 65536, each timed alone
# (PROBE_ROWS_VOCABS): their one-token passes differ only by 196608 rows of the output layer, each 256 long,
# which weigh as many bytes as 77 of the wide probe's 1280-wide rows do. A CPU kernel pays a fixed time per
# row beyond its bytes (ggml hands each thread rows and sets up each row's dot product), so the wide probe
# alone folded that time into its bandwidth, and a narrower model was predicted too fast: on the 2-core VM
# the real Qwen2.5-Coder 0.5B (896 wide, mostly Q5_0) by 11-23 % and Gemma 3 270M (640 wide, a 262144-token
# output layer) by 29-37 %. Measured there on 2-layer models of 256 and 1024 wide (session 20): about 8 ns a
# row for F16, 12 for Q8_0 and Q5_0, 16 for Q6_K, and none for the repacked Q4_K.
PROBE_ROWS_SHAPE = ModelShape(n_embd=256, n_layer=2, n_head=4, n_head_kv=2, n_ff=704, n_ctx_train=2048)
PROBE_ROWS_VOCABS = (262144, 65536)
# the two are timed side by side this many times, in alternating order, and the median difference kept
PROBE_ROWS_ROUNDS = 7
# the batch sizes the probe times besides one token: every size speculation verifies with K = 1..7, and two
# beyond, which the batch tables (DeviceSpeed.batch_extra) are interpolated and extended from
PROBE_BATCHES = (2, 3, 4, 5, 6, 8, 12, 16)
# where in the context the probe's passes run: a short prompt's worth, so that they time the weights
PROBE_N_PAST = 16
# and where its F16 target's one-token pass is timed again, so that the difference is the attention over
# the positions between: on a CPU llama.cpp attends position by position and head by head, far slower than
# reading the cache. On the 2-core VM the real Qwen2.5-Coder 1.5B's one-token pass took 29.4 ms at position
# 16 and 36.6 at 400, where reading 384 more positions' K and V (11 MB) takes 0.3 ms. At 1024 (probe v7) the
# attention there added about 2 ms to a 16 ms pass, and the rate came out at 18-52 GFLOPs from probe to probe,
# with outliers of 80-319 and one 0: 2048 doubles what is measured against the same noise
PROBE_LONG_PAST = 2048
# the deep pass and the pass at PROBE_N_PAST are timed side by side this many times, in alternating order,
# and the median of their differences taken: v7 took each pass's fastest of three apart, and the difference
# of two minima carried both passes' noise
PROBE_LONG_ROUNDS = 9
# the weight classes the probe times besides F16 (model_cost.WEIGHT_CLASSES), and the llama-quantize type
# that makes a file of that class alone (with --pure: no Q6_K layers in a Q4_K file, as Q4_K_M would have)
PROBE_QUANTS = {"Q8_0": "Q8_0", "Q5_0": "Q5_0", "Q4_K": "Q4_K_M", "Q6_K": "Q6_K"}
# bumped when the probe measures otherwise, so that an older probe's figures are measured again
# (4: Q5_0 and Q6_K timed, each class on a file of its type alone; 5: the engine's timed passes start warm,
# which made the one-layer drafts' passes up to 2x faster; 6: batch tables by class, a layer's fixed cost;
# 7: the attention's own rate, from a pass deep in the context; 8: that pass at 2048, paired with the short one;
# 9: a row's fixed cost by class, from two vocabularies)
PROBE_VERSION = 9


@dataclass(frozen=True)
class DeviceSpeed:
    """What a device sustains for llama.cpp's forward passes.

    A GPU (overlap True) reads the weights while it computes: a pass takes the longer of the two, so a
    batch costs what one token does until compute catches up (a roofline). llama.cpp's CPU kernels
    (overlap False) hide the arithmetic of one token's matrix-vector products behind reading the
    weights, but not that of a batch: a pass of one token costs reading the weights, and a pass of B
    tokens from two on costs reading them, plus a share of them read again (``reread``: the
    multi-token kernels walk the weights in other blocks than the one-token path), plus B times the
    compute of one token. Measured on a 2-core x86-64 VM: a 1.4B Q8_0 model took 87 ms for one
    token, 137 for two and 459-522 for sixteen; a line through 2 to 16 tokens meets zero at about 90 ms,
    one token's pass alone. That line is the fallback: a probed CPU prices a batch by its class's table
    (``batch_extra``), what each batch size cost beyond one token per multiply-add, since the kernels'
    tiles make a token in a small batch dearer than one in a large batch; and each layer of a pass
    costs ``layer_ms`` beyond its bytes."""

    name: str
    bandwidth_bytes_per_s: float
    flops_per_s: float
    overhead_ms: float = 0.0
    source: str = ""  # where the figures come from: "NVML + table", "measured probe", ...
    # (bandwidth, FLOPs, reread) by weight class where they were measured apart (the CPU probe); the
    # plain figures stand for F16 and for any class not here
    class_rates: dict[str, tuple[float, float, float]] = field(default_factory=dict)
    overlap: bool = True
    reread: float = 0.0  # the plain figures' share of weights read again by a multi-token pass
    assumed: bool = False  # guessed (an unmeasured CPU), not measured or looked up
    # What a pass of B tokens costs beyond a pass of one, by weight class, in ms per billion multiply-adds of
    # one token: ((B, ms), ...) from B = 2, as the CPU probe timed it at each batch size speculation verifies.
    # Not a line: llama.cpp's multi-token kernels work in tiles of rows, and on the 2-core VM a token beyond
    # the first cost a Q4_K model 16-18 ms per GMAC in passes of 2 to 6 tokens but 9-12 in passes of 12 to
    # 16, so a line through 2..16 charged the small verify batches about half of what they took. Where the
    # device has tables they replace the line (flops, reread), a class without one taking F16's; between and
    # beyond the timed sizes a table is interpolated and extended along its last step.
    batch_extra: dict[str, tuple[tuple[int, float], ...]] = field(default_factory=dict)
    # what each layer of a pass costs beyond its bytes (ggml runs a layer as a dozen operations, each with a
    # hand-off between the threads): a narrow model with many layers runs slower per byte than a wide one
    layer_ms: float = 0.0
    # the rate a CPU runs the attention at, token by token (0: not measured). llama.cpp's CPU kernels attend
    # position by position and head by head, so the attention over a long context costs a one-token pass far
    # more than reading the cache does: the probe times it (device_speed.solve_attention_flops)
    attention_flops_per_s: float = 0.0
    # what each matrix row a one-token pass runs through costs beyond its bytes, in ns, by weight class (a class
    # without a figure takes F16's; none: the bandwidth carries the rows, as before the probe timed them)
    row_ns: dict[str, float] = field(default_factory=dict)
    # a GPU: llama.cpp's CUDA kernels as engine.planning.speed.gpu_speed models them, on bandwidth_bytes_per_s
    # (the peak) and flops_per_s, for a card of this generation in SpecTune's GPU table ("Ada"; "" unknown)
    gpu_fit: GpuFit | None = None
    generation: str = ""

    def state_copy_ms(self, n_bytes: int) -> float:
        """One copy of a hybrid model's recurrent state out of this device's memory or back (cost_model's
        checkpoints): across to host memory for a GPU (gpu_speed.STATE_COPY_MS_PER_MIB), a read and a write of
        host memory for a CPU."""
        if self.gpu_fit is not None:
            return n_bytes / 2**20 * STATE_COPY_MS_PER_MIB
        return 1000.0 * 2 * n_bytes / self.bandwidth_bytes_per_s

    def rows_ms(self, cost: ModelCost) -> float:
        """The rows' fixed time in a pass of one token (a batch's tokens share each row's set-up)."""
        if not self.row_ns:
            return 0.0
        plain = self.row_ns.get("F16", 0.0)
        return 1e-6 * sum(n * self.row_ns.get(cls, plain) for cls, n in cost.rows_by_class)

    def rates(self, cls: str) -> tuple[float, float, float]:
        return self.class_rates.get(cls, (self.bandwidth_bytes_per_s, self.flops_per_s, self.reread))

    def extra_per_gmac(self, cls: str, batch: int) -> float | None:
        """ms per billion multiply-adds that a pass of ``batch`` tokens adds to a pass of one, from the class's
        table (F16's for a class without one); None without tables."""
        curve = self._batch_curves.get(cls) or self._batch_curves.get("F16")
        return curve.at(batch) if curve is not None else None

    @cached_property
    def _batch_curves(self) -> dict[str, CostCurve]:
        """The batch tables as curves from one token (0 ms) on, built once: forward_ms asks for them in
        every prediction of every pair a ranking looks at."""
        return {
            cls: CostCurve((1, *(b for b, _ in table)), (0.0, *(ms for _, ms in table)))
            for cls, table in self.batch_extra.items()
            if table
        }

    def forward_ms(self, cost: ModelCost, batch: int, n_past: int) -> float:
        if self.gpu_fit is not None:
            return self.overhead_ms + self.gpu_fit.forward_ms(
                cost, batch, n_past, self.bandwidth_bytes_per_s, self.flops_per_s, self.generation
            )
        groups = list(cost.by_class) or [("F16", cost.weight_bytes, cost.weight_macs)]
        if self.overlap and not self.class_rates:
            memory_s = cost.bytes_read(n_past, batch) / self.bandwidth_bytes_per_s
            compute_s = cost.flops(batch, n_past) / self.flops_per_s
            return self.overhead_ms + 1000.0 * max(memory_s, compute_s)
        if batch >= 2 and not self.overlap and self.batch_extra:
            return self.forward_ms(cost, 1, n_past) + self._batch_extra_ms(cost, groups, batch, n_past)
        seconds = 0.0
        matrix_bytes = 0
        for cls, n_bytes, macs in groups:  # each class's products run one after another
            bandwidth, flops, reread = self.rates(cls)
            read = n_bytes + cost.extra_expert_bytes(batch, cls)
            seconds += self._pass(read / bandwidth, 2.0 * batch * macs / flops, reread, batch)
            matrix_bytes += n_bytes
        rest_bytes = cost.bytes_read(n_past) - matrix_bytes + cost.charged_extra_bytes  # KV cache, small tensors
        if self.attention_flops_per_s and not self.overlap:  # measured apart: each token's attention at its rate
            positional = 2.0 * batch * cost.positional_macs(n_past)
            seconds += rest_bytes / self.bandwidth_bytes_per_s + positional / self.attention_flops_per_s
            state = 2.0 * batch * cost.recurrent_macs  # a hybrid's state update: priced as before
            seconds += self._pass(0.0, state / self.flops_per_s, 0.0, batch)
        else:
            attention = 2.0 * batch * cost.attention_macs(n_past)
            seconds += self._pass(rest_bytes / self.bandwidth_bytes_per_s, attention / self.flops_per_s, 0.0, batch)
        return self.overhead_ms + self.layer_ms * cost.n_layers + self.rows_ms(cost) + 1000.0 * seconds

    def _batch_extra_ms(self, cost: ModelCost, groups: list[tuple[str, int, int]], batch: int, n_past: int) -> float:
        """What B tokens cost a CPU beyond one: each class's matrix products by its table, the experts the other
        tokens route to (read at the class's bandwidth), and each further token's attention."""
        ms = 0.0
        for cls, _, macs in groups:
            per_gmac = self.extra_per_gmac(cls, batch) or 0.0
            ms += macs / 1e9 * per_gmac + 1000.0 * cost.extra_expert_bytes(batch, cls) / self.rates(cls)[0]
        if not self.attention_flops_per_s:
            return ms + 1000.0 * (batch - 1) * 2.0 * cost.attention_macs(n_past) / self.flops_per_s
        seconds = cost.positional_macs(n_past) / self.attention_flops_per_s + cost.recurrent_macs / self.flops_per_s
        return ms + 1000.0 * (batch - 1) * 2.0 * seconds

    def _pass(self, memory_s: float, compute_s: float, reread: float, batch: int) -> float:
        if self.overlap:
            return max(memory_s, compute_s)
        if batch <= 1:
            return memory_s  # a matrix-vector product waits on memory
        return memory_s * (1.0 + reread) + compute_s

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "bandwidth_gb_s": round(self.bandwidth_bytes_per_s / 1e9, 2),
            "tflops": round(self.flops_per_s / 1e12, 3),
            "overhead_ms": round(self.overhead_ms, 3),
            "source": self.source,
            "overlap": self.overlap,
            "layer_ms": round(self.layer_ms, 4),
            "attention_gflops": round(self.attention_flops_per_s / 1e9, 2),
            "row_ns": {c: round(ns, 2) for c, ns in self.row_ns.items()},
            "batch_extra_ms_per_gmac": {c: {str(b): round(ms, 3) for b, ms in t} for c, t in self.batch_extra.items()},
            "by_class": {
                c: {"bandwidth_gb_s": round(bw / 1e9, 2), "gflops": round(fl / 1e9, 1), "reread": round(r, 3)}
                for c, (bw, fl, r) in self.class_rates.items()
            },
        }


def compute_major(compute_capability: str | None) -> int:
    """The major of a compute capability ("8.6": 8); an unknown one is taken for an Ampere card's."""
    return int((compute_capability or "8").split(".")[0])


def has_tensor_cores(compute_capability: str | None) -> bool:
    """Volta (7.0) on; Pascal and older have none."""
    return compute_major(compute_capability) >= 7


def tensor_tflops(table_tflops: float | None, compute_capability: str | None, fit: GpuFit) -> tuple[float, str]:
    """(The rate the GPU fit's token_ops are in, where it comes from): the table's dense FP16 tensor TFLOPs, else
    for a card without tensor cores the rate the fit took from such cards' curves, else a guess from the compute
    capability."""
    if table_tflops:
        return table_tflops, "FLOPs from SpecTune's GPU table"
    if not has_tensor_cores(compute_capability) and fit.no_tensor_tflops:
        return fit.no_tensor_tflops, "no tensor cores: the rate fitted on published Pascal curves"
    guess = TFLOPS_BY_COMPUTE_MAJOR.get(compute_major(compute_capability), 40.0)
    return guess, f"FLOPs guessed from compute capability {compute_capability or '?'}"


def gpu_flops(gpu: GpuInfo, fit: GpuFit | None = None) -> tuple[float, str]:
    """(FP16 TFLOPs, where the figure comes from) for this card: its entry in SpecTune's GPU table, else
    tensor_tflops's stand-in."""
    spec = lookup(gpu.name)
    if spec is not None and spec.fp16_tensor_tflops:
        return spec.fp16_tensor_tflops, f"FLOPs of the {spec.label} from SpecTune's GPU table"
    capability = gpu.compute_capability or (spec.compute_capability if spec is not None else None)
    return tensor_tflops(None, capability, fit or load_fit())


def gpu_speed(gpu: GpuInfo, fit: GpuFit | None = None) -> DeviceSpeed | None:
    """None when NVML gave no bandwidth for this GPU. fit: the model's constants (default: the shipped fit)."""
    if not gpu.peak_memory_bandwidth_bytes_per_s:
        return None
    fit = fit or load_fit()
    tflops, flops_source = gpu_flops(gpu, fit)
    peak = gpu.peak_memory_bandwidth_bytes_per_s
    spec = lookup(gpu.name)
    return DeviceSpeed(
        f"{gpu.llama_name} ({gpu.name or gpu.llama_name})",
        peak,
        tflops * 1e12,
        0.0,
        f"peak bandwidth {peak / 1e9:.0f} GB/s, {flops_source}; llama.cpp's CUDA kernels as fitted to published"
        " measurements",
        gpu_fit=fit,
        generation=spec.generation if spec else "",
    )


def bandwidth_device(bandwidth_bytes_per_s: float, fit: GpuFit | None = None) -> DeviceSpeed:
    """A GPU known only by its peak bandwidth (``spectune recommend --vram SIZE --bandwidth GB/S``): its FLOPs
    are an Ampere card's, the guess gpu_flops makes without a compute capability."""
    return DeviceSpeed(
        "GPU",
        bandwidth_bytes_per_s,
        TFLOPS_BY_COMPUTE_MAJOR[8] * 1e12,
        source="--bandwidth (peak); FLOPs assumed",
        gpu_fit=fit or load_fit(),
    )


def _processor() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def cpu_key(build: str | None = None) -> str:
    """What the CPU probe's result depends on: the processor, its cores and the llama.cpp build
    (None: any build, the key of the newest probe on this processor)."""
    text = f"{PROBE_VERSION}|{_processor()}|{os.cpu_count()}" + (f"|{build}" if build is not None else "|latest")
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def cached_cpu_speed(key: str, folder: Path | None = None) -> DeviceSpeed | None:
    try:
        data = json.loads(_cache_file(key, folder).read_text(encoding="utf-8"))
        data["class_rates"] = {c: tuple(float(x) for x in v) for c, v in data.get("class_rates", {}).items()}
        data["batch_extra"] = {
            c: tuple((int(b), float(ms)) for b, ms in v) for c, v in data.get("batch_extra", {}).items()
        }
        if any(len(v) != 3 for v in data["class_rates"].values()):
            return None  # an older probe's figures: measure again
        return DeviceSpeed(**data)
    except (OSError, ValueError, TypeError):
        return None


def latest_cpu_speed(folder: Path | None = None) -> DeviceSpeed | None:
    """The newest probe of this processor, whatever llama.cpp build took it: what the planner can know
    without starting an engine (a new build changes the figures little)."""
    return cached_cpu_speed(cpu_key(None), folder)


def assumed_cpu_speed(cores: int | None) -> DeviceSpeed:
    """A CPU nobody has measured yet, from its core count: what llama.cpp reached on the 2-core x86-64 VM
    this project is built on (7 GB/s and 60 GFLOPs per core), with the bandwidth capped where a desktop's
    two memory channels end. Good for a first ranking; the probe replaces it."""
    n = max(1, cores or 1)
    return DeviceSpeed(
        "CPU",
        bandwidth_bytes_per_s=min(ASSUMED_BANDWIDTH_PER_CORE * n, ASSUMED_BANDWIDTH_CAP),
        flops_per_s=ASSUMED_FLOPS_PER_CORE * n,
        overhead_ms=ASSUMED_OVERHEAD_MS,
        source=f"assumed from {n} cores, not measured: the CPU probe measures it (a few minutes, once)",
        overlap=False,
        reread=ASSUMED_REREAD,
        assumed=True,
    )


def cpu_device(cores: int | None, folder: Path | None = None) -> DeviceSpeed:
    """This CPU as last probed (by any llama.cpp build), else as assumed from its cores."""
    return latest_cpu_speed(folder) or assumed_cpu_speed(cores)


def local_device(report: HardwareReport, folder: Path | None = None, cpu_only: bool = False) -> DeviceSpeed:
    """The one choice of the device a prediction is for, measuring nothing: the first GPU NVML sizes (unless
    cpu_only), else cpu_device. engine.measure.device_probe.measured_device probes the CPU where this
    would assume it (the CLI); the pages show the assumption and offer the probe."""
    gpu = None if cpu_only else gpu_device(report)
    return gpu or cpu_device(report.cpu.logical_cores, folder)


@dataclass(frozen=True)
class ProbeTimes:
    """The probe's timings of one weight class, in ms: the target's passes by batch size (1 and
    PROBE_BATCHES), and its one-layer draft's of one token."""

    batches: dict[int, float]
    small: float
    # the target's one-token pass at PROBE_LONG_PAST (timed on the F16 pair only; None where not timed)
    long: float | None = None

    @property
    def one(self) -> float:
        return self.batches[1]


ProbePair = tuple[ModelCost, ModelCost, ProbeTimes]


def _excess(pair: ProbePair) -> tuple[float, float, float, float]:
    """(layers, bytes, rows, ms) by which a probe pair's target's one-token pass exceeds its small model's."""
    cost, small, t = pair
    return (
        cost.n_layers - small.n_layers,
        cost.bytes_read(PROBE_N_PAST) - small.bytes_read(PROBE_N_PAST),
        cost.rows - small.rows,
        t.one - t.small,
    )


def _solve(equations: list[tuple[float, ...]]) -> list[float] | None:
    """The unknowns of as many linear equations (coefficients..., right-hand side), each positive; None where
    the system is singular or timing noise gives an unknown at or below 0."""
    a = np.array([e[:-1] for e in equations], dtype=float)
    b = np.array([e[-1] for e in equations], dtype=float)
    try:
        x = np.linalg.solve(a, b)
    except np.linalg.LinAlgError:
        return None
    return [float(v) for v in x] if all(v > 0 for v in x) else None


def solve_fixed_costs(wide: ProbePair, thin: ProbePair, rows: ProbePair | None = None) -> tuple[float, float]:
    """(a layer's fixed cost, a matrix row's fixed cost), in ms, from the F16 probe's one-token passes: in the
    wide pair, the thin pair and the rows pair (two vocabularies) the larger model's pass exceeds the other's
    by its extra layers' and rows' fixed costs plus its extra bytes at the bandwidth, three equations for the
    three unknowns. Without the rows pair (or where noise gives no positive solution) the rows' time stays
    in the bandwidth: two equations for a layer's cost, as before; 0 for both where those fail too."""
    w, t = _excess(wide), _excess(thin)
    if rows is not None:
        v = _excess(rows)
        got = _solve([(w[0], w[1], w[2], w[3]), (t[0], t[1], t[2], t[3]), (v[0], v[1], v[2], v[3])])
        if got is not None:
            return got[0], got[2]
    got = _solve([(w[0], w[1], w[3]), (t[0], t[1], t[3])])
    return (got[0], 0.0) if got is not None else (0.0, 0.0)


def solve_row_ms(wide: ProbePair, rows: ProbePair, layer_ms: float) -> float:
    """A matrix row's fixed cost in ms for one weight class, from its wide pair and its rows pair (the layers'
    cost known from F16): the wide rows and the output layer's narrow ones weigh their bytes differently, two
    equations for the bytes' time and the rows'. 0 where noise gives no positive solution."""
    w, v = _excess(wide), _excess(rows)
    got = _solve([(w[1], w[2], w[3] - layer_ms * w[0]), (v[1], v[2], v[3] - layer_ms * v[0])])
    return got[1] if got is not None else 0.0


def batch_table(cost: ModelCost, t: ProbeTimes) -> tuple[tuple[int, float], ...]:
    """What each batch size the probe timed costs beyond one token, in ms per billion multiply-adds of one
    token (DeviceSpeed.batch_extra). A pass of more tokens costs at least what a pass of fewer does, so a
    size timed faster than a smaller one (noise, or a kernel's better tile) keeps the smaller one's cost."""
    gmacs = cost.weight_macs / 1e9
    out, floor = [], 0.0
    for b in sorted(n for n in t.batches if n >= 2):
        floor = max(floor, (t.batches[b] - t.one) / gmacs)
        out.append((b, floor))
    return tuple(out)


def solve_rates(
    cost: ModelCost, small: ModelCost, t: ProbeTimes, layer_ms: float = 0.0, row_ms: float = 0.0
) -> tuple[float, float, float, float]:
    """(bandwidth, FLOPs, reread, fixed ms) of one weight class, for a CPU (DeviceSpeed.overlap False):
      a pass of 1 token   = fixed + layers x layer_ms + bytes / bandwidth
      a pass of B tokens  = fixed + layers x layer_ms + bytes / bandwidth x (1 + reread) + B x flops / FLOPs
    One token's matrix-vector products wait on memory, and their arithmetic hides behind the reading: the
    target's and the draft's one-token passes differ by their extra layers' fixed cost and their bytes,
    which gives the bandwidth, and what the target's pass takes beyond that is the fixed cost. From 2
    tokens on a pass grows by about one token's compute a token: a least-squares line through those passes
    gives it and its intercept the reread. The line stands for the attention's compute and for a device
    without batch tables; where the probe timed a class, its batch table prices the batches (batch_table)."""
    multi = sorted(b for b in t.batches if b >= 2)
    if len(multi) < 2:
        raise ValueError("the probe needs passes of at least two batch sizes from 2 tokens on")
    mean_b = sum(multi) / len(multi)
    mean_t = sum(t.batches[b] for b in multi) / len(multi)
    compute_ms = sum((b - mean_b) * (t.batches[b] - mean_t) for b in multi) / sum((b - mean_b) ** 2 for b in multi)
    compute_ms = max(compute_ms, 1e-6)  # one token's compute through the target
    intercept = mean_t - compute_ms * mean_b
    flops = cost.flops(1, PROBE_N_PAST) / (compute_ms / 1000.0)
    layers, extra_bytes, rows, ms = _excess((cost, small, t))
    memory_ms = max(ms - layer_ms * layers - row_ms * rows, 1e-6)  # the extra bytes
    bandwidth = extra_bytes / (memory_ms / 1000.0)
    target_memory_ms = 1000.0 * cost.bytes_read(PROBE_N_PAST) / bandwidth
    fixed_ms = max(t.one - target_memory_ms - layer_ms * cost.n_layers - row_ms * cost.rows, 0.0)
    reread = max((intercept - fixed_ms - target_memory_ms) / max(target_memory_ms, 1e-9), 0.0)
    return bandwidth, flops, reread, fixed_ms


def solve_attention_flops(cost: ModelCost, t: ProbeTimes, bandwidth: float) -> float:
    """The rate (FLOPs/s) at which a CPU runs one token's attention, from the target's one-token passes at
    PROBE_N_PAST and PROBE_LONG_PAST: what the deeper pass takes beyond reading the cache's further positions,
    over the attention's arithmetic there. 0 where the deeper pass was not timed or timing noise leaves
    nothing for the attention: the attention is then charged at the batch line's rate from two tokens on,
    and not at all for one, as before."""
    if t.long is None:
        return 0.0
    extra_kv = cost.bytes_read(PROBE_LONG_PAST) - cost.bytes_read(PROBE_N_PAST)
    attention_ms = t.long - t.one - 1000.0 * extra_kv / bandwidth
    flops = 2.0 * (cost.attention_macs(PROBE_LONG_PAST) - cost.attention_macs(PROBE_N_PAST))
    return flops / (attention_ms / 1000.0) if attention_ms > 0 and flops > 0 else 0.0


def without_attention(pair: ProbePair, flops_per_s: float) -> ProbePair:
    """A probe pair's timings less each pass's attention at PROBE_N_PAST at that rate (none at rate 0), which
    DeviceSpeed.forward_ms charges apart: what is left is the weights' and the layers' time."""
    cost, small, t = pair
    if not flops_per_s:
        return pair

    def ms(c: ModelCost, batch: int) -> float:
        return 1000.0 * 2.0 * batch * c.positional_macs(PROBE_N_PAST) / flops_per_s

    batches = {b: v - ms(cost, b) for b, v in t.batches.items()}
    return cost, small, ProbeTimes(batches, t.small - ms(small, 1), t.long)


def solve_cpu_speed(
    timed: dict[str, ProbePair],
    beyond_ms: float,
    thin: ProbePair | None = None,
    rows: dict[str, ProbePair] | None = None,
) -> DeviceSpeed:
    """The CPU from the probe: for each weight class (F16 at least) the probe pair's costs and timings,
    what a token of plain generation takes beyond its forward pass (sampling, the loop, thread hand-offs),
    which every pass pays too, the thin F16 pair's timings, which give a layer's fixed cost, and by class the
    two vocabularies' (rows), which give a row's. The F16 target's pass deep in the context
    (ProbeTimes.long) gives the attention's rate."""
    f16_cost, _, f16_times = timed["F16"]
    # the attention's rate from a first solve, then every timing without its attention (the passes at
    # PROBE_N_PAST hold some: 0.2-0.3 ms of the probe target's), and the rate again from the final bandwidth
    attention = solve_attention_flops(f16_cost, f16_times, solve_rates(*timed["F16"])[0])
    timed = {cls: without_attention(pair, attention) for cls, pair in timed.items()}
    thin = without_attention(thin, attention) if thin is not None else None
    rows = {cls: without_attention(pair, attention) for cls, pair in (rows or {}).items()}
    layer_ms, f16_row_ms = solve_fixed_costs(timed["F16"], thin, rows.get("F16")) if thin is not None else (0.0, 0.0)
    row_ms = {
        cls: f16_row_ms if cls == "F16" else solve_row_ms(timed[cls], rows[cls], layer_ms)
        for cls in timed
        if cls in rows
    }
    rates = {cls: solve_rates(*pair, layer_ms, row_ms.get(cls, 0.0)) for cls, pair in timed.items()}
    bandwidth, flops, reread, fixed_ms = rates["F16"]
    attention = solve_attention_flops(f16_cost, f16_times, bandwidth)
    overhead_ms = fixed_ms + max(beyond_ms, 0.0)
    return DeviceSpeed(
        "CPU",
        bandwidth_bytes_per_s=bandwidth,
        flops_per_s=flops,
        overhead_ms=overhead_ms,
        source=f"measured: llama.cpp on a {f16_cost.weight_bytes / 2**20:.0f} MiB F16 model"
        + (f" and its {', '.join(c for c in timed if c != 'F16')} copies" if len(timed) > 1 else "")
        + ", its draft, a plain run",
        class_rates={cls: (bw, fl, r) for cls, (bw, fl, r, _) in rates.items()},
        overlap=False,
        reread=reread,
        batch_extra={cls: batch_table(cost, t) for cls, (cost, _, t) in timed.items()},
        layer_ms=layer_ms,
        attention_flops_per_s=attention,
        row_ns={cls: 1e6 * ms for cls, ms in row_ms.items()},
    )


def save_cpu_speed(key: str, speed: DeviceSpeed, folder: Path | None = None) -> None:
    """Kept under its build's key and as this processor's newest probe (latest_cpu_speed)."""
    for k in (key, cpu_key(None)):
        path = _cache_file(k, folder)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(dataclasses.asdict(speed)), encoding="utf-8")


def gpu_device(report: HardwareReport, fit: GpuFit | None = None) -> DeviceSpeed | None:
    """The first GPU NVML can size: where llama.cpp puts the layers first."""
    return next((s for s in (gpu_speed(g, fit) for g in report.gpus) if s is not None), None)


def _cache_file(key: str, folder: Path | None = None) -> Path:
    return (folder or cache_dir() / "device-speed") / f"cpu-{key}.json"
