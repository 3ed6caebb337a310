"""What should I run: ranked target/draft/quantization choices that fit a memory budget. Each choice, with
its reasons and JSON, is an engine.planning.advice.choice.PairChoice; the CLI and the pages word the rest.

budget   engine.planning.memory.budget: free VRAM of the GPUs (NVML) or a size the user gives;
         without a GPU, available RAM for a CPU-only run. Headroom is kept back
         on every device: max(512 MiB, 5%) for the driver, other programs and the
         plan's own error.
plan     engine.planning.memory.memory_plan on models built from the catalog's numbers
         (engine.planning.advice.catalog_models): weights, both KV caches at the target's
         context, compute and output buffers.
pairs    drafts share the target's tokenizer, have at most MAX_DRAFT_SHARE of its
         (active) parameters and come from its own family when it has any; each target
         quant is listed once, with its best draft and draft quant.
speed    with the device's speed (engine.planning.speed.device_speed: the GPU from NVML and a table,
         the CPU as measured or assumed), the speed model (engine.planning.speed.speed_model)
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
                  a bandwidth-bound decoder (engine.planning.speed.cost_model.leviathan_speedup)
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
from engine.models.catalog import BUNDLED, Catalog, CatalogError, Model, load_catalog
from engine.models.draft_heads import MTP_ARCHITECTURES
from engine.planning.advice.catalog_models import CatalogModels, plan_pair, quant_quality, size_params
from engine.planning.advice.choice import PairChoice, Recommendation
from engine.planning.advice.placement import Placement, place
from engine.planning.advice.presets import PresetFit, preset_fits
from engine.planning.constants import DEFAULT_CTX, DEFAULT_SPEED_FLOOR, K_MAX, PREDICT_N_PAST
from engine.planning.hardware import probe
from engine.planning.memory.budget import Budget, BudgetError, budget_from_hardware, headroom, needed_and_fits
from engine.planning.memory.memory_plan import CPU, PlanError, expert_on_cpu
from engine.planning.speed.cost_model import leviathan_speedup
from engine.planning.speed.device_speed import DeviceSpeed, local_device
from engine.planning.speed.gpu_table import GpuTableError, described_report, find_gpu
from engine.planning.speed.model_cost import split_cost
from engine.planning.speed.speed_model import (
    ACCEPTANCE_PRIORS,
    CONCURRENT_CLIENTS,
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
    workload set's kind of text (engine.planning.speed.speed_model.ACCEPTANCE_PRIORS; None: the flat prior)."""
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
    """device: where the pairs would run (engine.planning.speed.device_speed.local_device), so that they are
    ranked by what the speed model predicts there; None ranks by the bandwidth-bound speedup alone.
    A pair that does not fit the GPUs as llama.cpp places it by default is placed otherwise where it can
    be (engine.planning.advice.placement: the draft on one GPU or the CPU, an MoE target's experts in RAM);
    host is the CPU's speed for the parts placed there (default: this CPU, measured or assumed).
    workload: a shipped workload set's name, whose prior acceptance the pairs are predicted at (None: the
    flat prior)."""
    if host is None and device is not None and budget.kind == "gpu":
        from engine.planning.speed.device_speed import cpu_device

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
    CPU too (the Lab and `spectune plan` search with the RAM, engine.planning.advice.placement.place)."""
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
    instead of this machine's (gpu_count of it, its whole memory free; engine.planning.speed.gpu_table)."""
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
            "engine.planning.advice.recommend",
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
