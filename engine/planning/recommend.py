"""What should I run: ranked target/draft/quantization choices that fit a memory budget.

budget   engine.planning.budget: free VRAM of the GPUs (NVML) or a size the user gives;
         without a GPU, available RAM for a CPU-only run. Headroom is kept back
         on every device: max(512 MiB, 5%) for the driver, other programs and the
         plan's own error.
plan     engine.planning.memory_plan on models built from the catalog's numbers
         (engine.planning.catalog_models): weights, both KV caches at the target's
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
         for a coarse draft quant) until the lab measures the real one; K is the best of 1..K_MAX
         (engine.planning.constants).
left out near-misses (within 25% of the budget, under the speed floor, or fitting but
         not worth a draft) come with the reason; models without a same-tokenizer draft in
         the catalog, or whose trained context is shorter than asked, are named.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

from engine.core.units import format_plan_bytes
from engine.models.catalog import BUNDLED, Catalog, CatalogError, Model, ModelFile, load_catalog
from engine.models.draft_heads import MTP_ARCHITECTURES
from engine.planning.budget import Budget, BudgetError, budget_from_hardware, headroom, needed_and_fits
from engine.planning.catalog_models import CatalogModels, plan_pair, quant_quality, size_params, where_text
from engine.planning.constants import DEFAULT_CTX, DEFAULT_SPEED_FLOOR, K_MAX, PREDICT_N_PAST
from engine.planning.cost_model import leviathan_speedup
from engine.planning.device_speed import DeviceSpeed, local_device
from engine.planning.gpu_table import GpuTableError, described_report, find_gpu
from engine.planning.hardware import probe
from engine.planning.memory_plan import CPU, MemoryPlan, PlanError, expert_on_cpu
from engine.planning.model_cost import split_cost
from engine.planning.placement import Placement, place
from engine.planning.presets import PresetFit, preset_fits
from engine.planning.speed_model import (
    ACCEPTANCE_PRIORS,
    CONCURRENT_CLIENTS,
    Prediction,
    acceptance_prior,
    best_concurrent_k,
    concurrent_speedups,
    predict,
    tokens_per_s_text,
)

PACE_CAP = 4.0  # speed counts in the score up to this many times the floor
MIN_SPEEDUP = 1.05  # below this a draft is not worth its memory
NEAR_MISS_RATIO = 1.25  # plans up to 25% over the usable memory are reported as near-misses
DRAFT_QUANTS = ("Q8_0", "Q6_K", "Q4_K_M", "F16")  # the draft quants worth trying, best acceptance first
# acceptance lost per unit of the draft quant's perplexity increase: small drafts suffer more from
# quantization than the 8B model the table was measured on, so this is larger than a plain ratio would be
DRAFT_QUANT_PENALTY = 0.5
# drafts above this share of the target's parameters cost too much per token to pay off (c > ~0.3)
MAX_DRAFT_SHARE = 0.3


class RecommendError(ValueError):
    """The budget or the request cannot be used; the message says why."""


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
    # with N requests at once (llama-server -np N): the best K and its aggregate speedup, or None where no K pays
    # (engine.planning.speed_model.concurrent_speedups); filled for the shown pairs on a GPU
    concurrent: dict[int, tuple[int, float] | None] = field(default_factory=dict)

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

    @property
    def setting_label(self) -> str:
        """What to run: the pair, or the target alone where its draft is predicted not to pay."""
        return self.label if self.uses_draft else f"{self.target.model} {self.target.quant}, alone"

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
        if self.concurrent:
            parts = [
                f"{n}: K={best[0]} x{best[1]:.2f}" if best else f"{n}: none pays"
                for n, best in sorted(self.concurrent.items())
            ]
            out.append(
                "requests at once (-np N), the best K and the aggregate speedup: "
                + ", ".join(parts)
                + " (each client adds K + 1 tokens to every verify pass)"
            )
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
            "concurrent": {
                str(n): None if best is None else {"k": best[0], "speedup": round(best[1], 3)}
                for n, best in self.concurrent.items()
            },
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
    _check_request(catalog, ctx, speed_floor, family, workload)
    search = _Search(catalog, CatalogModels(catalog), budget, ctx, device, speed_floor, host, workload)
    candidates: list[PairChoice] = []
    left_out: list[str] = []
    targets = [
        m for m in catalog.models if (m.family == family if family else m.repo != BUNDLED) and not m.is_draft_head
    ]
    for target in targets:
        drafts = candidate_drafts(catalog, target)
        reason = _left_out_reason(catalog, target, drafts, ctx)
        if reason:
            left_out.append(reason)
            continue
        for tq in target.quants if drafts else ():
            best = search.best_pair(target, tq, drafts)
            if best is not None:
                candidates.append(best)
    usable = budget.usable_bytes
    fits = [c for c in candidates if c.fits_memory and _worth_listing(c)]
    for c in candidates:
        c.why_not = search.why_not(c)
    misses = [c for c in candidates if c.why_not and c.needed_bytes <= usable * NEAR_MISS_RATIO]
    # ties (Qwen2.5 and Qwen2.5-Coder share their shapes) break on the speed, the smaller plan, then the name
    fits.sort(key=lambda c: (-c.score, -(c.tokens_per_s or 0.0), c.needed_bytes, c.label))
    # near-misses: the fastest first when the speed is known (those under the floor are not short of memory)
    misses.sort(key=lambda c: (-(c.tokens_per_s or 0.0), -c.score, c.needed_bytes, c.label))
    fits, misses = fits[:limit], misses[:near_miss_limit]
    for c in fits:  # the shown ones get llama.cpp's whole plan (screening added the two models' parts)
        target, draft = catalog.model(c.target.model), catalog.model(c.draft.model)
        if c.plan is None:  # (a placed one's plan is the placement's)
            c.plan = plan_pair(search.models, budget, ctx, target, c.target.quant, draft, c.draft.quant)
        if device is not None and device.gpu_fit is not None and c.placement is None:
            t_cost, d_cost = search.models.cost(target, c.target.quant), search.models.cost(draft, c.draft.quant)
            c.concurrent = {
                n: best_concurrent_k(
                    concurrent_speedups(
                        t_cost, d_cost, device, n, acceptance=c.acceptance_prior, n_past=min(ctx, PREDICT_N_PAST)
                    )
                )
                for n in CONCURRENT_CLIENTS
            }
    return Recommendation(budget, ctx, family, fits, misses, sorted(set(left_out)), device, speed_floor)


def _check_request(catalog: Catalog, ctx: int, speed_floor: float, family: str | None, workload: str | None) -> None:
    """RecommendError (CatalogError for an unknown family) for a request that cannot be answered."""
    if ctx < 1:
        raise RecommendError(f"--ctx must be 1 or more, got {ctx}")
    if speed_floor < 0:
        raise RecommendError(f"the speed floor must be 0 tokens/s or more, got {speed_floor}")
    if family is not None:
        catalog.family(family)  # CatalogError names the known families
    if workload is not None and workload not in ACCEPTANCE_PRIORS:
        raise RecommendError(f"no workload set {workload!r}; the shipped ones: {', '.join(sorted(ACCEPTANCE_PRIORS))}")


def _left_out_reason(catalog: Catalog, target: Model, drafts: list[Model], ctx: int) -> str | None:
    """Why a target gets no candidate at all, where that is news to the user; None when it is considered (or
    when it has no draft because it is the smallest model of its tokenizer: a draft, not a target)."""
    if not drafts:
        if not any(m.tokenizer == target.tokenizer and m.id != target.id for m in catalog.models):
            return (
                f"{target.id}: no other model with its tokenizer ({target.tokenizer}) in the "
                "catalog to draft for it; n-gram speculation (ngram-mod) needs no draft"
            )
        return None
    if ctx > target.architecture.n_ctx_train:
        return (
            f"{target.id}: trained for {target.architecture.n_ctx_train} tokens of context, less than the {ctx} asked"
        )
    return None


@dataclass
class _Search:
    """What every candidate of one recommendation is built against, and the steps that build one."""

    catalog: Catalog
    models: CatalogModels
    budget: Budget
    ctx: int
    device: DeviceSpeed | None
    speed_floor: float
    host: DeviceSpeed | None
    workload: str | None
    presets: dict = field(init=False)
    pairing_speedups: dict = field(init=False)

    def __post_init__(self) -> None:
        c = self.catalog
        self.presets = {(p.target.model, p.target.quant, p.draft.model, p.draft.quant): p.name for p in c.presets}
        self.pairing_speedups = {(p.target, p.draft): [vars(s) for s in p.speedups] for p in c.pairings}

    def best_pair(self, target: Model, tq: str, drafts: list[Model]) -> PairChoice | None:
        """One candidate per target quant: its best (draft, draft quant); None when the target alone is far
        over the budget (then no pair with it can be a near-miss either)."""
        budget, ctx, models = self.budget, self.ctx, self.models
        alone, _ = needed_and_fits(models.alone(budget, ctx, target, tq), budget)
        if alone > budget.usable_bytes * NEAR_MISS_RATIO:
            return None
        best: PairChoice | None = None
        for draft in drafts:
            for dq in (q for q in DRAFT_QUANTS if q in draft.files):
                c = _candidate(
                    self.catalog,
                    models,
                    budget,
                    ctx,
                    target,
                    tq,
                    draft,
                    dq,
                    self.presets,
                    self.pairing_speedups,
                    self.workload,
                )
                if not c.fits_memory and budget.kind == "gpu":
                    _place(c, models, budget, ctx, target, tq, draft, dq)
                if self.device is not None:
                    _predict(c, models, self.device, self.speed_floor, ctx, target, tq, draft, dq, self.host)
                if best is None or _better(c, best):
                    best = c
        return best

    def why_not(self, c: PairChoice) -> str:
        """Why a candidate is not recommended ("" when it is): too slow here, a draft not worth its memory,
        the RAM short for a placement's host part, or the memory short (with a context that would fit)."""
        if c.too_slow:
            return (
                f"fits, but about {tokens_per_s_text(c.tokens_per_s or 0.0)} tokens/s here, under the floor of "
                f"{self.speed_floor:g} tokens/s"
            )
        if c.fits_memory and c.speedup < MIN_SPEEDUP and c.prediction is None:
            return (
                f"fits, but the draft costs {100 * c.cost_ratio:.0f}% of the target per token: "
                f"expected x{c.speedup:.2f}, not worth its memory"
            )
        if not c.fits_memory and c.ram_short and c.needed_bytes <= c.usable_bytes:
            how = f" with {c.placement.describe()}" if c.placement else ""
            return (
                f"the GPUs hold their part{how}, but that keeps {format_plan_bytes(c.host_bytes)} in RAM, more than "
                f"the {format_plan_bytes(c.ram_usable_bytes or 0)} usable"
            )
        if not c.fits_memory:
            over = c.needed_bytes - c.usable_bytes
            text = (
                f"needs {format_plan_bytes(c.needed_bytes)}, {format_plan_bytes(over)} more than the "
                f"{format_plan_bytes(c.usable_bytes)} usable"
            )
            shorter = _fitting_ctx(self.catalog, self.models, self.budget, self.ctx, c)
            return text + (f"; fits with --ctx {shorter}" if shorter else "")
        return c.why_not


def _place(
    c: PairChoice, models: CatalogModels, budget: Budget, ctx: int, target: Model, tq: str, draft: Model, dq: str
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
    c.needed_bytes, c.fits_memory = needed_and_fits(c.plan, budget)
    c.host_bytes = c.plan.device_totals().get(CPU, 0)


def _worth_listing(c: PairChoice) -> bool:
    """Fast enough here (with a device), else a draft worth its memory."""
    return not c.too_slow if c.prediction is not None else c.speedup >= MIN_SPEEDUP


def _predict(
    c: PairChoice,
    models: CatalogModels,
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


def _fitting_ctx(catalog: Catalog, models: CatalogModels, budget: Budget, ctx: int, c: PairChoice) -> int | None:
    """The longest of ctx/2, ctx/4 (at least 2048 tokens) at which the pair fits, if one does."""
    target, draft = catalog.model(c.target.model), catalog.model(c.draft.model)
    for shorter in (ctx // 2, ctx // 4):
        if shorter < 2048:
            break
        if needed_and_fits(models.pair_totals(budget, shorter, target, c.target.quant, draft, c.draft.quant), budget)[
            1
        ]:
            return shorter
    return None


def candidate_drafts(catalog: Catalog, target: Model) -> list[Model]:
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
    models: CatalogModels,
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
    needed, fits = needed_and_fits(totals, budget)
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
        mtp_head=target.architecture.nextn_layers > 0 and target.architecture.architecture in MTP_ARCHITECTURES,
        host_bytes=totals.get(CPU, 0) if budget.kind == "gpu" else 0,
        ram_usable_bytes=budget.ram_usable_bytes if budget.kind == "gpu" else None,
    )


# -- this machine ------------------------------------------------------------------------------------


@dataclass
class CatalogView:
    """One pass over the catalog for this machine as it is: the budget its hardware gives, the pairs ranked
    for it and the presets' fits (the Models and Start pages show it)."""

    catalog: Catalog
    ctx: int
    budget: Budget | None = None  # None when it could not be measured
    recommendation: Recommendation | None = None
    fits: list[PresetFit] | None = None
    error: str = ""  # why there is no recommendation


def rank_catalog(
    catalog: Catalog | None,
    nvml: ModuleType | None,
    ctx: int,
    speed_floor: float = DEFAULT_SPEED_FLOOR,
    probe_cache: Path | None = None,
    workload: str | None = None,
    apart: bool = False,
    gpu: str | None = None,
    gpu_count: int = 1,
) -> CatalogView:
    """The catalog (loaded when None), the budget NVML sees (or RAM), the list ranked by the speed predicted
    on this machine's device (the GPU, else the CPU as last measured or as assumed from its cores) and the
    presets' fits; what `spectune recommend --no-probe [--workload SET]` and `spectune presets` print. A
    budget that cannot be measured still leaves the presets with their sizes. probe_cache: where the CPU
    probe is kept; workload: the kind of text, whose prior acceptance the pairs are predicted at. apart: the
    ranking itself (all but the hardware's probe) runs in a child process (engine.core.child_call: the
    desktop app's, whose GUI thread would wait on the GIL). gpu: a card from SpecTune's GPU table to rank for
    instead of this machine's (gpu_count of it, its whole memory free; engine.planning.gpu_table)."""
    catalog = catalog if catalog is not None else load_catalog()
    try:
        report = described_report(find_gpu(gpu), gpu_count) if gpu else probe(nvml)
        budget = budget_from_hardware(nvml, report=report)
        device = local_device(report, probe_cache)
    except (BudgetError, CatalogError, PlanError, GpuTableError) as exc:
        budget, device, error = None, None, str(exc)
    else:
        error = ""
    if apart:
        from engine.core.child_call import call

        view: CatalogView = call(
            "engine.planning.recommend",
            "rank_for",
            catalog=catalog,
            budget=budget,
            device=device,
            ctx=ctx,
            error=error,
            speed_floor=speed_floor,
            workload=workload,
        )
        return view
    return rank_for(catalog, budget, device, ctx, error, speed_floor, workload)


def rank_for(
    catalog: Catalog,
    budget: Budget | None,
    device: DeviceSpeed | None,
    ctx: int,
    error: str = "",
    speed_floor: float = DEFAULT_SPEED_FLOOR,
    workload: str | None = None,
) -> CatalogView:
    """rank_catalog's computation, from the hardware's budget and device (None with the error that left
    them unmeasured)."""
    if budget is None:
        return CatalogView(catalog, ctx, fits=preset_fits(catalog, None, ctx), error=error)
    try:
        rec = recommend(catalog, budget, ctx=ctx, device=device, speed_floor=speed_floor, workload=workload)
    except (BudgetError, CatalogError, PlanError) as exc:
        return CatalogView(catalog, ctx, fits=preset_fits(catalog, None, ctx), error=str(exc))
    return CatalogView(catalog, ctx, budget, rec, preset_fits(catalog, budget, ctx))


@dataclass(frozen=True)
class StartChoices:
    """What a newcomer is shown first (the Start page): a few choices and the sentence above them."""

    headline: str
    choices: list[PairChoice]
    drafts_pay: bool  # some fitting pair's draft is predicted to pay on this device (True without a device)


def start_choices(rec: Recommendation, n: int) -> StartChoices:
    """Where drafts pay here, the pairs whose speculation is fastest. Where none does (a CPU, where verifying
    K + 1 tokens costs about K + 1 tokens), the models to run alone, smallest first, as a laptop owner would
    try them, with one line on why and what would change it. Under the speed floor, the fastest that fit."""
    where = rec.budget.describe(short=True)
    if rec.device is None:  # no speed known: the score's ranking, by the bandwidth-bound speedup
        return StartChoices(f"For {where}:", rec.recommended[:n], True)
    fitting = rec.recommended
    if not fitting:
        slow = [c for c in rec.near_misses if c.too_slow][:n]
        head = (
            f"Nothing in the catalog is predicted to reach {rec.speed_floor:g} tokens/s on this machine. "
            "The fastest that fit:"
            if slow
            else "Nothing in the catalog fits this machine's free memory with headroom."
        )
        pays = any(c.uses_draft for c in slow)
        if slow and not pays:  # slow, and no draft helps: say why, as above the floor
            head = _why_no_draft_pays(rec.device, slow[0]) + " " + head
        return StartChoices(head, slow, pays)
    paying = [c for c in fitting if c.uses_draft]
    if paying:
        paying.sort(key=lambda c: -(c.tokens_per_s or 0.0))
        return StartChoices(f"For {where}, the pairs whose drafts pay most here:", paying[:n], True)
    alone = sorted(fitting, key=lambda c: (c.needed_bytes, c.label))[:n]
    head = _why_no_draft_pays(rec.device, alone[0]) + " Models to run alone, smallest first:"
    return StartChoices(head, alone, False)


def _why_no_draft_pays(device: DeviceSpeed, c: PairChoice) -> str:
    """One line: why no draft pays on this device, measured by its own prediction, and what would change it."""
    pr = c.prediction
    assert pr is not None
    one, five = pr.verify_ms_by_batch.get(1), pr.verify_ms_by_batch.get(5)
    cost = f": checking 5 tokens at once costs x{five / one:.1f} one token's pass here" if one and five else ""
    return (
        f"No draft pays on {device.name}{cost}, so a draft's guesses save little. A GPU checks several tokens "
        "for about the price of one, which is where drafts pay. ngram-mod needs no draft and can pay where "
        "text repeats (code edits)."
    )


# -- text --------------------------------------------------------------------------------------------


def pull_commands(target: ModelFile, draft: ModelFile | None, preset: str | None = None) -> list[str]:
    """How to download a pair with `spectune pull`: the preset when there is one, else each hub file
    (the target alone when the draft is not worth having here)."""
    if preset and draft is not None:
        return [f"spectune pull {preset}"]
    return [f"spectune pull {f.repo}:{f.filename}" for f in (target, draft) if f is not None and not f.bundled]


def _rounded(x: float | None) -> float | None:
    return None if x is None else round(x, 2)


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
        lines.append(f"      {where_text(c.target)}")
        lines.append(f"      {where_text(c.draft)}")
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
