"""The ``spectune`` subcommands about the catalog: what to run, and the one-click presets.

  spectune recommend [--vram 12GiB [--ram 32GiB] | auto | --gpu NAME [--gpu-count N]] [--family F] [--ctx N]
                     [--bandwidth GB/s]
                     [--limit N] [--speed-floor TOK/S] [--workload SET] [--no-probe] [--json]
  spectune presets [--vram SIZE [--ram SIZE] | auto] [--ctx N] [--json]

recommend ranks by the speed the pairs are predicted to reach on this machine's device: the first GPU
NVML sizes, else the CPU as measured by a short probe (run once, cached; --no-probe uses the last
probe or an assumption from the core count). With --vram SIZE the device is a GPU of that size; give
--bandwidth too for predicted speeds, else the ranking uses the bandwidth-bound speedup alone.
With --gpu NAME the machine is one with that card (SpecTune's GPU table, engine.planning.speed.gpu_table):
its whole memory free, its bandwidth and compute, as if NVML had reported it.

engine/cli/main.py adds them with ``register(sub)``. Errors print one line,
``spectune: error: ...``, on stderr and return exit code 2.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from types import ModuleType

from engine.cli.args import add_gpu_args
from engine.cli.errors import guarded
from engine.core.units import format_plan_bytes
from engine.measure.device_probe import measured_device
from engine.models.catalog import CatalogError, load_catalog
from engine.planning.advice.catalog_models import where_text
from engine.planning.advice.choice import Recommendation, pull_commands
from engine.planning.advice.presets import format_presets, preset_fits
from engine.planning.advice.recommend import RecommendError, recommend
from engine.planning.constants import ACCEPTANCE_PRIOR, DEFAULT_CTX, DEFAULT_SPEED_FLOOR
from engine.planning.hardware import CpuInfo, HardwareReport, cpu_info, probe
from engine.planning.memory.budget import Budget, BudgetError, budget_from_hardware, budget_from_size
from engine.planning.memory.memory_plan import PlanError, parse_size
from engine.planning.speed.device_speed import DeviceSpeed, bandwidth_device, gpu_device, local_device
from engine.planning.speed.gpu_table import GpuTableError, described_report, find_gpu
from engine.planning.speed.speed_model import ACCEPTANCE_PRIORS
from engine.runtime.client import EngineError

_guarded = guarded(CatalogError, BudgetError, RecommendError, PlanError, EngineError, GpuTableError)


def _auto(a: argparse.Namespace) -> bool:
    return a.vram is None or a.vram.lower() == "auto"


def described_machine(a: argparse.Namespace) -> HardwareReport | None:
    """--gpu NAME [--gpu-count N] [--ram SIZE]: the report NVML would give on a machine with that card (None
    without --gpu). Its RAM is --ram, else this machine's."""
    gpu, count = getattr(a, "gpu", None), getattr(a, "gpu_count", 1)
    if gpu is None:
        if count != 1:
            raise RecommendError("--gpu-count goes with --gpu")
        return None
    if not _auto(a):
        raise RecommendError("--gpu and --vram both describe the GPU; give one")
    cpu = cpu_info()
    if a.ram is not None:
        size = parse_size(a.ram)
        cpu = CpuInfo(cpu.logical_cores, size, size, cpu.features, "--ram")
    return described_report(find_gpu(gpu), count, cpu)


def _budget(a: argparse.Namespace, report: HardwareReport | None = None) -> Budget:
    """report: NVML already read (--vram auto)."""
    if a.bandwidth is not None and a.bandwidth <= 0:
        raise RecommendError(f"--bandwidth must be positive (GB/s), got {a.bandwidth}")
    if getattr(a, "gpu", None) is not None and report is not None:
        return budget_from_hardware(None, a.bandwidth, report=report)
    if _auto(a):
        if a.ram is not None:
            raise RecommendError("--ram goes with --vram SIZE or --gpu; --vram auto reads this machine's RAM")
        return budget_from_hardware(a.nvml, a.bandwidth, report=report)
    return budget_from_size(a.vram, a.bandwidth, a.ram)


def _check_ctx(ctx: int) -> None:
    if ctx < 1:
        raise RecommendError(f"--ctx must be 1 or more, got {ctx}")


def _device(a: argparse.Namespace, budget: Budget, report: HardwareReport | None) -> DeviceSpeed | None:
    """Where the pairs would run, for the speed model; None when only a size was given (report None:
    --vram SIZE) without --bandwidth."""
    if report is None:
        return bandwidth_device(budget.bandwidth_bytes_per_s) if budget.bandwidth_bytes_per_s else None
    if budget.kind == "gpu":
        gpu = gpu_device(report)
        if gpu is not None and a.bandwidth:
            gpu = dataclasses.replace(gpu, bandwidth_bytes_per_s=a.bandwidth * 1e9, source="--bandwidth; " + gpu.source)
        return gpu
    if a.no_probe:
        return local_device(report, cpu_only=True)
    return measured_device(
        report, cpu_only=True, progress=lambda m: print(f"spectune: measuring this CPU: {m}", file=sys.stderr)
    )


def cmd_recommend(a: argparse.Namespace) -> int:
    _check_ctx(a.ctx)
    if a.limit < 1:
        raise RecommendError(f"--limit must be 1 or more, got {a.limit}")
    if a.speed_floor < 0:
        raise RecommendError(f"--speed-floor must be 0 or more (tokens/s), got {a.speed_floor}")
    report = described_machine(a) or (probe(a.nvml) if _auto(a) else None)
    budget = _budget(a, report)
    result = recommend(
        load_catalog(a.catalog),
        budget,
        ctx=a.ctx,
        family=a.family,
        limit=a.limit,
        device=_device(a, budget, report),
        speed_floor=a.speed_floor,
        workload=a.workload,
    )
    print(json.dumps(result.to_dict()) if a.json else format_recommendation(result))
    return 0


def cmd_presets(a: argparse.Namespace) -> int:
    _check_ctx(a.ctx)
    catalog = load_catalog(a.catalog)
    budget = _budget(a, described_machine(a))
    fits = preset_fits(catalog, budget, a.ctx)
    if a.json:
        print(json.dumps({"budget": budget.to_dict(), "ctx": a.ctx, "presets": [f.to_dict() for f in fits]}))
    else:
        print(format_presets(fits, budget))
    return 0


def _common(p: argparse.ArgumentParser, nvml: ModuleType | None) -> None:
    p.add_argument(
        "--vram",
        default="auto",
        help="free GPU memory to plan for (e.g. 12GiB), or auto: the GPUs NVML reports, else the "
        "available RAM for a CPU-only run (default auto)",
    )
    p.add_argument(
        "--ram",
        help="with --vram SIZE: the RAM available (e.g. 32GiB) for what a placement keeps on the CPU (an MoE "
        "target's experts, the draft); unchecked without it. --vram auto reads this machine's",
    )
    add_gpu_args(p, "plan and predict")
    p.add_argument("--ctx", type=int, default=DEFAULT_CTX, help=f"context size to plan for (default {DEFAULT_CTX})")
    p.add_argument(
        "--bandwidth",
        type=float,
        help="memory bandwidth in GB/s for the tokens/s estimate (default: the GPU's peak from NVML)",
    )
    p.add_argument("--catalog", help="a catalog folder instead of the shipped resources/catalog")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(nvml=nvml)


def register(subparsers: argparse._SubParsersAction, *, nvml: ModuleType | None = None) -> None:
    """Add recommend and presets. nvml: an NVML module to use instead of pynvml (tests)."""
    r = subparsers.add_parser("recommend", help="ranked target/draft/quant choices that fit your GPU (or RAM)")
    _common(r, nvml)
    r.add_argument("--family", help="only targets of this catalog family (e.g. qwen2.5-coder, llama-3)")
    r.add_argument("--limit", type=int, default=10, help="how many to list (default 10)")
    r.add_argument(
        "--speed-floor",
        type=float,
        default=DEFAULT_SPEED_FLOOR,
        help=f"tokens/s a pair must reach here to be recommended (default {DEFAULT_SPEED_FLOOR:g}, interactive)",
    )
    r.add_argument(
        "--workload",
        choices=sorted(ACCEPTANCE_PRIORS),
        help="the kind of text: the pairs are predicted at its prior acceptance"
        f" (default: a flat {ACCEPTANCE_PRIOR:.2f})",
    )
    r.add_argument(
        "--no-probe",
        action="store_true",
        help="never measure the CPU: use its last probe, or an assumption from its core count",
    )
    r.set_defaults(func=_guarded(cmd_recommend))

    p = subparsers.add_parser("presets", help="the one-click target/draft pairs, their sizes and whether they fit")
    _common(p, nvml)
    p.set_defaults(func=_guarded(cmd_presets))


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
