"""The arguments several ``spectune`` commands share: the model pair, the load and the knobs.

``settings_from`` turns them into validated engine settings; the commands do the rest.
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from engine.core.settings import LoadSettings, SamplingSettings, SettingsError, SpecSettings
from engine.models.demo_models import demo_pair
from engine.models.draft_heads import pair_verdicts, suggested_method, unavailable


def add_model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--target", type=Path, help="target model (GGUF); required unless --demo")
    p.add_argument("--draft", type=Path, help="draft model (GGUF) for draft-simple")
    p.add_argument("--ctx", type=int, default=4096, help="context size (default 4096)")
    p.add_argument("--ngl", type=int, default=-1, help="target layers on the GPU (-1: llama.cpp decides)")
    p.add_argument("--ngl-draft", type=int, default=-1, help="draft layers on the GPU (-1: llama.cpp decides)")
    p.add_argument("--threads", type=int, default=0, help="CPU threads (0: llama.cpp's default)")
    p.add_argument(
        "--no-repack",
        action="store_true",
        help="no CPU weight repacking (AMX / AVX-512 layouts), as llama-server's -nr",
    )
    add_placement_args(p)
    p.add_argument(
        "--device", default="", metavar="DEV", help="the GPU(s) the target uses, e.g. CUDA0 (llama-server's -dev)"
    )
    p.add_argument(
        "--demo",
        nargs="?",
        const="f16",
        choices=("f16", "q8_0"),
        help="use the bundled demo pair (resources/models) in this quantization (default f16)",
    )


def add_engine_args(p: argparse.ArgumentParser) -> None:
    """Which engine measures (engine.runtime.engine_choice), and which llama-server binary."""
    p.add_argument(
        "--engine",
        choices=("auto", "native", "llama-server"),
        default="auto",
        help="native: SpecTune's engine (libspecrt); llama-server: the same measurements through llama-server "
        "(the bundled one, or --server); auto (default): native, and llama-server when native cannot start here",
    )
    p.add_argument(
        "--server",
        type=Path,
        metavar="BIN",
        help="the llama-server binary for --engine llama-server and --clients (default: the bundled one); "
        "your own build (CUDA, ROCm, Vulkan, Metal, newer than the pin) works",
    )


def add_placement_args(p: argparse.ArgumentParser) -> None:
    """Where the weights go beyond the GPU layers: the MoE experts kept on the CPU, and the draft's GPUs."""
    p.add_argument(
        "--n-cpu-moe",
        type=int,
        default=0,
        metavar="N",
        help="MoE: the expert weights of the first N target layers stay on the CPU (-1: all; llama-server's "
        "--n-cpu-moe)",
    )
    p.add_argument(
        "--device-draft",
        default="",
        metavar="DEV",
        help="the GPU(s) the draft uses, e.g. CUDA1 (llama-server's -devd; default: the target's GPUs)",
    )


def add_gpu_args(p: argparse.ArgumentParser, verb: str) -> None:
    """--gpu NAME [--gpu-count N]: a card from SpecTune's GPU table in place of this machine's GPUs (verb: what
    the command does for it, "plan", "predict")."""
    p.add_argument(
        "--gpu",
        metavar="NAME",
        help=f"{verb} for this card from SpecTune's GPU table instead of this machine's, its whole memory free "
        '("RTX 3090", "RTX 4060 Ti 16GB", "H100 SXM")',
    )
    p.add_argument("--gpu-count", type=int, default=1, metavar="N", help="with --gpu: this many of the card")


def add_knob_args(p: argparse.ArgumentParser) -> None:
    d = SpecSettings()
    p.add_argument(
        "--spec-type",
        default=None,
        help="comma list of llama.cpp types (draft-simple, ngram-mod, ...); default draft-simple "
        "with --draft (the draft's own type for an EAGLE-3 or DFlash file), else ngram-mod",
    )
    p.add_argument("--draft-n-max", type=int, default=d.draft_n_max, help="K, most draft tokens per step")
    p.add_argument("--draft-n-min", type=int, default=d.draft_n_min)
    p.add_argument("--draft-p-min", type=float, default=d.draft_p_min)
    p.add_argument("--ngram-size-n", type=int, default=d.ngram_size_n)
    p.add_argument("--ngram-size-m", type=int, default=d.ngram_size_m)
    p.add_argument("--ngram-min-hits", type=int, default=d.ngram_min_hits)
    p.add_argument("--ngram-mod-n-match", type=int, default=d.ngram_mod_n_match)
    p.add_argument("--ngram-mod-n-min", type=int, default=d.ngram_mod_n_min)
    p.add_argument("--ngram-mod-n-max", type=int, default=d.ngram_mod_n_max)
    p.add_argument("--temp", type=float, default=0.0, help="sampling temperature (default 0: greedy)")
    p.add_argument("--top-k", type=int, default=40)
    p.add_argument("--top-p", type=float, default=0.95)
    p.add_argument("--min-p", type=float, default=0.05)
    p.add_argument("--seed", type=int, default=0xFFFFFFFF)


def add_chat_args(p: argparse.ArgumentParser) -> None:
    mode = p.add_mutually_exclusive_group()
    mode.add_argument(
        "--chat",
        dest="chat_mode",
        action="store_const",
        const="chat",
        help="run each prompt as a conversation through the target's chat template, as llama-server's "
        "/v1/chat/completions does (the default when the target's GGUF has a template)",
    )
    mode.add_argument(
        "--raw",
        dest="chat_mode",
        action="store_const",
        const="raw",
        help="send prompts as raw text, no template (the default for a base model without one)",
    )
    p.set_defaults(chat_mode="auto")


def chat_from(a: argparse.Namespace) -> bool:
    """Chat mode for these arguments (after resolve_models: --demo names the target)."""
    from engine.models.chat_mode import resolve_chat

    return resolve_chat(getattr(a, "chat_mode", "auto"), a.target)


def resolve_models(a: argparse.Namespace) -> None:
    """--demo stands for --target/--draft of the bundled demo pair; otherwise --target is required."""
    if getattr(a, "demo", None):
        if a.target is not None or a.draft is not None:
            raise SettingsError("--demo picks both models itself: leave out --target and --draft")
        a.target, a.draft = demo_pair(a.demo)
    elif a.target is None:
        raise SettingsError("no target model: give --target (and --draft), or --demo for the bundled pair")


def settings_from(
    a: argparse.Namespace, *, export: bool = False
) -> tuple[LoadSettings, SpecSettings, SamplingSettings]:
    """export: the settings are for an exported command, not for SpecTune's engine: a method only the engine
    cannot run yet is let through (engine.models.draft_heads.unavailable)."""
    resolve_models(a)
    load = LoadSettings(
        target=a.target,
        draft=a.draft,
        ctx=a.ctx,
        ngl=a.ngl,
        ngl_draft=a.ngl_draft,
        threads=a.threads,
        repack=not a.no_repack,
        n_cpu_moe=a.n_cpu_moe,
        device_draft=a.device_draft,
        device=a.device,
    ).validate()
    verdicts = pair_verdicts(load.target, load.draft)
    spec_type = a.spec_type or suggested_method(load.draft is not None, verdicts)
    spec = SpecSettings(
        spec_type=spec_type,
        draft_n_max=a.draft_n_max,
        draft_n_min=a.draft_n_min,
        draft_p_min=a.draft_p_min,
        ngram_size_n=a.ngram_size_n,
        ngram_size_m=a.ngram_size_m,
        ngram_min_hits=a.ngram_min_hits,
        ngram_mod_n_match=a.ngram_mod_n_match,
        ngram_mod_n_min=a.ngram_mod_n_min,
        ngram_mod_n_max=a.ngram_mod_n_max,
    ).validate(has_draft=a.draft is not None, unavailable=unavailable(verdicts, export=export))
    sampling = SamplingSettings(temp=a.temp, top_k=a.top_k, top_p=a.top_p, min_p=a.min_p, seed=a.seed).validate()
    # loaded for this K, as llama-server is by the exported --spec-draft-n-max
    load = dataclasses.replace(load, draft_n_max_at_load=min(spec.draft_n_max, load.draft_n_max_limit))
    return load, spec, sampling
