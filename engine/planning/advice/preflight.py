"""Can this pair load here, and why not: one verdict with its reasons, for every page and command that asks.

Three checks, in the order a load would fail:

1. the files: a GGUF that is broken or truncated (engine.models.gguf_check), or a draft head (an
   EAGLE-3 or DFlash file) chosen as the target (engine.models.draft_heads);
2. the vocabularies: llama.cpp's draft/target rule (engine.models.compat); llama-server drops a draft
   that breaks it and runs without speculation, specrt refuses it;
3. the memory: the plan of both models, their KV caches and compute buffers against the free VRAM
   per GPU, or the available RAM without one (engine.planning.memory.fit).

The Lab refuses a pair that fails 1 or 2 and offers "Load anyway" for 3; the Models page shows all
three; the Export page turns them into warnings about the exported command; ``spectune plan``
prints the fit. Each words the verdict for its own reader from the same ``Preflight``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.core.settings import LoadSettings
from engine.models.compat import check_pair
from engine.models.draft_heads import MethodVerdict, method_verdicts, target_refusal
from engine.models.gguf_check import GGUFError, check_gguf
from engine.models.gguf_inspect import GGUFInspectError, ModelInfo, inspect_gguf
from engine.planning.advice.placement import Placement, placement_for
from engine.planning.memory.budget import Budget
from engine.planning.memory.fit import FitVerdict, plan_fit
from engine.planning.memory.memory_plan import MemoryPlan, PlanError

FILE, VOCAB, MEMORY, NO_PLAN = "file", "vocab", "memory", "no-plan"


@dataclass(frozen=True)
class Reason:
    check: str  # FILE, VOCAB, MEMORY or NO_PLAN (no memory plan could be made: nothing to compare)
    message: str


@dataclass
class Preflight:
    """What the checks found. ``compat`` is check_pair's verdict (None without a draft or a readable pair);
    ``fit`` the memory verdict (None when no plan could be made: see the NO_PLAN reason)."""

    target: ModelInfo | None = None
    draft: ModelInfo | None = None
    compat: dict | None = None
    fit: FitVerdict | None = None
    reasons: list[Reason] = field(default_factory=list)

    def messages(self, check: str) -> list[str]:
        return [r.message for r in self.reasons if r.check == check]

    @property
    def refusal(self) -> str | None:
        """Why this pair cannot run at all (a broken file, vocabularies llama.cpp rejects), or None."""
        for reason in self.reasons:
            if reason.check in (FILE, VOCAB):
                return reason.message
        return None

    @property
    def too_big(self) -> str | None:
        """Why this pair will not fit in the memory there is, with what to change; None when it fits
        or nothing could be compared."""
        return next(iter(self.messages(MEMORY)), None)

    @property
    def methods(self) -> dict[str, MethodVerdict]:
        """Which of llama.cpp's speculative types this pair can run, and why not (engine.models.draft_heads)."""
        return method_verdicts(self.target, self.draft)

    @property
    def vocab_reasons(self) -> list[str]:
        """llama.cpp's own reasons for rejecting the draft (empty when compatible or not compared)."""
        return list(self.compat["reasons"]) if self.compat and not self.compat["compatible"] else []


def preflight(
    target: Path,
    draft: Path | None,
    ctx: int,
    budget: Budget | None,
    *,
    ngl: int = -1,
    ngl_draft: int | None = None,
    check_files: bool = True,
    **plan_options: Any,
) -> Preflight:
    """Check the pair ``target`` (+ ``draft``) for a load with this context and these GPU layers.

    budget: the memory to plan against (None: skip the memory check). ngl_draft defaults to ngl.
    plan_options go to plan_fit (draft_n_max, the K the pair loads for) and plan_memory (n_outputs, cache
    types, ...). Never raises for a bad file or a
    plan that cannot be made: those are reasons in the result.
    """
    result = Preflight()
    if check_files:
        try:
            check_gguf(target, "target")
            if draft is not None:
                check_gguf(draft, "draft")
        except GGUFError as exc:
            result.reasons.append(Reason(FILE, str(exc)))
            return result
    try:
        result.target = inspect_gguf(target)
        result.draft = inspect_gguf(draft) if draft is not None else None
    except (GGUFInspectError, OSError) as exc:
        result.reasons.append(Reason(FILE, f"cannot read the model: {exc}"))
        return result
    head = target_refusal(result.target)
    if head:
        result.reasons.append(Reason(FILE, head[0].upper() + head[1:]))
        return result
    if result.draft is not None:
        result.compat = check_pair(result.target, result.draft)
        if not result.compat["compatible"]:
            result.reasons.append(
                Reason(
                    VOCAB,
                    "This draft cannot speculate for this target (llama.cpp's "
                    "vocabulary rule): " + "; ".join(result.compat["reasons"]),
                )
            )
    if budget is not None:
        _check_memory(result, ctx, budget, ngl, ngl_draft, plan_options)
    return result


def preflight_load(load: LoadSettings, budget: Budget | None, **options: Any) -> Preflight:
    """preflight for an engine load's settings: its files, context and GPU layers, the experts it keeps on the
    CPU, the devices it names and the K it loads for (the Lab's check before a load, the session's refusal,
    `spectune plan`). options: preflight's check_files and plan options (cache types, ...)."""
    return preflight(
        load.target,
        load.draft,
        load.ctx,
        budget,
        ngl=load.ngl,
        ngl_draft=load.ngl_draft,
        n_cpu_moe=load.n_cpu_moe,
        n_cpu_moe_draft=load.n_cpu_moe_draft,
        target_devices=load.device.split(",") if load.device else None,
        draft_devices=load.device_draft.split(",") if load.device_draft else None,
        draft_n_max=load.draft_n_max_at_load,
        **options,
    )


def preflight_and_place(
    load: LoadSettings, budget: Budget | None, **options: Any
) -> tuple[Preflight, tuple[Placement, MemoryPlan] | None]:
    """The pre-load check and, for a pair too big for the budget, the first arrangement that fits its GPUs
    and RAM with its plan (engine.planning.advice.placement; None: it fits, no GPU, nowhere fits, or a file the search
    could not read, which the check's reasons already name). What the Lab does before a load and `spectune
    plan` prints. options: as preflight_load's."""
    check = preflight_load(load, budget, **options)
    if not check.too_big or budget is None or not budget.gpus:
        return check, None
    plan_options = {k: v for k, v in options.items() if k != "check_files"}
    try:
        placed = placement_for(
            load.target, load.draft, load.ctx, budget, draft_n_max=load.draft_n_max_at_load, **plan_options
        )
    except (GGUFInspectError, OSError, ValueError):
        placed = None
    return check, placed


def _check_memory(
    result: Preflight, ctx: int, budget: Budget, ngl: int, ngl_draft: int | None, plan_options: dict[str, Any]
) -> None:
    assert result.target is not None
    try:
        result.fit = plan_fit(
            result.target,
            ctx,
            budget,
            draft=result.draft,
            n_gpu_layers=ngl,
            n_gpu_layers_draft=ngl_draft,
            **plan_options,
        )
    except PlanError as exc:
        result.reasons.append(Reason(NO_PLAN, f"no memory plan: {exc}"))
        return
    if result.fit.fits is False:
        result.reasons.append(Reason(MEMORY, result.fit.explanation(ctx or result.fit.plan.n_ctx)))
