"""The catalog's model-pair presets held against a memory budget: each one's download size, whether it fits
with headroom (engine.planning.memory.budget) and, where llama.cpp's default placement does not fit, the placement
that does (the draft elsewhere, an MoE target's experts partly in RAM). `spectune presets` prints them, the
Models page shows them."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from engine.core.units import format_plan_bytes
from engine.models.catalog import Catalog, ModelFile
from engine.planning.advice.catalog_models import CatalogModels, plan_pair, where_text
from engine.planning.advice.placement import Placement, place
from engine.planning.constants import DEFAULT_CTX
from engine.planning.memory.budget import Budget, headroom, needed_and_fits
from engine.planning.memory.memory_plan import CPU


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
        """Every field in its order (a new field comes along by itself), the files and the placement as JSON,
        and the placement's llama-server flags last."""
        d = dict(vars(self))
        d.update(
            target=vars(self.target).copy(),
            draft=vars(self.draft).copy(),
            placement=self.placement.to_dict() if self.placement else None,
            placement_flags=self.placement.flags() if self.placement else [],
        )
        return d


def preset_fits(catalog: Catalog, budget: Budget | None, ctx: int = DEFAULT_CTX) -> list[PresetFit]:
    models = CatalogModels(catalog)
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
            plan = plan_pair(models, budget, run_ctx, target, p.target.quant, draft, p.draft.quant)
            needed, fits = needed_and_fits(plan, budget)
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
                    needed, fits = needed_and_fits(plan, budget)
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


def format_presets(fits: Iterable[PresetFit], budget: Budget | None) -> str:
    lines = [f"budget: {budget.describe()}" if budget else "budget: none (sizes only)"]
    for f in fits:
        mark = {True: "fits", False: "too big", None: "-"}[f.fits]
        size = ("~" if f.sizes_estimated else "") + format_plan_bytes(f.download_bytes)
        lines.append(f"{f.name:<36} {size:>11} download  {mark:<8} {f.description}")
        lines.append(f"{'':<36} {f.target.quant} {where_text(f.target)}")
        lines.append(f"{'':<36} {f.draft.quant} {where_text(f.draft)}")
        if f.fits is not None:
            lines.append(f"{'':<36} {f.why}")
    return "\n".join(lines)
