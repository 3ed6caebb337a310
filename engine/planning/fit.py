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

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from engine.core.units import format_plan_bytes
from engine.models.gguf_inspect import ModelInfo
from engine.planning.hardware import HardwareReport
from engine.planning.memory_plan import GpuBudget, MemoryPlan, load_options, plan_memory


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


_GPU_BUFFER = re.compile(r"^(?!CPU)[A-Za-z]+\d+$")  # CUDA0, Vulkan1, ROCm0; not CPU, CUDA_Host or AMX


def held_by_device(memory_items: list[dict] | None) -> tuple[dict[str, int], int]:
    """({GPU buffer name: bytes}, bytes in RAM) from a worker's memory report. Mapped model files are
    page cache, which the available-RAM figure already counts as free, so they are not added back."""
    vram: dict[str, int] = {}
    ram = 0
    for item in memory_items or ():
        n = item.get("model_bytes", 0) + item.get("context_bytes", 0) + item.get("compute_bytes", 0)
        buffer_type = str(item.get("buffer_type", ""))
        if _GPU_BUFFER.match(buffer_type):
            vram[buffer_type] = vram.get(buffer_type, 0) + n
        elif buffer_type != "CPU_Mapped":
            ram += n
    return vram, ram


def held_bytes(memory_items: list[dict] | None) -> tuple[int, int]:
    """(on GPUs, in RAM) from a worker's memory report, as held_by_device sorts it."""
    vram, ram = held_by_device(memory_items)
    return sum(vram.values()), ram


@dataclass
class MemoryBudget:
    """The memory a pair is planned against: free VRAM per GPU (empty: plan in RAM), the available RAM,
    and the CPU features that decide llama.cpp's repacked buffer types."""

    gpus: list[GpuBudget]
    ram_available: int | None
    cpu_features: tuple[str, ...] = ()

    @classmethod
    def from_report(
        cls, report: HardwareReport | None, held: list[dict] | None = None, gpu_backend: bool | None = True
    ) -> MemoryBudget:
        """From a hardware report, with ``held`` (a worker's memory report of a pair that is freed before
        the load) given back to the device it sits on. gpu_backend=False: a CPU build plans in RAM."""
        held_vram, held_ram = held_by_device(held)
        gpus = (
            [
                GpuBudget(g.llama_name, g.memory_free_bytes + held_vram.pop(g.llama_name, 0))
                for g in (report.gpus if report else [])
                if g.memory_free_bytes is not None
            ]
            if gpu_backend is not False
            else []
        )
        if gpus and held_vram:
            # buffers on a device NVML does not name alike (another backend's numbering): the first GPU
            gpus[0] = GpuBudget(gpus[0].name, gpus[0].free_bytes + sum(held_vram.values()))
        free = report.cpu.ram_available_bytes if report else None
        return cls(gpus, None if free is None else free + held_ram, tuple(report.cpu.features) if report else ())


def plan_fit(
    target: ModelInfo,
    ctx: int,
    budget: MemoryBudget,
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
    return verdict_of(plan, budget.gpus, budget.ram_available)


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
    """plan_fit against a hardware report (see MemoryBudget.from_report)."""
    return plan_fit(
        target, ctx, MemoryBudget.from_report(report, held, gpu_backend), draft=draft, n_gpu_layers=n_gpu_layers
    )


def verdict_of(plan: MemoryPlan, gpus: list[GpuBudget], ram_available: int | None) -> FitVerdict:
    """A plan's verdict: against the GPUs' free VRAM when it has GPUs (and its host part against the available
    RAM, when that is known), else the whole plan against the available RAM."""
    totals = plan.to_dict()["totals"]
    if gpus:
        by_device = totals["by_device"]
        short = [g.name for g in gpus if by_device.get(g.name, 0) > g.free_bytes]
        host = totals["host_bytes"]
        if not short and ram_available is not None and host > ram_available:
            return FitVerdict(False, "RAM", host, ram_available, plan, [], host_part=True)
        return FitVerdict(plan.fits, "VRAM", totals["vram_bytes"], sum(g.free_bytes for g in gpus), plan, short)
    fits = None if ram_available is None else totals["all_bytes"] <= ram_available
    return FitVerdict(fits, "RAM", totals["all_bytes"], ram_available, plan, [])
