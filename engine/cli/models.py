"""The ``spectune`` subcommands about hardware and model files.

  spectune gpus [--json]                      NVIDIA GPUs (NVML), CPU and RAM, llama.cpp's backends
  spectune inspect FILE [--json]              what a GGUF holds (header only)
  spectune compat TARGET DRAFT [--json]       llama.cpp's draft/target vocab rule
  spectune plan --target T [--draft D] --ctx N [--ngl N] [--ngl-draft N]
                [--cache-type-k T] [--cache-type-v T] [--vram SIZE | --gpu NAME [--gpu-count N]]
                [--ram SIZE] [--server [--parallel N] [--spec-type TYPES]] [--json]

engine/cli/main.py adds them with ``register(sub)``. Errors print one line,
``spectune: error: ...``, on stderr and return exit code 2; ``compat`` returns 1
for an incompatible pair so scripts can test it.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from types import ModuleType

from engine.cli.args import add_gpu_args, add_placement_args
from engine.cli.errors import guarded
from engine.core.settings import LoadSettings, parse_spec_types
from engine.llama.backends import load_backends
from engine.models.compat import check_pair
from engine.models.gguf_inspect import GGUFInspectError, inspect_gguf
from engine.models.gguf_inspect import format_report as format_model
from engine.planning.advice.preflight import VOCAB, preflight_and_place
from engine.planning.hardware import cpu_features, probe, ram
from engine.planning.hardware import format_report as format_hardware
from engine.planning.memory.budget import Budget
from engine.planning.memory.memory_plan import KV_CACHE_TYPES, GpuBudget, PlanError, format_plan, parse_size
from engine.planning.speed.gpu_table import GpuTableError, described_report, find_gpu

EXIT_INCOMPATIBLE = 1


_guarded = guarded(GGUFInspectError, PlanError, GpuTableError)


def cmd_gpus(a: argparse.Namespace) -> int:
    report = probe(a.nvml)
    # llama.cpp's side: the backend modules loaded here as the engine loads them, and why any was not
    backends = load_backends()
    if a.json:
        print(json.dumps(report.to_dict() | {"backends": backends.to_dict()}))
    else:
        print(format_hardware(report))
        print(f"llama.cpp backends ({backends.directory or 'no install'}):")
        print("\n".join(f"  {line}" for line in backends.lines()))
    return 0


def cmd_inspect(a: argparse.Namespace) -> int:
    info = inspect_gguf(a.file)
    print(json.dumps(info.to_dict()) if a.json else format_model(info))
    return 0


def cmd_compat(a: argparse.Namespace) -> int:
    verdict = check_pair(a.target, a.draft)
    if a.json:
        print(json.dumps({"compatible": verdict["compatible"], "reasons": verdict["reasons"]}))
    elif verdict["compatible"]:
        print(f"compatible: {Path(a.draft).name} can draft for {Path(a.target).name}")
    else:
        print(f"not compatible: llama.cpp will refuse {Path(a.draft).name} as a draft for {Path(a.target).name}")
        for reason in verdict["reasons"]:
            print(f"  - {reason}")
    return 0 if verdict["compatible"] else EXIT_INCOMPATIBLE


def _budgets(a: argparse.Namespace) -> list[GpuBudget]:
    if a.gpu is not None and a.vram is not None:
        raise PlanError("--gpu and --vram both describe the GPU; give one")
    if a.gpu_count != 1 and a.gpu is None:
        raise PlanError("--gpu-count goes with --gpu")
    if a.vram is not None:
        return [GpuBudget("CUDA0", parse_size(a.vram))]
    report = described_report(find_gpu(a.gpu), a.gpu_count) if a.gpu is not None else probe(a.nvml)
    return [GpuBudget(g.llama_name, g.memory_free_bytes) for g in report.gpus if g.memory_free_bytes is not None]


def _ram(a: argparse.Namespace) -> int | None:
    """The RAM a plan's host part must fit: --ram, else this machine's available RAM, unless --vram describes
    another machine's GPU (--vram, --gpu: then not checked)."""
    if a.ram is not None:
        return parse_size(a.ram)
    return None if a.vram is not None or a.gpu is not None else ram()[1]


def _server_types(a: argparse.Namespace) -> list[str]:
    """The --spec-type list the planned llama-server starts with: as given, else draft-simple with a draft
    model and none without one."""
    if a.spec_type is not None:
        return parse_spec_types(a.spec_type)
    return ["draft-simple"] if a.draft is not None else []


def _server_options(a: argparse.Namespace) -> dict[str, object]:
    """What `plan --server` changes: llama-server sizes the target's output rows n_parallel x (1 + K) when it
    speculates and n_parallel when it does not (server_output_limits), where specrt always reserves 65 a
    context. At V 262144 one row is 1 MiB of logits and decides the compute buffer too, so a plan for the
    wrong engine was 149 % high for Gemma 3 270M under a plain llama-server."""
    if not a.server:
        return {}
    types = _server_types(a)
    k = a.draft_n_max or 3  # llama-server's --spec-draft-n-max default
    return {
        "n_outputs": a.parallel * (1 + k) if types else a.parallel,
        "n_outputs_draft": a.parallel,
        "spec_types": types,
    }


def _planned_for(a: argparse.Namespace) -> str:
    """The plan's first line: which engine's reservations it counts."""
    if not a.server:
        return (
            "planned for SpecTune's engine (65 output rows a context: drafts up to 64 tokens); "
            "--server plans llama-server"
        )
    types = _server_types(a)
    options = _server_options(a)
    spec = f"--spec-type {','.join(types)} --spec-draft-n-max {a.draft_n_max or 3}" if types else "no speculation"
    return f"planned for llama-server -c {a.ctx} -np {a.parallel}, {spec} ({options['n_outputs']} output rows)"


def cmd_plan(a: argparse.Namespace) -> int:
    if a.ctx < 0:
        raise PlanError(f"--ctx must be 0 (the trained context) or more, got {a.ctx}")
    if not a.server and (a.parallel != 1 or a.spec_type is not None):
        raise PlanError("--parallel and --spec-type describe a llama-server: add --server")
    if a.parallel < 1:
        raise PlanError(f"--parallel must be 1 or more, got {a.parallel}")
    gpus = _budgets(a)
    # the verdict the GUI shows before loading: VRAM per GPU (and the RAM for their host part), or RAM where no
    # GPU is planned
    ram_bytes = _ram(a)
    budget = Budget(tuple(gpus), ram_bytes, tuple(cpu_features()))
    load = LoadSettings(
        a.target,
        a.draft,
        ctx=a.ctx,
        ngl=a.ngl,
        ngl_draft=a.ngl_draft,
        n_cpu_moe=a.n_cpu_moe,
        n_cpu_moe_draft=a.n_cpu_moe_draft,
        device_draft=a.device_draft,
        draft_n_max_at_load=a.draft_n_max,
    )
    check, placed = preflight_and_place(
        load,
        budget,
        check_files=False,
        cache_type_k=a.cache_type_k,
        cache_type_v=a.cache_type_v,
        **_server_options(a),
    )
    fit = check.fit
    if fit is None:  # an unreadable file or a plan that cannot be made: the reason is the error
        raise PlanError(check.reasons[0].message)
    if a.json:
        print(
            json.dumps(
                {
                    **fit.plan.to_dict(),
                    "fit": {
                        "fits": fit.fits,
                        "where": fit.where,
                        "needed_bytes": fit.needed_bytes,
                        "available_bytes": fit.available_bytes,
                    },
                    # where the pair fits instead, and its plan (None: nowhere, or it fits as asked)
                    "placement": None
                    if placed is None
                    else {**placed[0].to_dict(), "flags": placed[0].flags(), "plan": placed[1].to_dict()},
                }
            )
        )
    else:
        print(_planned_for(a))
        print(format_plan(fit.plan))
        print(fit.explanation(fit.plan.n_ctx))
        if placed is not None:
            print(f"\nit fits placed otherwise: {placed[0].describe()}  ({' '.join(placed[0].flags())})")
            print(format_plan(placed[1]))
        for message in check.messages(VOCAB):
            print(f"spectune: warning: {message}", file=sys.stderr)
    return 0


def register(subparsers: argparse._SubParsersAction, *, nvml: ModuleType | None = None) -> None:
    """Add gpus, inspect, compat and plan. nvml: an NVML module to use instead of pynvml (tests)."""
    g = subparsers.add_parser(
        "gpus", help="list NVIDIA GPUs (NVML), CPU cores and RAM, and which llama.cpp backends load here"
    )
    g.add_argument("--json", action="store_true", help="print one JSON object")
    g.set_defaults(func=_guarded(cmd_gpus), nvml=nvml)

    i = subparsers.add_parser("inspect", help="what a GGUF file holds (reads the header only)")
    i.add_argument("file", type=Path, help="a GGUF model file")
    i.add_argument("--json", action="store_true", help="print one JSON object")
    i.set_defaults(func=_guarded(cmd_inspect))

    c = subparsers.add_parser("compat", help="can DRAFT speculate for TARGET (llama.cpp's vocab rule)")
    c.add_argument("target", type=Path)
    c.add_argument("draft", type=Path)
    c.add_argument("--json", action="store_true", help='print {"compatible": ..., "reasons": [...]}')
    c.set_defaults(func=_guarded(cmd_compat))

    p = subparsers.add_parser("plan", help="memory plan: weights, KV caches and compute buffers per device")
    p.add_argument("--target", type=Path, required=True, help="target model (GGUF)")
    p.add_argument("--draft", type=Path, help="draft model (GGUF)")
    p.add_argument("--ctx", type=int, required=True, help="context size (0: the target's trained context)")
    p.add_argument("--ngl", type=int, default=-1, help="target layers on the GPU (-1: all)")
    p.add_argument("--ngl-draft", type=int, default=-1, help="draft layers on the GPU (-1: all)")
    p.add_argument("--cache-type-k", default="f16", choices=KV_CACHE_TYPES, help="K cache type (default f16)")
    p.add_argument("--cache-type-v", default="f16", choices=KV_CACHE_TYPES, help="V cache type (default f16)")
    add_placement_args(p)
    p.add_argument("--n-cpu-moe-draft", type=int, default=0, metavar="N", help="the same for the draft")
    p.add_argument(
        "--draft-n-max",
        type=int,
        default=0,
        metavar="K",
        help="the K the pair is loaded for (0: llama.cpp's 3): with draft-mtp on a hybrid model (Qwen3.5) "
        "llama.cpp keeps K recurrent-state snapshots",
    )
    p.add_argument(
        "--vram", help="plan for one GPU with this much free memory (e.g. 24GiB) instead of the GPUs NVML reports"
    )
    add_gpu_args(p, "plan")
    p.add_argument(
        "--ram",
        help="the RAM available (e.g. 32GiB) for what stays on the CPU (default: this machine's; with --vram "
        "SIZE, not checked)",
    )
    p.add_argument(
        "--server",
        action="store_true",
        help="plan what llama-server reserves for these models (its output rows, not SpecTune's engine's 65)",
    )
    p.add_argument("--parallel", type=int, default=1, metavar="N", help="with --server: its -np (default 1)")
    p.add_argument(
        "--spec-type",
        metavar="TYPES",
        help="with --server: its --spec-type (default draft-simple with --draft, none without)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=_guarded(cmd_plan), nvml=nvml)
