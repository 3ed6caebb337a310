"""What should I run: ranked target/draft/quantization choices that fit a memory budget.

budget   free VRAM of the GPUs (NVML, engine.planning.hardware) or a size the user gives;
         without a GPU, available RAM for a CPU-only run. Headroom is kept back
         on every device: max(512 MiB, 5%) for the driver, other programs and the
         plan's own error.
plan     engine.planning.memory_plan on models built from the catalog's numbers
         (model_info_from_numbers): weights, both KV caches at the target's
         context, compute and output buffers.
pairs    drafts share the target's tokenizer, have at most MAX_DRAFT_SHARE of its
         (active) parameters and come from its own family when it has any; each target
         quant is listed once, with its best draft and draft quant.
speed    with the device's speed (engine.planning.device_speed: the GPU from NVML and a table,
         the CPU as measured or assumed), the speed model (engine.planning.speed_model)
         predicts each pair's plain tokens/s and its speedup by K on that device: a verify
         of K + 1 tokens costs what the roofline says, not the same as one token. A pair
         whose speculation is predicted slower than none is still a good target: it is
         listed with "run it without the draft" and its plain speed.
rank     score = size + quant + speed, in points (each part reported):
           size   10 x log2(target parameters in billions)  (twice the size: +10); a mixture
                  of experts counts as the geometric mean of its total and active parameters
           quant  -20 x perplexity increase of the target's quant on Llama-3-8B
                  (llama.cpp's quantize table; types without a published figure
                  are interpolated by bits per weight along the K-quants, and say so)
           speed  with a device: 10 x log2(predicted tokens/s / speed floor), counted up to
                  PACE_CAP times the floor (past that, faster is hardly felt); pairs under
                  the floor (default 10 tokens/s, interactive) are near-misses
                  ("fits, but about 1.2 tokens/s here").
                  Without one: 10 x log2(expected speedup), Leviathan et al.'s formula for
                  a bandwidth-bound decoder (engine.planning.cost_model.leviathan_speedup)
                  with c = draft bytes / target bytes read per token.
         The acceptance is the speed model's prior (by kind of text with a workload set, lowered
         for a coarse draft quant) until the lab measures the real one; K is the best of 1..8.
left out near-misses (within 25% of the budget, under the speed floor, or fitting but
         not worth a draft) come with the reason; models without a same-tokenizer draft in
         the catalog, or whose trained context is shorter than asked, are named.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from types import ModuleType

from engine.core.units import format_plan_bytes
from engine.models.catalog import BUNDLED, Catalog, Model, ModelFile
from engine.models.draft_heads import MTP_ARCHITECTURES
from engine.models.gguf_inspect import ModelInfo
from engine.planning.constants import DEFAULT_CTX, DEFAULT_SPEED_FLOOR, K_MAX, PREDICT_N_PAST
from engine.planning.cost_model import leviathan_speedup
from engine.planning.device_speed import DeviceSpeed
from engine.planning.hardware import HardwareReport
from engine.planning.memory_plan import (
    CPU,
    KV_PAD,
    GpuBudget,
    MemoryPlan,
    PlanError,
    expert_on_cpu,
    parse_size,
    plan_memory,
)
from engine.planning.model_cost import ModelCost, model_cost, mtp_cost, split_cost
from engine.planning.model_numbers import model_info_from_numbers
from engine.planning.placement import Placement, place
from engine.planning.speed_model import ACCEPTANCE_PRIORS, Prediction, acceptance_prior, predict, tokens_per_s_text

PACE_CAP = 4.0  # speed counts in the score up to this many times the floor
MIN_SPEEDUP = 1.05  # below this a draft is not worth its memory
NEAR_MISS_RATIO = 1.25  # plans up to 25% over the usable memory are reported as near-misses
HEADROOM_MIN = 512 * 2**20
HEADROOM_SHARE = 0.05
DRAFT_QUANTS = ("Q8_0", "Q6_K", "Q4_K_M", "F16")  # the draft quants worth trying, best acceptance first
# acceptance lost per unit of the draft quant's perplexity increase: small drafts suffer more from
# quantization than the 8B model the table was measured on, so this is larger than a plain ratio would be
DRAFT_QUANT_PENALTY = 0.5
# drafts above this share of the target's parameters cost too much per token to pay off (c > ~0.3)
MAX_DRAFT_SHARE = 0.3


class RecommendError(ValueError):
    """The budget or the request cannot be used; the message says why."""


# -- the budget --------------------------------------------------------------------------------


def headroom(free_bytes: int) -> int:
    return max(HEADROOM_MIN, int(free_bytes * HEADROOM_SHARE))


@dataclass(frozen=True)
class Budget:
    kind: str  # "gpu" | "cpu"
    gpus: tuple[GpuBudget, ...] = ()  # llama.cpp names and free bytes (gpu)
    # available RAM: the budget itself (cpu), or what must hold a GPU plan's host part, the experts or the
    # draft placed on the CPU among it (gpu; None: unknown, not checked)
    ram_bytes: int | None = None
    bandwidth_bytes_per_s: float | None = None
    source: str = ""

    @property
    def free_bytes(self) -> int:
        return sum(g.free_bytes for g in self.gpus) if self.kind == "gpu" else (self.ram_bytes or 0)

    @property
    def headroom_bytes(self) -> int:
        if self.kind == "gpu":
            return sum(headroom(g.free_bytes) for g in self.gpus)
        return headroom(self.ram_bytes or 0)

    @property
    def usable_bytes(self) -> int:
        return self.free_bytes - self.headroom_bytes

    @property
    def ram_usable_bytes(self) -> int | None:
        """RAM less its headroom (the usable bytes themselves for a CPU budget); None when unknown."""
        return None if self.ram_bytes is None else self.ram_bytes - headroom(self.ram_bytes)

    def describe(self, short: bool = False) -> str:
        """short: where and how much, without the source, headroom and bandwidth."""
        bw = f", peak bandwidth {self.bandwidth_bytes_per_s / 1e9:.0f} GB/s" if self.bandwidth_bytes_per_s else ""
        where = (
            ", ".join(f"{g.name} {format_plan_bytes(g.free_bytes)} free" for g in self.gpus)
            if self.kind == "gpu"
            else f"CPU only, {format_plan_bytes(self.ram_bytes or 0)} RAM available"
        )
        if short:
            return where
        ram = f"; RAM {format_plan_bytes(self.ram_bytes)} available" if self.kind == "gpu" and self.ram_bytes else ""
        return f"{where}{ram} ({self.source}); {format_plan_bytes(self.headroom_bytes)} kept as headroom{bw}"

    def to_dict(self) -> dict:
        return {
            "kind": self.kind,
            "gpus": [{"name": g.name, "free_bytes": g.free_bytes} for g in self.gpus],
            "ram_bytes": self.ram_bytes,
            "bandwidth_bytes_per_s": self.bandwidth_bytes_per_s,
            "free_bytes": self.free_bytes,
            "headroom_bytes": self.headroom_bytes,
            "usable_bytes": self.usable_bytes,
            "source": self.source,
        }


def budget_from_size(text: str, bandwidth_gb_s: float | None = None, ram: str | None = None) -> Budget:
    """--vram 12GiB: one GPU (CUDA0) with that much free memory; ram (--ram 32GiB): the RAM available beside
    it, which what a placement puts on the CPU must fit (None: not checked)."""
    try:
        size = parse_size(text)
        ram_bytes = parse_size(ram) if ram is not None else None
    except PlanError as exc:
        raise RecommendError(str(exc)) from None
    if size <= HEADROOM_MIN:
        raise RecommendError(f"--vram {text} leaves nothing after the {format_plan_bytes(HEADROOM_MIN)} headroom")
    if ram_bytes is not None and ram_bytes <= HEADROOM_MIN:
        raise RecommendError(f"--ram {ram} leaves nothing after the {format_plan_bytes(HEADROOM_MIN)} headroom")
    source = f"--vram {text}" + (f", --ram {ram}" if ram is not None else "")
    return Budget(
        "gpu", (GpuBudget("CUDA0", size),), ram_bytes, bandwidth_gb_s * 1e9 if bandwidth_gb_s else None, source
    )


def budget_from_hardware(
    nvml: ModuleType | None = None, bandwidth_gb_s: float | None = None, report: HardwareReport | None = None
) -> Budget:
    """--vram auto: the free VRAM of every GPU NVML reports; without one, available RAM for the CPU.
    report: a probe already taken (engine.planning.hardware.probe), so that NVML is read once."""
    from engine.planning.hardware import probe

    report = report if report is not None else probe(nvml)
    gpus = [g for g in report.gpus if g.memory_free_bytes]
    if gpus:
        bandwidths = [g.peak_memory_bandwidth_bytes_per_s for g in gpus if g.peak_memory_bandwidth_bytes_per_s]
        # layers are split over the GPUs and run one after another: the slowest one sets the pace
        bandwidth = bandwidth_gb_s * 1e9 if bandwidth_gb_s else (min(bandwidths) if bandwidths else None)
        names = ", ".join(g.name or g.llama_name for g in gpus)
        return Budget(
            "gpu",
            tuple(GpuBudget(g.llama_name, g.memory_free_bytes or 0) for g in gpus),
            report.cpu.ram_available_bytes,
            bandwidth,
            f"NVML: {names}" + (f"; RAM from {report.cpu.source}" if report.cpu.ram_available_bytes else ""),
        )
    if not report.cpu.ram_available_bytes:
        raise RecommendError(f"{report.message}, and the available RAM cannot be read either; give --vram SIZE")
    return Budget(
        "cpu",
        (),
        report.cpu.ram_available_bytes,
        bandwidth_gb_s * 1e9 if bandwidth_gb_s else None,
        f"{report.message}; RAM from {report.cpu.source}",
    )


# -- models from the catalog's numbers --------------------------------------------------------


class _Models:
    """ModelInfo per (model, quant), built once: a 70B model has about 720 tensors."""

    def __init__(self, catalog: Catalog):
        self.catalog = catalog
        self._cache: dict[tuple[str, str], ModelInfo] = {}
        self._alone: dict[tuple[str, str, int], dict[str, int]] = {}
        self._costs: dict[tuple[str, str], ModelCost] = {}
        self._mtp_costs: dict[tuple[str, str], ModelCost | None] = {}

    def info(self, model: Model, quant: str) -> ModelInfo:
        key = (model.id, quant)
        if key not in self._cache:
            q = self.catalog.quant(quant)
            a = model.architecture
            self._cache[key] = model_info_from_numbers(
                architecture=a.llama_arch,
                n_layer=a.n_layer,
                n_embd=a.n_embd,
                n_head=a.n_head,
                n_head_kv=a.n_head_kv,
                head_dim=a.head_dim,
                n_ff=a.n_ff,
                n_vocab=a.n_vocab,
                n_ctx_train=a.n_ctx_train,
                tied_embeddings=a.tied_embeddings,
                weight_type=q.weight_type,
                bits_per_weight=q.bits_per_weight,
                name=model.id,
                n_expert=a.n_expert,
                n_expert_used=a.n_expert_used,
                n_ff_exp=a.n_ff_exp,
                sliding_window=a.sliding_window,
                n_ff_shared=a.n_ff_shared,
                nextn_layers=a.nextn_layers,
                **(vars(a.hybrid) if a.hybrid else {}),
                **(vars(a.gemma4) if a.gemma4 else {}),
            )
        return self._cache[key]

    def cost(self, model: Model, quant: str) -> ModelCost:
        """Bytes and multiply-adds per token, for the speed model."""
        key = (model.id, quant)
        if key not in self._costs:
            self._costs[key] = model_cost(self.info(model, quant))
        return self._costs[key]

    def mtp_cost(self, model: Model, quant: str) -> ModelCost | None:
        """What a pass of the model's own MTP block costs (None: it has none), once per model and quant: a
        target is a candidate with every draft it pairs with."""
        key = (model.id, quant)
        if key not in self._mtp_costs:
            self._mtp_costs[key] = mtp_cost(self.info(model, quant))
        return self._mtp_costs[key]

    def alone(self, budget: Budget, ctx: int, model: Model, quant: str) -> dict[str, int]:
        """Device totals of one model planned alone at ctx tokens."""
        key = (model.id, quant, ctx)
        if key not in self._alone:
            self._alone[key] = plan_memory(self.info(model, quant), ctx, gpus=list(budget.gpus)).device_totals()
        return self._alone[key]

    def pair_totals(self, budget: Budget, ctx: int, target: Model, tq: str, draft: Model, dq: str) -> dict[str, int]:
        """Device totals of target + draft. plan_memory plans the two one after the other and the draft's
        context is the target's padded one, so the pair is the sum of the two planned alone."""
        totals = dict(self.alone(budget, ctx, target, tq))
        kv_size = -(-ctx // KV_PAD) * KV_PAD
        for device, n in self.alone(budget, kv_size, draft, dq).items():
            totals[device] = totals.get(device, 0) + n
        return totals

    def bytes_per_token(self, model: Model, quant: str) -> int:
        """Weight bytes a decode step reads: all of them but the input embeddings (one row is gathered),
        unless the output layer reuses them (tied embeddings); of an MoE model's experts, only the used ones."""
        return self.cost(model, quant).weight_bytes


def estimated_file_bytes(catalog: Catalog, model: Model, quant: str) -> int:
    """The catalog's size when it knows one, else the bytes of the tensors at the quant's bits per weight."""
    if quant in model.sizes:
        return model.sizes[quant]
    return _Models(catalog).info(model, quant).tensor_bytes


def quant_quality(catalog: Catalog, name: str) -> tuple[float, bool]:
    """(perplexity increase on llama.cpp's reference model, whether it is interpolated by bits per weight)."""
    q = catalog.quant(name)
    if q.ppl_increase is not None:
        return q.ppl_increase, False
    # along the K-quant frontier (legacy Q4_0..Q5_1 are worse at the same size): the importance-matrix
    # IQ types do at least as well as a K-quant of their size, so this errs on the cautious side
    known = sorted(
        (k.bits_per_weight, k.ppl_increase)
        for k in catalog.quants
        if k.ppl_increase is not None and ("_K" in k.name or k.name in ("Q8_0", "F16", "BF16"))
    )
    if not known:
        return 0.0, True
    if q.bits_per_weight <= known[0][0]:
        return known[0][1], True
    for (b0, p0), (b1, p1) in zip(known, known[1:]):
        if b0 <= q.bits_per_weight <= b1:
            return p0 + (p1 - p0) * (q.bits_per_weight - b0) / (b1 - b0 or 1), True
    return known[-1][1], True


def quantized_draft_acceptance(draft_ppl_increase: float, workload: str | None = None) -> float:
    """The acceptance expected of a same-family draft at a quant that adds this much perplexity, on a shipped
    workload set's kind of text (engine.planning.speed_model.ACCEPTANCE_PRIORS; None: the flat prior)."""
    return max(0.05, acceptance_prior(workload) - DRAFT_QUANT_PENALTY * draft_ppl_increase)


def expected_speedup(
    cost_ratio: float, draft_ppl_increase: float, workload: str | None = None
) -> tuple[float, int, float]:
    """(speedup, best K, acceptance used) for a draft that costs cost_ratio of the target per token, on a
    bandwidth-bound device (no device speed known)."""
    alpha = quantized_draft_acceptance(draft_ppl_increase, workload)
    speedup, k = max((leviathan_speedup(alpha, k, cost_ratio), k) for k in range(1, K_MAX + 1))
    return speedup, k, alpha


# -- candidates ----------------------------------------------------------------------------------


@dataclass
class PairChoice:
    """One target/draft/quantization choice the recommender ranks: its memory plan, predicted speed and the
    reasons shown beside it (engine.measure.tuner.Candidate is another thing: a setting a tune measures)."""

    target: ModelFile
    draft: ModelFile
    params: int
    plan: MemoryPlan | None
    needed_bytes: int  # on the budget's devices
    usable_bytes: int
    fits_memory: bool
    ppl_increase: float
    ppl_estimated: bool
    bits_per_weight: float
    cost_ratio: float
    speedup: float
    draft_n_max: int
    acceptance_prior: float
    tokens_per_s_bound: float | None
    score_parts: dict[str, float]
    published: list[dict] = field(default_factory=list)
    preset: str | None = None
    why_not: str = ""  # empty when recommended
    prediction: Prediction | None = None  # the speed model on the budget's device, when its speed is known
    speed_floor: float | None = None
    # where the models go when both on the GPUs does not fit (engine.planning.placement); None: the default
    placement: Placement | None = None
    active_params: int = 0  # of an MoE target: the parameters a token uses (0: dense)
    # the target has an MTP block of an architecture llama.cpp runs draft-mtp for (Qwen3.5): it can draft alone
    mtp_head: bool = False
    # the speed model for the target drafting with its own MTP block (draft-mtp), when the device is known
    mtp_prediction: Prediction | None = None
    # a GPU budget's host part: what the plan keeps in RAM, and the RAM usable for it (None: unknown)
    host_bytes: int = 0
    ram_usable_bytes: int | None = None

    @property
    def ram_short(self) -> bool:
        """The GPUs hold their part, the RAM not the host part (the experts or the draft placed there)."""
        return self.ram_usable_bytes is not None and self.host_bytes > self.ram_usable_bytes

    @property
    def score(self) -> float:
        return round(sum(self.score_parts.values()), 2)

    @property
    def too_slow(self) -> bool:
        """Fits, but is predicted under the speed floor on this device."""
        return (
            self.fits_memory and self.prediction is not None and (self.tokens_per_s or 0.0) < (self.speed_floor or 0.0)
        )

    @property
    def uses_draft(self) -> bool:
        """False when speculation with this draft is predicted slower than the target alone."""
        return self.prediction is None or self.prediction.pays

    @property
    def plain_tokens_per_s(self) -> float | None:
        return self.prediction.plain_tokens_per_s if self.prediction else None

    @property
    def tokens_per_s(self) -> float | None:
        """Predicted tokens/s of the recommended setting: with the draft when it pays, else without."""
        if self.prediction is None:
            return None
        return self.prediction.plain_tokens_per_s * (self.speedup if self.uses_draft else 1.0)

    def speed_text(self) -> str:
        """ "~14 tok/s (x1.32 at K=4)" or "~14 tok/s without the draft (x0.81 with it)"; the old bound
        when the device's speed is unknown."""
        if self.prediction is None:
            bound = f", ≤{self.tokens_per_s_bound:.0f} tok/s" if self.tokens_per_s_bound else ""
            return f"x{self.speedup:.2f} at K={self.draft_n_max}{bound}"
        return self.prediction.speed_text()

    @property
    def label(self) -> str:
        return f"{self.target.model} {self.target.quant} + {self.draft.model} {self.draft.quant}"

    def placement_flags(self) -> list[str]:
        """llama-server's flags for the placement (the export writes the same from LoadSettings)."""
        return self.placement.flags(with_draft=self.uses_draft) if self.placement else []

    def reasons(self) -> list[str]:
        p = self.score_parts
        quality = (
            f"{self.target.quant} ({self.bits_per_weight:.2f} bits per weight) adds "
            f"{'about ' if self.ppl_estimated else ''}{self.ppl_increase:+.3f} perplexity on Llama-3-8B"
            f"{' (interpolated by bits per weight)' if self.ppl_estimated else ' (llama.cpp quantize table)'}: "
            f"{p['quant']:+.1f}"
        )
        if self.prediction is None:
            speed = [
                f"the draft reads {100 * self.cost_ratio:.1f}% of the target's bytes per token; at acceptance "
                f"{self.acceptance_prior:.2f} (prior) and K={self.draft_n_max} that is x{self.speedup:.2f}: "
                f"{p['speed']:+.1f}"
            ]
        else:
            pr, floor = self.prediction, self.speed_floor or DEFAULT_SPEED_FLOOR
            device = f" on {pr.device.name} ({pr.device.source})" if pr.device else ""
            speed = [
                f"predicted{device}: {tokens_per_s_text(pr.plain_tokens_per_s)} tokens/s without speculation; "
                f"{tokens_per_s_text(self.tokens_per_s or 0.0)} tokens/s as recommended, against a floor of {floor:g}: "
                f"{p['speed']:+.1f}",
                f"at acceptance {self.acceptance_prior:.2f} (prior), {pr.why()}",
            ]
        size = f"{self.params / 1e9:.1f}B-parameter target"
        if self.active_params:
            counted = math.sqrt(self.params * self.active_params)
            size = (
                f"{self.params / 1e9:.1f}B-parameter mixture of experts, {self.active_params / 1e9:.1f}B active "
                f"per token (sized as {counted / 1e9:.1f}B, the geometric mean)"
            )
        out = [
            f"{size}: {p['size']:+.1f}",
            quality,
            *speed,
            f"memory: {format_plan_bytes(self.needed_bytes)} of {format_plan_bytes(self.usable_bytes)} usable",
        ]
        if self.placement is not None and self.ram_usable_bytes is not None:
            out.append(
                f"RAM: {format_plan_bytes(self.host_bytes)} of {format_plan_bytes(self.ram_usable_bytes)} usable"
            )
        if self.placement is not None:
            how = "placed so that it fits" if self.fits_memory else "placed so that the GPUs hold their part"
            out.append(f"{how}: {self.placement.describe()} ({' '.join(self.placement_flags())})")
        if self.tokens_per_s_bound:
            out.append(f"bandwidth bound: about {self.tokens_per_s_bound:.0f} tokens/s with the draft")
        for s in self.published:
            out.append(f"published: x{s['speedup']:.2f} ({s['setup']}) {s['source']}")
        if self.mtp_head:
            mtp = self.mtp_prediction
            alone = ""
            if mtp is not None and mtp.speedup_by_k:
                by_k = mtp.speedup_by_k
                k = mtp.best_k or max(by_k, key=lambda k: by_k[k])
                alone = f" (predicted x{by_k[k]:.2f} at K={k} here, acceptance {self.acceptance_prior:.2f})"
            out.append(
                f"the target has an MTP head: draft-mtp needs no separate draft model{alone}, where its GGUF "
                "keeps the MTP block (spectune inspect says so)"
            )
        return out

    def to_dict(self, with_plan: bool = True) -> dict:
        d = {
            "target": vars(self.target).copy(),
            "draft": vars(self.draft).copy(),
            "preset": self.preset,
            "score": self.score,
            "score_parts": self.score_parts,
            "needed_bytes": self.needed_bytes,
            "usable_bytes": self.usable_bytes,
            "host_bytes": self.host_bytes,
            "ram_usable_bytes": self.ram_usable_bytes,
            "fits_memory": self.fits_memory,
            "quality": {
                "quant": self.target.quant,
                "bits_per_weight": self.bits_per_weight,
                "ppl_increase": self.ppl_increase,
                "ppl_estimated": self.ppl_estimated,
            },
            "cost_ratio": self.cost_ratio,
            "expected_speedup": self.speedup,
            "draft_n_max": self.draft_n_max,
            "acceptance_prior": self.acceptance_prior,
            "tokens_per_s_bound": self.tokens_per_s_bound,
            "uses_draft": self.uses_draft,
            "mtp_head": self.mtp_head,
            "plain_tokens_per_s": _rounded(self.plain_tokens_per_s),
            "tokens_per_s": _rounded(self.tokens_per_s),
            "speed_floor": self.speed_floor,
            "prediction": self.prediction.to_dict() if self.prediction else None,
            "mtp_prediction": self.mtp_prediction.to_dict() if self.mtp_prediction else None,
            "published_speedups": self.published,
            "reasons": self.reasons(),
            "pull": pull_commands(self.target, self.draft if self.uses_draft else None, self.preset),
            "placement": self.placement.to_dict() if self.placement else None,
            "placement_flags": self.placement_flags(),
            "active_params": self.active_params or None,
        }
        if self.why_not:
            d["why_not"] = self.why_not
        if with_plan and self.plan is not None:
            d["plan"] = self.plan.to_dict()
        return d


@dataclass
class Recommendation:
    budget: Budget
    ctx: int
    family: str | None
    recommended: list[PairChoice]
    near_misses: list[PairChoice]
    left_out: list[str]
    device: DeviceSpeed | None = None
    speed_floor: float = DEFAULT_SPEED_FLOOR

    def to_dict(self) -> dict:
        return {
            "budget": self.budget.to_dict(),
            "device": self.device.to_dict() if self.device else None,
            "speed_floor": self.speed_floor,
            "ctx": self.ctx,
            "family": self.family,
            "recommendations": [c.to_dict() for c in self.recommended],
            "near_misses": [c.to_dict(with_plan=False) for c in self.near_misses],
            "left_out": self.left_out,
        }


def _needed(plan: MemoryPlan | dict[str, int], budget: Budget) -> tuple[int, bool]:
    """Bytes on the budget's devices and whether every device keeps its headroom (a GPU budget's RAM too,
    for the plan's host part, when the RAM is known)."""
    totals = plan.device_totals() if isinstance(plan, MemoryPlan) else plan
    if budget.kind == "cpu":
        total = sum(totals.values())
        return total, total <= budget.usable_bytes
    needed = sum(totals.get(g.name, 0) for g in budget.gpus)
    ram = budget.ram_usable_bytes
    fits = all(totals.get(g.name, 0) <= g.free_bytes - headroom(g.free_bytes) for g in budget.gpus)
    return needed, fits and (ram is None or totals.get(CPU, 0) <= ram)


def _plan(
    models: _Models, budget: Budget, ctx: int, target: Model, tq: str, draft: Model | None = None, dq: str | None = None
) -> MemoryPlan:
    return plan_memory(
        models.info(target, tq), ctx, draft=models.info(draft, dq) if draft and dq else None, gpus=list(budget.gpus)
    )


def recommend(
    catalog: Catalog,
    budget: Budget,
    ctx: int = DEFAULT_CTX,
    family: str | None = None,
    limit: int = 10,
    near_miss_limit: int = 5,
    device: DeviceSpeed | None = None,
    speed_floor: float = DEFAULT_SPEED_FLOOR,
    host: DeviceSpeed | None = None,
    workload: str | None = None,
) -> Recommendation:
    """device: where the pairs would run (engine.planning.device_speed.local_device), so that they are
    ranked by what the speed model predicts there; None ranks by the bandwidth-bound speedup alone.
    A pair that does not fit the GPUs as llama.cpp places it by default is placed otherwise where it can
    be (engine.planning.placement: the draft on one GPU or the CPU, an MoE target's experts in RAM);
    host is the CPU's speed for the parts placed there (default: this CPU, measured or assumed).
    workload: a shipped workload set's name, whose prior acceptance the pairs are predicted at (None: the
    flat prior)."""
    if host is None and device is not None and budget.kind == "gpu":
        from engine.planning.device_speed import cpu_device

        host = cpu_device(os.cpu_count())
    if ctx < 1:
        raise RecommendError(f"--ctx must be 1 or more, got {ctx}")
    if speed_floor < 0:
        raise RecommendError(f"the speed floor must be 0 tokens/s or more, got {speed_floor}")
    if family is not None:
        catalog.family(family)  # CatalogError names the known families
    if workload is not None and workload not in ACCEPTANCE_PRIORS:
        raise RecommendError(f"no workload set {workload!r}; the shipped ones: {', '.join(sorted(ACCEPTANCE_PRIORS))}")
    models = _Models(catalog)
    presets = {(p.target.model, p.target.quant, p.draft.model, p.draft.quant): p.name for p in catalog.presets}
    pairing_speedups = {(p.target, p.draft): [vars(s) for s in p.speedups] for p in catalog.pairings}
    usable = budget.usable_bytes
    candidates: list[PairChoice] = []
    left_out: list[str] = []

    targets = [
        m for m in catalog.models if (m.family == family if family else m.repo != BUNDLED) and not m.is_draft_head
    ]
    for target in targets:
        drafts = _drafts(catalog, target)
        if not drafts:
            # the smallest model of a tokenizer is a draft, not a target; a model alone with its tokenizer is news
            if not any(m.tokenizer == target.tokenizer and m.id != target.id for m in catalog.models):
                left_out.append(
                    f"{target.id}: no other model with its tokenizer ({target.tokenizer}) in the "
                    "catalog to draft for it; n-gram speculation (ngram-mod) needs no draft"
                )
            continue
        if ctx > target.architecture.n_ctx_train:
            left_out.append(
                f"{target.id}: trained for {target.architecture.n_ctx_train} tokens of context, "
                f"less than the {ctx} asked"
            )
            continue
        for tq in target.quants:
            # the target alone first: far over the budget means no pair with it can be a near-miss either
            alone, _ = _needed(models.alone(budget, ctx, target, tq), budget)
            if alone > usable * NEAR_MISS_RATIO:
                continue
            # one candidate per target quant: its best (draft, draft quant)
            best: PairChoice | None = None
            for draft in drafts:
                for dq in (q for q in DRAFT_QUANTS if q in draft.files):
                    c = _candidate(
                        catalog, models, budget, ctx, target, tq, draft, dq, presets, pairing_speedups, workload
                    )
                    if not c.fits_memory and budget.kind == "gpu":
                        _place(c, models, budget, ctx, target, tq, draft, dq)
                    if device is not None:
                        _predict(c, models, device, speed_floor, ctx, target, tq, draft, dq, host)
                    if best is None or _better(c, best):
                        best = c
            if best is not None:
                candidates.append(best)
    fits = [c for c in candidates if c.fits_memory and _worth_listing(c)]
    for c in candidates:
        if c.too_slow:
            c.why_not = (
                f"fits, but about {tokens_per_s_text(c.tokens_per_s or 0.0)} tokens/s here, under the floor of "
                f"{speed_floor:g} tokens/s"
            )
        elif c.fits_memory and c.speedup < MIN_SPEEDUP and c.prediction is None:
            c.why_not = (
                f"fits, but the draft costs {100 * c.cost_ratio:.0f}% of the target per token: "
                f"expected x{c.speedup:.2f}, not worth its memory"
            )
        elif not c.fits_memory and c.ram_short and c.needed_bytes <= c.usable_bytes:
            how = f" with {c.placement.describe()}" if c.placement else ""
            c.why_not = (
                f"the GPUs hold their part{how}, but that keeps {format_plan_bytes(c.host_bytes)} in RAM, more than "
                f"the {format_plan_bytes(c.ram_usable_bytes or 0)} usable"
            )
        elif not c.fits_memory:
            over = c.needed_bytes - c.usable_bytes
            c.why_not = (
                f"needs {format_plan_bytes(c.needed_bytes)}, {format_plan_bytes(over)} more than the "
                f"{format_plan_bytes(c.usable_bytes)} usable"
            )
            shorter = _fitting_ctx(catalog, models, budget, ctx, c)
            if shorter:
                c.why_not += f"; fits with --ctx {shorter}"
    misses = [c for c in candidates if c.why_not and c.needed_bytes <= usable * NEAR_MISS_RATIO]
    # ties (Qwen2.5 and Qwen2.5-Coder share their shapes) break on the speed, the smaller plan, then the name
    fits.sort(key=lambda c: (-c.score, -(c.tokens_per_s or 0.0), c.needed_bytes, c.label))
    # near-misses: the fastest first when the speed is known (those under the floor are not short of memory)
    misses.sort(key=lambda c: (-(c.tokens_per_s or 0.0), -c.score, c.needed_bytes, c.label))
    fits, misses = fits[:limit], misses[:near_miss_limit]
    for c in fits:  # the shown ones get llama.cpp's whole plan (screening added the two models' parts)
        if c.plan is not None:
            continue  # placed: its plan is the placement's
        c.plan = _plan(
            models,
            budget,
            ctx,
            catalog.model(c.target.model),
            c.target.quant,
            catalog.model(c.draft.model),
            c.draft.quant,
        )
    return Recommendation(budget, ctx, family, fits, misses, sorted(set(left_out)), device, speed_floor)


def _place(
    c: PairChoice, models: _Models, budget: Budget, ctx: int, target: Model, tq: str, draft: Model, dq: str
) -> None:
    """Where the pair fits the GPUs when llama.cpp's default placement does not: the candidate then fits,
    with that placement and its plan, when the RAM holds what the placement keeps on the CPU; otherwise it
    keeps the placement and does not fit, so that its near-miss says so. One search, for the GPUs alone, as
    ranking the catalog must stay quick: the fastest arrangement that fits them usually keeps the least on the
    CPU too (the Lab and `spectune plan` search with the RAM, engine.planning.placement.place)."""
    placed = place(models.info(target, tq), models.info(draft, dq), ctx, list(budget.gpus), headroom)
    if placed is None or placed[0].is_default:
        return  # none fits the GPUs; or llama.cpp's own does and only the RAM is short, as the candidate says
    c.placement, c.plan = placed
    c.needed_bytes, c.fits_memory = _needed(c.plan, budget)
    c.host_bytes = c.plan.device_totals().get(CPU, 0)


def _worth_listing(c: PairChoice) -> bool:
    """Fast enough here (with a device), else a draft worth its memory."""
    return not c.too_slow if c.prediction is not None else c.speedup >= MIN_SPEEDUP


def _predict(
    c: PairChoice,
    models: _Models,
    device: DeviceSpeed,
    floor: float,
    ctx: int,
    target: Model,
    tq: str,
    draft: Model,
    dq: str,
    host: DeviceSpeed | None = None,
) -> None:
    """The speed model's numbers for the candidate on the device (its parts placed on the CPU at the host's
    speed); they replace its bandwidth-bound speedup and its speed points."""
    placement = c.placement or Placement()
    target_cost, on_host = models.cost(target, tq), None
    if placement.n_cpu_moe and host is not None:
        n = placement.n_cpu_moe
        target_cost, on_host = split_cost(models.info(target, tq), lambda name: expert_on_cpu(name, n))
    p = predict(
        target_cost,
        models.cost(draft, dq),
        device,
        n_past=min(ctx, PREDICT_N_PAST),
        acceptance=c.acceptance_prior,
        k_max=K_MAX,
        host=host,
        target_on_host=on_host,
        draft_on_host=placement.draft_on_cpu and host is not None,
    )
    k = p.best_k or max(p.speedup_by_k, key=lambda k: p.speedup_by_k[k])
    c.prediction, c.speed_floor = p, floor
    block = models.mtp_cost(target, tq) if c.mtp_head else None
    if block is not None and not placement.n_cpu_moe:  # the block runs where the target's last layers run
        c.mtp_prediction = predict(
            target_cost,
            block,
            device,
            n_past=min(ctx, PREDICT_N_PAST),
            acceptance=c.acceptance_prior,
            k_max=K_MAX,
        )
    c.speedup, c.draft_n_max, c.tokens_per_s_bound = round(p.speedup_by_k[k], 3), k, None
    pace = min(c.tokens_per_s or 0.0, PACE_CAP * floor) if floor else PACE_CAP
    c.score_parts["speed"] = round(10 * math.log2(max(pace, 1e-3) / (floor or 1.0)), 2)


def _fitting_ctx(catalog: Catalog, models: _Models, budget: Budget, ctx: int, c: PairChoice) -> int | None:
    """The longest of ctx/2, ctx/4 (at least 2048 tokens) at which the pair fits, if one does."""
    target, draft = catalog.model(c.target.model), catalog.model(c.draft.model)
    for shorter in (ctx // 2, ctx // 4):
        if shorter < 2048:
            break
        if _needed(models.pair_totals(budget, shorter, target, c.target.quant, draft, c.draft.quant), budget)[1]:
            return shorter
    return None


def size_params(model: Model) -> float:
    """The parameter count the size score uses: the published one for a dense model; for a mixture of
    experts the geometric mean of its total and active parameters, a common rule of thumb for the dense
    model it matches in quality (Qwen3-30B-A3B counts as about 10B, not 30B)."""
    a = model.architecture
    return math.sqrt(a.params * a.active_params) if a.is_moe else a.params


def _drafts(catalog: Catalog, target: Model) -> list[Model]:
    """Drafts worth planning for a target: the same tokenizer and at most MAX_DRAFT_SHARE of the parameters
    a target token passes through (an MoE target's used experts, not all of them); from the target's own
    family when it has any (a sibling model agrees with it more often)."""
    able = [
        d
        for d in catalog.drafts_for(target.id)
        if (d.repo != BUNDLED or target.repo == BUNDLED)
        and d.architecture.params <= MAX_DRAFT_SHARE * target.architecture.active_params
    ]
    own = [d for d in able if d.family == target.family]
    return own or able


def _better(a: PairChoice, b: PairChoice) -> bool:
    """A fitting candidate beats a non-fitting one; then the higher score; then the faster (past the pace cap
    the score no longer tells drafts apart); then the smaller plan."""
    if a.fits_memory != b.fits_memory:
        return a.fits_memory
    return (a.score, a.tokens_per_s or 0.0, -a.needed_bytes) > (b.score, b.tokens_per_s or 0.0, -b.needed_bytes)


def _candidate(
    catalog: Catalog,
    models: _Models,
    budget: Budget,
    ctx: int,
    target: Model,
    tq: str,
    draft: Model,
    dq: str,
    presets: dict,
    pairing_speedups: dict,
    workload: str | None = None,
) -> PairChoice:
    totals = models.pair_totals(budget, ctx, target, tq, draft, dq)
    needed, fits = _needed(totals, budget)
    target_bytes = models.bytes_per_token(target, tq)
    cost_ratio = models.bytes_per_token(draft, dq) / target_bytes
    ppl, estimated = quant_quality(catalog, tq)
    draft_ppl, _ = quant_quality(catalog, dq)
    speedup, k, alpha = expected_speedup(cost_ratio, draft_ppl, workload)
    params = target.architecture.params
    parts = {
        "size": round(10 * math.log2(size_params(target) / 1e9), 2),
        "quant": round(-20 * ppl, 2),
        "speed": round(10 * math.log2(speedup), 2),
    }
    tps = budget.bandwidth_bytes_per_s / target_bytes * speedup if budget.bandwidth_bytes_per_s else None
    return PairChoice(
        catalog.model_file(target.id, tq),
        catalog.model_file(draft.id, dq),
        params,
        None,
        needed,
        budget.usable_bytes,
        fits,
        ppl,
        estimated,
        catalog.quant(tq).bits_per_weight,
        round(cost_ratio, 4),
        round(speedup, 3),
        k,
        round(alpha, 3),
        round(tps, 1) if tps else None,
        parts,
        pairing_speedups.get((target.id, draft.id), []),
        presets.get((target.id, tq, draft.id, dq)),
        active_params=target.architecture.active_params if target.architecture.is_moe else 0,
        mtp_head=target.architecture.nextn_layers > 0 and target.architecture.llama_arch in MTP_ARCHITECTURES,
        host_bytes=totals.get(CPU, 0) if budget.kind == "gpu" else 0,
        ram_usable_bytes=budget.ram_usable_bytes if budget.kind == "gpu" else None,
    )


# -- presets against a budget -----------------------------------------------------------------------


@dataclass
class PresetFit:
    name: str
    description: str
    target: ModelFile
    draft: ModelFile
    download_bytes: int
    sizes_estimated: bool
    needed_bytes: int | None
    fits: bool | None
    why: str
    placement: Placement | None = None  # how it fits when llama.cpp's default placement does not

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "description": self.description,
            "target": vars(self.target).copy(),
            "draft": vars(self.draft).copy(),
            "download_bytes": self.download_bytes,
            "sizes_estimated": self.sizes_estimated,
            "needed_bytes": self.needed_bytes,
            "fits": self.fits,
            "why": self.why,
            "placement": self.placement.to_dict() if self.placement else None,
            "placement_flags": self.placement.flags() if self.placement else [],
        }


def preset_fits(catalog: Catalog, budget: Budget | None, ctx: int = DEFAULT_CTX) -> list[PresetFit]:
    models = _Models(catalog)
    out = []
    for p in catalog.presets:
        target, draft = catalog.model(p.target.model), catalog.model(p.draft.model)
        sizes, estimated = [], False
        for f, m in ((p.target, target), (p.draft, draft)):
            if f.size_bytes:
                sizes.append(f.size_bytes)
            elif f.bundled_path is not None and f.bundled_path.is_file():
                sizes.append(f.bundled_path.stat().st_size)
            else:
                sizes.append(models.info(m, f.quant).tensor_bytes)
                estimated = True
        needed, fits, why, placement = None, None, "no budget given", None
        if budget is not None:
            run_ctx = min(ctx, target.architecture.n_ctx_train)
            plan = _plan(models, budget, run_ctx, target, p.target.quant, draft, p.draft.quant)
            needed, fits = _needed(plan, budget)
            if not fits and budget.kind == "gpu":
                # as recommend does: the draft elsewhere, or an MoE target's experts partly in RAM
                placed = place(
                    models.info(target, p.target.quant),
                    models.info(draft, p.draft.quant),
                    run_ctx,
                    list(budget.gpus),
                    headroom,
                    budget.ram_bytes,
                )
                if placed is not None:
                    placement, plan = placed
                    needed, fits = _needed(plan, budget)
            verdict = "fits" if fits else f"does not fit ({format_plan_bytes(needed - budget.usable_bytes)} over)"
            if not fits and needed <= budget.usable_bytes:  # the GPUs hold their part, the RAM not the rest
                host = plan.device_totals().get(CPU, 0)
                verdict = (
                    f"does not fit: {format_plan_bytes(host)} in RAM, more than the "
                    f"{format_plan_bytes(budget.ram_usable_bytes or 0)} usable"
                )
            if placement is not None:
                verdict += f" with {placement.describe()} ({' '.join(placement.flags())})"
            usable = format_plan_bytes(budget.usable_bytes)
            why = f"{format_plan_bytes(needed)} of {usable} usable at {run_ctx} tokens: {verdict}"
        out.append(
            PresetFit(p.name, p.description, p.target, p.draft, sum(sizes), estimated, needed, fits, why, placement)
        )
    return out


# -- text --------------------------------------------------------------------------------------------


def pull_commands(target: ModelFile, draft: ModelFile | None, preset: str | None = None) -> list[str]:
    """How to download a pair with `spectune pull`: the preset when there is one, else each hub file
    (the target alone when the draft is not worth having here)."""
    if preset and draft is not None:
        return [f"spectune pull {preset}"]
    return [f"spectune pull {f.repo}:{f.filename}" for f in (target, draft) if f is not None and not f.bundled]


def _rounded(x: float | None) -> float | None:
    return None if x is None else round(x, 2)


def _where(f: ModelFile) -> str:
    return f"{f.bundled_path} (bundled)" if f.bundled else f"{f.repo}/{f.filename}"


def format_recommendation(r: Recommendation) -> str:
    lines = [
        f"budget: {r.budget.describe()}",
        f"context: {r.ctx} tokens" + (f"; family {r.family}" if r.family else ""),
    ]
    if r.device is not None:
        lines.append(
            f"speed: predicted on {r.device.name} ({r.device.source}); pairs under {r.speed_floor:g} tokens/s "
            "are near-misses"
        )
    if not r.recommended:
        lines.append("nothing in the catalog fits with headroom" + (" in this family" if r.family else ""))
    for i, c in enumerate(r.recommended, 1):
        preset = f"  [preset {c.preset}]" if c.preset else ""
        lines.append(
            f"{i:>2}. {c.label}  score {c.score:+.1f}  {format_plan_bytes(c.needed_bytes)}  {c.speed_text()}{preset}"
        )
        lines.append(f"      {_where(c.target)}")
        lines.append(f"      {_where(c.draft)}")
        lines += [f"      - {reason}" for reason in c.reasons()]
        draft = c.draft if c.uses_draft else None
        lines += [f"      get it: {command}" for command in pull_commands(c.target, draft, c.preset)]
    if r.near_misses:
        lines.append("near misses:")
        lines += [f"  - {c.label} (score {c.score:+.1f}): {c.why_not}" for c in r.near_misses]
    if r.left_out:
        lines.append("left out:")
        lines += [f"  - {reason}" for reason in r.left_out]
    return "\n".join(lines)


def format_presets(fits: Iterable[PresetFit], budget: Budget | None) -> str:
    lines = [f"budget: {budget.describe()}" if budget else "budget: none (sizes only)"]
    for f in fits:
        mark = {True: "fits", False: "too big", None: "-"}[f.fits]
        size = ("~" if f.sizes_estimated else "") + format_plan_bytes(f.download_bytes)
        lines.append(f"{f.name:<36} {size:>11} download  {mark:<8} {f.description}")
        lines.append(f"{'':<36} {f.target.quant} {_where(f.target)}")
        lines.append(f"{'':<36} {f.draft.quant} {_where(f.draft)}")
        if f.fits is not None:
            lines.append(f"{'':<36} {f.why}")
    return "\n".join(lines)
