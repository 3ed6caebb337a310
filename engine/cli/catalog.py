"""The ``spectune`` subcommands about the catalog: what to run, and the one-click presets.

  spectune recommend [--vram 12GiB | auto] [--family F] [--ctx N] [--bandwidth GB/s] [--limit N] [--json]
  spectune presets [--vram SIZE | auto] [--ctx N] [--json]

engine/cli/main.py adds them with ``register(sub)``. Errors print one line,
``spectune: error: ...``, on stderr and return exit code 2.
"""

from __future__ import annotations

import argparse
import json
from types import ModuleType

from engine.cli.errors import guarded
from engine.models.catalog import CatalogError, load_catalog
from engine.planning.memory_plan import PlanError
from engine.planning.recommend import (
    DEFAULT_CTX,
    RecommendError,
    budget_from_hardware,
    budget_from_size,
    format_presets,
    format_recommendation,
    preset_fits,
    recommend,
)

_guarded = guarded(CatalogError, RecommendError, PlanError)


def _budget(a: argparse.Namespace):
    if a.bandwidth is not None and a.bandwidth <= 0:
        raise RecommendError(f"--bandwidth must be positive (GB/s), got {a.bandwidth}")
    if a.vram is None or a.vram.lower() == "auto":
        return budget_from_hardware(a.nvml, a.bandwidth)
    return budget_from_size(a.vram, a.bandwidth)


def _check_ctx(ctx: int) -> None:
    if ctx < 1:
        raise RecommendError(f"--ctx must be 1 or more, got {ctx}")


def cmd_recommend(a: argparse.Namespace) -> int:
    _check_ctx(a.ctx)
    if a.limit < 1:
        raise RecommendError(f"--limit must be 1 or more, got {a.limit}")
    result = recommend(load_catalog(a.catalog), _budget(a), ctx=a.ctx, family=a.family, limit=a.limit)
    print(json.dumps(result.to_dict()) if a.json else format_recommendation(result))
    return 0


def cmd_presets(a: argparse.Namespace) -> int:
    _check_ctx(a.ctx)
    catalog = load_catalog(a.catalog)
    budget = _budget(a)
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
    r.set_defaults(func=_guarded(cmd_recommend))

    p = subparsers.add_parser("presets", help="the one-click target/draft pairs, their sizes and whether they fit")
    _common(p, nvml)
    p.set_defaults(func=_guarded(cmd_presets))
