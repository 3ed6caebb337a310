"""Where a pair's models go when the GPUs cannot simply hold both: draft placement and expert offload.

llama.cpp's default puts every layer of both models on the GPUs, each model split over all
of them by their free memory. When that does not fit, a pair can still run whole on the
GPUs in another arrangement, in this order of preference (fastest first):

1. both on all GPUs (llama.cpp's default, no flags);
2. the target on all GPUs, the draft on one of them (-devd CUDA0), the largest first: each
   GPU a model uses reserves a compute buffer of its own, so one GPU fewer for the draft
   saves one;
3. with several GPUs, the draft on one GPU and the target on the others (-dev CUDA0
   -devd CUDA1): the draft alone on the small card, the target whole on the big one;
4. the draft on the CPU (-ngld 0): a small draft runs tolerably there, and every GPU byte
   goes to the target;
5. for a mixture-of-experts target, the expert weights of its first N layers in host
   memory (--n-cpu-moe N), with the smallest N that fits; the draft on the GPUs, then on
   the CPU. Experts are most of an MoE model's bytes and each token reads only a few of
   them, so this costs far less speed than moving whole layers.

Each arrangement is a full memory plan (engine.planning.memory.memory_plan), checked device by
device against the free memory less a headroom, and, when the available RAM is known, its
host part (experts and a draft placed there, the token embeddings, host buffers) against that
RAM less a headroom: experts mapped from a file that RAM cannot hold are read from the disk
again on every token. ``place`` returns the first that fits.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from engine.core.settings import LoadSettings
from engine.models.gguf_inspect import ModelInfo, inspect_gguf
from engine.planning.memory.budget import Budget, fits
from engine.planning.memory.memory_plan import (
    GpuBudget,
    Headroom,
    MemoryPlan,
    load_options,
    moe_numbers,
    no_headroom,
    plan_memory,
    short_devices,
)


@dataclass(frozen=True)
class Placement:
    """One arrangement of the pair. target_devices None: every GPU; draft_devices None: the target's."""

    target_devices: tuple[str, ...] | None = None
    draft_devices: tuple[str, ...] | None = None
    draft_on_cpu: bool = False
    n_cpu_moe: int = 0

    @property
    def is_default(self) -> bool:
        return self == Placement()

    @property
    def ngl_draft(self) -> int:
        return 0 if self.draft_on_cpu else -1

    def describe(self) -> str:
        parts = []
        if self.n_cpu_moe:
            parts.append(f"the experts of the target's first {self.n_cpu_moe} layers in RAM")
        if self.draft_on_cpu:
            parts.append("the draft on the CPU")
        elif self.draft_devices:
            parts.append(f"the draft on {', '.join(self.draft_devices)}")
        if self.target_devices:
            parts.insert(0, f"the target on {', '.join(self.target_devices)}")
        return "; ".join(parts) or "both models on the GPUs"

    def apply(self, load: LoadSettings) -> LoadSettings:
        """The load settings that place the pair this way (what the Lab loads and the export writes)."""
        return replace(
            load,
            ngl_draft=0 if self.draft_on_cpu else load.ngl_draft,
            device_draft=",".join(self.draft_devices) if self.draft_devices and not self.draft_on_cpu else "",
            device=",".join(self.target_devices) if self.target_devices else "",
            n_cpu_moe=self.n_cpu_moe,
        )

    def flags(self, with_draft: bool = True) -> list[str]:
        """llama-server's flags for it (engine.deploy.export writes the same from LoadSettings)."""
        out = []
        if self.target_devices:
            out += ["-dev", ",".join(self.target_devices)]
        if self.n_cpu_moe:
            out += ["-ncmoe", str(self.n_cpu_moe)]
        if with_draft and self.draft_on_cpu:
            out += ["-ngld", "0"]
        elif with_draft and self.draft_devices:
            out += ["-devd", ",".join(self.draft_devices)]
        return out

    def to_dict(self) -> dict:
        return {
            "target_devices": list(self.target_devices) if self.target_devices else None,
            "draft_devices": list(self.draft_devices) if self.draft_devices else None,
            "draft_on_cpu": self.draft_on_cpu,
            "n_cpu_moe": self.n_cpu_moe,
            "describe": self.describe(),
        }

    def plan(
        self,
        target: ModelInfo,
        draft: ModelInfo | None,
        ctx: int,
        gpus: list[GpuBudget],
        draft_n_max: int = 0,
        spec_types: Sequence[str] | None = None,
        **opts,
    ) -> MemoryPlan:
        """The plan of the pair placed this way, loaded as specrt loads it for draft_n_max (load_options: a
        hybrid target's snapshots, an MTP target's context), or as a llama-server started with these
        --spec-type values (spec_types), unless opts say otherwise."""
        opts = {**load_options(target, draft, draft_n_max, spec_types), **opts}
        return plan_memory(
            target,
            ctx,
            draft=draft,
            gpus=gpus,
            n_gpu_layers_draft=self.ngl_draft,
            target_devices=self.target_devices,
            draft_devices=None if self.draft_on_cpu else self.draft_devices,
            n_cpu_moe=self.n_cpu_moe,
            **opts,
        )


def fits_gpus(plan: MemoryPlan, gpus: Sequence[GpuBudget], keep: Headroom) -> bool:
    """The GPUs' part of the one rule (engine.planning.memory.budget.fits), the RAM left out."""
    return not short_devices(plan.device_totals(), gpus, None, keep)


def placements(target: ModelInfo, draft: ModelInfo | None, gpus: list[GpuBudget]) -> Iterator[Placement]:
    """The arrangements to try, fastest first (the MoE ones, by expert layers, are searched in ``place``)."""
    yield Placement()
    if draft is None:
        return
    by_size = sorted(gpus, key=lambda g: -g.free_bytes)
    if len(gpus) > 1:
        for g in by_size:
            yield Placement(draft_devices=(g.name,))
        for g in reversed(by_size):  # the draft on the smallest first: the target keeps the big ones
            others = tuple(o.name for o in gpus if o.name != g.name)
            yield Placement(target_devices=others, draft_devices=(g.name,))
    yield Placement(draft_on_cpu=True)


def place(
    target: ModelInfo,
    draft: ModelInfo | None,
    ctx: int,
    gpus: list[GpuBudget],
    headroom: Headroom,
    ram_bytes: int | None = None,
    **opts,
) -> tuple[Placement, MemoryPlan] | None:
    """The first arrangement whose plan fits every GPU (with its headroom) and the available RAM (ram_bytes,
    None: not checked), and that plan; None when none does. opts go to Placement.plan (draft_n_max, the K
    the pair loads for) and plan_memory (cache types, n_outputs, ...)."""
    if not gpus:
        return None
    budget = Budget(tuple(gpus), ram_bytes)
    for p in placements(target, draft, gpus):
        plan = p.plan(target, draft, ctx, gpus, **opts)
        if fits(plan, budget, headroom):
            return p, plan
    if not moe_numbers(target)[0]:
        return None
    n_layer = target.block_count or 0
    for draft_on_cpu in (False, True) if draft is not None else (False,):

        def at(n: int, cpu: bool = draft_on_cpu) -> tuple[Placement, MemoryPlan]:
            p = Placement(draft_on_cpu=cpu, n_cpu_moe=n)
            return p, p.plan(target, draft, ctx, gpus, **opts)

        if not fits_gpus(at(n_layer)[1], gpus, headroom):
            continue  # even with every expert in RAM the rest does not fit
        lo, hi = 1, n_layer  # the smallest N that fits the GPUs: their part shrinks as N grows
        while lo < hi:
            mid = (lo + hi) // 2
            if fits_gpus(at(mid)[1], gpus, headroom):
                hi = mid
            else:
                lo = mid + 1
        placed = at(lo)
        # RAM's part grows with N, so the smallest N is the one RAM can best hold
        if fits(placed[1], budget, headroom):
            return placed
    return None


def placement_for(
    target: Path, draft: Path | None, ctx: int, budget: Budget, **opts
) -> tuple[Placement, MemoryPlan] | None:
    """Where a pair of files fits the budget's GPUs and RAM (place, without headroom): what the Lab offers
    and `spectune plan` prints when the pair does not fit as asked. None without a GPU in the budget or when
    no arrangement fits; a file that cannot be read raises GGUFInspectError (OSError, ValueError)."""
    if not budget.gpus:
        return None
    draft_info = inspect_gguf(draft) if draft is not None else None
    return place(inspect_gguf(target), draft_info, ctx, list(budget.gpus), no_headroom, budget.ram_bytes, **opts)
