"""The memory a pair is planned against, in one type: Budget, the GPUs' free VRAM and the available RAM.

From the hardware (NVML, else the RAM: budget_from_hardware, Budget.from_report with the Lab's own loaded
pair given back) or from sizes the user gives (budget_from_size). The recommender keeps headroom on every
device, max(512 MiB, 5 %), for the driver, other programs and the plan's own error; the fit check before a
load compares with the free bytes themselves (engine.planning.memory.fit). Both ask fits(), the one rule.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from types import ModuleType
from typing import Any

from engine.core.units import format_plan_bytes
from engine.planning.hardware import HardwareReport
from engine.planning.memory.memory_plan import (
    GpuBudget,
    Headroom,
    MemoryPlan,
    PlanError,
    parse_size,
    short_devices,
)

HEADROOM_MIN = 512 * 2**20
HEADROOM_SHARE = 0.05


class BudgetError(ValueError):
    """The budget cannot be read or leaves nothing to plan with; the message says why."""


_GPU_BUFFER = re.compile(r"^(?!CPU)[A-Za-z]+\d+$")  # CUDA0, Vulkan1, ROCm0; not CPU, CUDA_Host or AMX


def held_by_device(memory_items: Sequence[Mapping[str, Any]] | None) -> tuple[dict[str, int], int]:
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


def held_bytes(memory_items: Sequence[Mapping[str, Any]] | None) -> tuple[int, int]:
    """(on GPUs, in RAM) from a worker's memory report, as held_by_device sorts it."""
    vram, ram = held_by_device(memory_items)
    return sum(vram.values()), ram


def headroom(free_bytes: int) -> int:
    """What a device keeps back of its free bytes in a recommendation: for the driver, other programs and the
    plan's own error."""
    return max(HEADROOM_MIN, int(free_bytes * HEADROOM_SHARE))


@dataclass(frozen=True)
class Budget:
    """The memory a plan is held against: the GPUs' free VRAM (none: the CPU alone, the plan in RAM) and the
    available RAM. The recommender keeps headroom on each (usable_bytes, fits_with_headroom); the fit check
    before a load compares with the free bytes themselves (engine.planning.memory.fit)."""

    gpus: tuple[GpuBudget, ...] = ()  # llama.cpp names and free bytes
    # available RAM: the budget itself (no GPUs), or what must hold a GPU plan's host part, the experts or the
    # draft placed on the CPU among it (None: unknown, not checked)
    ram_bytes: int | None = None
    # the CPU features that decide llama.cpp's repacked buffer types (engine.planning.hardware.cpu_features)
    cpu_features: tuple[str, ...] = ()
    bandwidth_bytes_per_s: float | None = None
    source: str = ""

    @property
    def kind(self) -> str:
        """ "gpu" or "cpu": where the plan's layers go."""
        return "gpu" if self.gpus else "cpu"

    @classmethod
    def from_report(
        cls, report: HardwareReport | None, held: list[dict] | None = None, gpu_backend: bool | None = True
    ) -> Budget:
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
        return cls(tuple(gpus), None if free is None else free + held_ram, tuple(report.cpu.features) if report else ())

    @property
    def free_bytes(self) -> int:
        return sum(g.free_bytes for g in self.gpus) if self.kind == "gpu" else (self.ram_bytes or 0)

    def share(self, n: int) -> Budget:
        """What each of ``n`` programs loaded side by side may use: every device's free memory and the RAM
        split evenly (two llama-servers each hold their own GPU copy, KV cache and compute buffers)."""
        return replace(
            self,
            gpus=tuple(GpuBudget(g.name, g.free_bytes // n) for g in self.gpus),
            ram_bytes=None if self.ram_bytes is None else self.ram_bytes // n,
            source=f"{self.source}, one {n}th each" if self.source else f"one {n}th each",
        )

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
        raise BudgetError(str(exc)) from None
    if size <= HEADROOM_MIN:
        raise BudgetError(f"--vram {text} leaves nothing after the {format_plan_bytes(HEADROOM_MIN)} headroom")
    if ram_bytes is not None and ram_bytes <= HEADROOM_MIN:
        raise BudgetError(f"--ram {ram} leaves nothing after the {format_plan_bytes(HEADROOM_MIN)} headroom")
    source = f"--vram {text}" + (f", --ram {ram}" if ram is not None else "")
    bandwidth = bandwidth_gb_s * 1e9 if bandwidth_gb_s else None
    return Budget((GpuBudget("CUDA0", size),), ram_bytes, bandwidth_bytes_per_s=bandwidth, source=source)


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
            tuple(GpuBudget(g.llama_name, g.memory_free_bytes or 0) for g in gpus),
            report.cpu.ram_available_bytes,
            bandwidth_bytes_per_s=bandwidth,
            # a machine described from SpecTune's GPU table (no driver read) says so in its message
            source=(f"NVML: {names}" if report.driver_version else report.message)
            + (f"; RAM from {report.cpu.source}" if report.cpu.ram_available_bytes else ""),
        )
    if not report.cpu.ram_available_bytes:
        raise BudgetError(f"{report.message}, and the available RAM cannot be read either; give --vram SIZE")
    return Budget(
        (),
        report.cpu.ram_available_bytes,
        bandwidth_bytes_per_s=bandwidth_gb_s * 1e9 if bandwidth_gb_s else None,
        source=f"{report.message}; RAM from {report.cpu.source}",
    )


def fits(plan: MemoryPlan | Mapping[str, int], budget: Budget, keep: Headroom = headroom) -> bool:
    """Whether a plan (or its bytes by device) fits the budget: every GPU, and the RAM when known, keeps
    ``keep`` of its free bytes (the recommender's headroom; no_headroom before a load). A budget with neither
    GPUs nor a known RAM holds nothing."""
    totals = plan.device_totals() if isinstance(plan, MemoryPlan) else plan
    if not budget.gpus and budget.ram_bytes is None:
        return False
    return not short_devices(totals, budget.gpus, budget.ram_bytes, keep)


def needed_and_fits(plan: MemoryPlan | Mapping[str, int], budget: Budget) -> tuple[int, bool]:
    """Bytes on the budget's devices (the whole plan for a CPU budget) and whether it fits with headroom."""
    totals = plan.device_totals() if isinstance(plan, MemoryPlan) else plan
    needed = sum(totals.values()) if budget.kind == "cpu" else sum(totals.get(g.name, 0) for g in budget.gpus)
    return needed, fits(totals, budget)
