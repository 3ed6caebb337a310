"""``spectune predict``: how fast a pair will run here, and whether speculation pays, before it runs.

  spectune predict --target T [--draft D] [--gpu NAME [--gpu-count N]] [--n-past N] [--acceptance A]
                   [--workload SET] [--prior] [--cpu] [--json]

The speed model (engine.planning.speed.speed_model) on this machine's device: the first GPU NVML sizes, or
the CPU measured by a short probe (cached); with --gpu, a card from SpecTune's GPU table that this machine
need not have. T and D are GGUF files or models not downloaded (engine.planning.advice.named_models: a catalog
preset, a catalog file, ARCH:SIZE:QUANT such as llama:8B:Q4_0). A tune of the same pair in the history
replaces the priors (basis "measured") unless --prior or --gpu; --acceptance replaces the acceptance either
way. Without --draft, a preset's draft is used, and a target with an MTP block is predicted drafting for
itself (draft-mtp).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from types import ModuleType

from engine.cli.args import add_gpu_args
from engine.cli.errors import guarded
from engine.measure.calibration import measured_pair
from engine.measure.device_probe import measured_device
from engine.models.catalog import CatalogError, load_catalog
from engine.models.gguf_inspect import GGUFInspectError
from engine.planning.advice.named_models import resolve
from engine.planning.constants import ACCEPTANCE_PRIOR, PREDICT_N_PAST
from engine.planning.hardware import probe
from engine.planning.speed.device_speed import gpu_device
from engine.planning.speed.gpu_table import GpuTableError, described_report, find_gpu
from engine.planning.speed.model_cost import model_cost, mtp_cost
from engine.planning.speed.speed_model import ACCEPTANCE_PRIORS, Prediction, acceptance_prior_text, predict
from engine.runtime.client import EngineError

_guarded = guarded(GGUFInspectError, EngineError, ValueError, CatalogError, GpuTableError)


def cmd_predict(a: argparse.Namespace) -> int:
    if a.acceptance is not None and not 0.0 <= a.acceptance <= 1.0:
        raise ValueError(f"--acceptance must be between 0 and 1, got {a.acceptance}")
    if a.gpu_count != 1 and a.gpu is None:
        raise ValueError("--gpu-count goes with --gpu")
    if a.gpu is not None and a.cpu:
        raise ValueError("--gpu and --cpu ask for two devices; give one")
    catalog = load_catalog()
    named = resolve(a.target, catalog)
    target = model_cost(named.info)
    named_draft = resolve(a.draft, catalog) if a.draft else named.draft
    # without a draft, a target with an MTP block drafts for itself (draft-mtp), as `spectune run` picks
    draft = model_cost(named_draft.info) if named_draft else mtp_cost(named.info)
    files = Path(a.target).exists() and (a.draft is None or Path(a.draft).exists())
    # a tune measured this pair on this machine: it says nothing of another card
    measured = None if a.prior or a.gpu or not files else measured_pair(Path(a.target), a.draft and Path(a.draft))
    device = None
    if a.gpu is not None:
        device = gpu_device(described_report(find_gpu(a.gpu), a.gpu_count))
    elif measured is None:
        device = measured_device(
            probe(a.nvml), cpu_only=a.cpu, progress=lambda m: print(f"spectune: {m}", file=sys.stderr)
        )
    result = predict(
        target, draft, device, n_past=a.n_past, acceptance=a.acceptance, measured=measured, workload=a.workload
    )
    if a.json:
        out = result.to_dict()
        out["target"] = named.label
        out["draft"] = named_draft.label if named_draft else None
        print(json.dumps(out))
        return 0
    print(f"target: {named.label}" + (f"; draft: {named_draft.label}" if named_draft else ""))
    print(
        format_prediction(
            result,
            measured_from=measured.source if measured is not None else None,
            acceptance_given=a.acceptance is not None,
            workload=a.workload,
        )
    )
    return 0


def format_prediction(
    p: Prediction, measured_from: str | None = None, acceptance_given: bool = False, workload: str | None = None
) -> str:
    where = measured_from or (f"{p.device.name}: {p.device.source}" if p.device else "")
    lines = [f"basis: {p.basis} ({where})"]
    band = f" {p.band.plain_text()}" if p.band else f" ({p.unchecked_text()})"
    lines.append(f"plain decoding: {p.plain_tokens_per_s:.1f} tokens/s{band}")
    if p.speedup_by_k:
        ks = sorted(p.speedup_by_k)
        speed_band = f" (each ±{p.band.speedup:.2f})" if p.band else ""
        lines.append(
            f"{p.method} speedup by K: " + "  ".join(f"{k}: x{p.speedup_by_k[k]:.2f}" for k in ks) + speed_band
        )
    lines.append(p.why())
    if p.band:
        lines.append(f"band: {p.band.source}" + ("" if "bench/" in p.band.source else " (bench/prediction_error.py)"))
    if p.speedup_by_k and p.basis == "prior" and not acceptance_given:
        lines.append(f"acceptance: {acceptance_prior_text(workload)}")
    return "\n".join(lines)


def register(subparsers: argparse._SubParsersAction, *, nvml: ModuleType | None = None) -> None:
    """Add predict. nvml: an NVML module to use instead of pynvml (tests)."""
    p = subparsers.add_parser("predict", help="predicted tokens/s and speculative speedup of a pair on this machine")
    p.add_argument(
        "--target",
        required=True,
        help="target model: a GGUF file, a catalog preset, a catalog file (REPO/FILE), ID:QUANT, or a described "
        "model ARCH:SIZE:QUANT such as llama:8B:Q4_0",
    )
    p.add_argument("--draft", help="draft model, named as --target is (default: a preset's draft)")
    add_gpu_args(p, "predict")
    p.add_argument(
        "--n-past",
        type=int,
        default=PREDICT_N_PAST,
        help=f"tokens already in the context (default {PREDICT_N_PAST})",
    )
    p.add_argument("--acceptance", type=float, help="acceptance per draft position, replacing the prior or measure")
    p.add_argument("--prior", action="store_true", help="ignore a tune of this pair in the history")
    p.add_argument(
        "--workload",
        choices=sorted(ACCEPTANCE_PRIORS),
        help="the kind of text: its prior acceptance (measured on a real pair) stands in until the pair is measured "
        f"(default: a flat {ACCEPTANCE_PRIOR:.2f})",
    )
    p.add_argument("--cpu", action="store_true", help="predict for the CPU even when a GPU is present")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=_guarded(cmd_predict), nvml=nvml)
