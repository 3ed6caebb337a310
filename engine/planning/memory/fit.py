"""Does this pair fit here? The memory plan of both models held against the free memory.

One verdict for every place that asks: the Models page's fit badge and the
Lab before it loads (a pair that cannot fit is explained, not loaded into an
out-of-memory error). With GPUs the plan's bytes per
device are compared with each GPU's free VRAM (NVML); without, the whole plan
with the available RAM. ``held`` is memory the caller frees before loading:
the memory report of the Lab's own loaded pair (the worker's ``loaded`` event),
which NVML and the RAM figure count as used; each GPU gets back what sat on it. ``gpu_backend=False`` (a CPU build
of the engine on a machine with a GPU) plans everything in RAM.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from engine.core.units import format_plan_bytes
from engine.models.gguf_inspect import ModelInfo
from engine.planning.hardware import HardwareReport
from engine.planning.memory.budget import Budget
from engine.planning.memory.memory_plan import (
    CPU,
    GpuBudget,
    MemoryPlan,
    load_options,
    no_headroom,
    plan_memory,
    short_devices,
)


@dataclass
class FitVerdict:
    fits: bool | None  # None: no budget to compare with (RAM unreadable)
    where: str  # "VRAM" or "RAM"
    needed_bytes: int  # on the GPUs (VRAM) or in all (RAM)
    available_bytes: int | None
    plan: MemoryPlan
    short_devices: list[str]  # the GPUs the plan overfills
    # a GPU plan whose GPUs hold their part while its host part (where "RAM") is more than the RAM available
    host_part: bool = False

    def summary(self) -> str:
        need = format_plan_bytes(self.needed_bytes)
        have = f", {format_plan_bytes(self.available_bytes)} free" if self.available_bytes is not None else ""
        verdict = {True: "fits", False: "does not fit", None: "fit unknown"}[self.fits]
        return f"{verdict} in {self.where}: needs {need}{have}"

    def explanation(self, ctx: int) -> str:
        """Why it does not fit and what to change, in a sentence or two."""
        if self.fits is not False:
            return self.summary()
        if self.where == "VRAM":
            over = ", ".join(self.short_devices)
            advice = (
                f"Try a smaller context than {ctx}, fewer GPU layers (the rest runs from RAM, slower), "
                "or a smaller quantization of the target."
            )
            return (
                f"This pair does not fit on {over}: the memory plan counts "
                f"{format_plan_bytes(self.needed_bytes)} for both models, their KV caches and compute buffers, "
                f"with {format_plan_bytes(self.available_bytes or 0)} free. {advice}"
            )
        if self.host_part:
            return (
                f"The GPUs hold their part, but this arrangement keeps {format_plan_bytes(self.needed_bytes)} in RAM "
                f"(what the plan puts on the CPU: weights placed there, the token embeddings, host buffers) and "
                f"{format_plan_bytes(self.available_bytes or 0)} is available: weights mapped there would be read from "
                "the disk again on every token. Free some RAM, keep fewer of the target's experts or the draft "
                f"on the CPU where the GPUs have room, or try a smaller context than {ctx} or a smaller quantization."
            )
        return (
            f"This pair needs {format_plan_bytes(self.needed_bytes)} of memory by the plan and "
            f"{format_plan_bytes(self.available_bytes or 0)} of RAM is available. llama.cpp maps the files, so it "
            f"may still run, slowly, while the system pages; a smaller context than {ctx} or a smaller "
            "quantization would fit."
        )


def plan_fit(
    target: ModelInfo,
    ctx: int,
    budget: Budget,
    *,
    draft: ModelInfo | None = None,
    n_gpu_layers: int = -1,
    n_gpu_layers_draft: int | None = None,
    draft_n_max: int = 0,
    spec_types: Sequence[str] | None = None,
    **plan_options: Any,
) -> FitVerdict:
    """The plan for this pair against the budget (PlanError when it cannot be planned). Without GPUs in
    the budget every layer is planned on the CPU. plan_options go to plan_memory; its n_rs_seq and mtp
    default to how specrt loads the pair for this K (draft_n_max, 0: llama.cpp's 3; load_options), or a
    llama-server started with these --spec-type values (spec_types)."""
    plan_options = {**load_options(target, draft, draft_n_max, spec_types), **plan_options}
    on_gpu = bool(budget.gpus)
    ngl_draft = n_gpu_layers if n_gpu_layers_draft is None else n_gpu_layers_draft
    plan = plan_memory(
        target,
        ctx,
        draft=draft,
        n_gpu_layers=n_gpu_layers if on_gpu else 0,
        n_gpu_layers_draft=ngl_draft if on_gpu else 0,
        gpus=budget.gpus,
        cpu_features=budget.cpu_features,
        **plan_options,
    )
    return verdict_of(plan, budget.gpus, budget.ram_bytes)


def check_fit(
    target: ModelInfo,
    ctx: int,
    *,
    draft: ModelInfo | None = None,
    n_gpu_layers: int = -1,
    report: HardwareReport | None = None,
    held: list[dict] | None = None,
    gpu_backend: bool | None = True,
) -> FitVerdict:
    """plan_fit against a hardware report (see Budget.from_report)."""
    return plan_fit(target, ctx, Budget.from_report(report, held, gpu_backend), draft=draft, n_gpu_layers=n_gpu_layers)


def verdict_of(plan: MemoryPlan, gpus: Sequence[GpuBudget], ram_available: int | None) -> FitVerdict:
    """A plan's verdict: against the GPUs' free VRAM when it has GPUs (and its host part against the available
    RAM, when that is known), else the whole plan against the available RAM."""
    totals = plan.to_dict()["totals"]
    short = short_devices(totals["by_device"], gpus, ram_available, no_headroom)
    if gpus:
        short_gpus = [d for d in short if d != CPU]
        if not short_gpus and CPU in short:
            return FitVerdict(False, "RAM", totals["host_bytes"], ram_available, plan, [], host_part=True)
        vram = totals["vram_bytes"]
        return FitVerdict(not short_gpus, "VRAM", vram, sum(g.free_bytes for g in gpus), plan, short_gpus)
    fits = None if ram_available is None else not short
    return FitVerdict(fits, "RAM", totals["all_bytes"], ram_available, plan, [])
