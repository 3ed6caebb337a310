"""vLLM and SGLang serve commands for the tuned settings, for users who outgrow one machine.

Both engines take one speculative method, a Hugging Face model repo or directory
(not GGUF) and sampling per request, so the translation is approximate and every
approximation becomes a warning. Flag names checked on the projects' own
documentation (search tool, corpus "docs"):

vLLM    docs.vllm.ai/en/latest/features/speculative_decoding/draft_model/ and
        .../v0.25.0/...: ``vllm serve MODEL -tp 1 --max-model-len N
        --speculative-config '{"model": D, "num_speculative_tokens": 5,
        "method": "draft_model"}'``; .../speculative_decoding/n_gram/:
        ``{"method": "ngram", "num_speculative_tokens": 5, "prompt_lookup_max": 4}``
        (prompt_lookup_min next to it in vllm/config/speculative.py);
        speculators' serve_vllm tutorial: ``"method": "eagle3"`` with a draft
        ``"model"``; "mtp" is listed in SpeculativeMethod (api/vllm/config/speculative);
        .../features/quantization/gguf/: GGUF support is "highly experimental and
        under-optimized", single-file only, base-model --tokenizer recommended, and
        now lives in the separate vllm-gguf-plugin. ``--tensor-parallel-size``.
SGLang  docs.sglang.io/docs/advanced_features/speculative_decoding.md:
        ``python -m sglang.launch_server --model-path M --speculative-algorithm``
        EAGLE | EAGLE3 | STANDALONE (a small draft LLM) | NGRAM (CUDA only),
        ``--speculative-draft-model-path``, ``--speculative-num-steps``,
        ``--speculative-eagle-topk``, ``--speculative-num-draft-tokens`` ("number of
        draft tokens verified per step" for NGRAM); SGLang's server_args forces
        num_draft_tokens = num_steps + 1 when eagle_topk is 1; ``--tp-size`` and
        ``--context-length`` (SpecForge benchmark docs, server arguments).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from engine.core.settings import LoadSettings, SamplingSettings, SpecSettings

ENGINES = ("vllm", "sglang")
NGRAM_TYPES = ("ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod", "ngram-cache")


class EngineExportError(ValueError):
    """The settings have no counterpart in the engine; the message says which."""


@dataclass
class EngineExport:
    argv: list[str]
    warnings: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class _Method:
    spec_type: str  # the llama.cpp type it stands for
    draft_tokens: int  # K
    lookup: int | None = None  # n-gram lookup length


def _pick_method(spec: SpecSettings, engine: str, warnings: list[str]) -> _Method:
    types = spec.types
    if not types:
        raise EngineExportError("the settings speculate with nothing (spec type none); there is nothing to export")
    model_types = [t for t in types if not t.startswith("ngram-")]
    chosen = model_types[0] if model_types else types[0]
    dropped = [t for t in types if t != chosen]
    if dropped:
        warnings.append(f"{engine} runs one speculative method: {chosen} is exported, {', '.join(dropped)} left out")
    if chosen in ("draft-dflash", "draft-dspark"):
        raise EngineExportError(f"SpecTune has no {engine} translation for {chosen}; configure it by hand")
    if chosen.startswith("draft-"):
        return _Method(chosen, spec.draft_n_max)
    if chosen == "ngram-mod":
        k, lookup = spec.ngram_mod_n_max, spec.ngram_mod_n_match
    else:
        k, lookup = spec.ngram_size_m, spec.ngram_size_n
    warnings.append(
        f"{engine}'s n-gram drafting is not llama.cpp's {chosen}: the lookup length ({lookup}) and "
        f"draft length ({k}) carry over, but acceptance will differ; tune them again there"
    )
    return _Method(chosen, k, lookup)


def _model_names(
    load: LoadSettings,
    method: _Method,
    target_model: str | None,
    draft_model: str | None,
    engine: str,
    warnings: list[str],
) -> tuple[str, str | None]:
    target = target_model or str(load.target)
    needs_draft = method.spec_type in ("draft-simple", "draft-eagle3")
    draft = (draft_model or (str(load.draft) if load.draft is not None else None)) if needs_draft else None
    if needs_draft and draft is None:
        raise EngineExportError(f"{method.spec_type} needs a draft model")
    ggufs = [name for name in (target, draft) if name is not None and name.lower().endswith(".gguf")]
    if ggufs:
        detail = (
            "vLLM's GGUF support is highly experimental: single-file models only, through the "
            "vllm-gguf-plugin, with --tokenizer set to the base model"
            if engine == "vllm"
            else "SGLang loads Hugging Face weights"
        )
        warnings.append(
            f"{engine} takes Hugging Face model repos or directories, not GGUF files; {detail}. "
            f"Name the original models of {', '.join(ggufs)} with --hf-target / --hf-draft"
        )
    return target, draft


def _sampling_warning(sampling: SamplingSettings | None, engine: str) -> list[str]:
    if sampling is None:
        return []
    return [
        f"{engine} takes sampling per request: send temperature={sampling.temp:g}, top_k={sampling.top_k}, "
        f"top_p={sampling.top_p:g}, min_p={sampling.min_p:g} with each request to match the lab"
    ]


@dataclass
class _Request:
    """What both engines' commands are made from: the method, the model names, the parallelism and context,
    and the warnings gathered so far."""

    method: _Method
    target: str
    draft: str | None
    tensor_parallel_size: int
    ctx: int
    warnings: list[str]


def engine_export(
    engine: str,
    load: LoadSettings,
    spec: SpecSettings,
    sampling: SamplingSettings | None = None,
    *,
    target_model: str | None = None,
    draft_model: str | None = None,
    tensor_parallel_size: int = 1,
) -> EngineExport:
    """The serve command of `engine` (vllm | sglang) for these settings, with a warning per approximation."""
    if engine not in ENGINES:
        raise EngineExportError(f"unknown engine {engine!r}; known: {', '.join(ENGINES)}")
    if tensor_parallel_size < 1:
        raise EngineExportError(f"the tensor-parallel size must be 1 or more, got {tensor_parallel_size}")
    warnings: list[str] = []
    method = _pick_method(spec, engine, warnings)
    target, draft = _model_names(load, method, target_model, draft_model, engine, warnings)
    request = _Request(method, target, draft, tensor_parallel_size, load.ctx, warnings)
    argv = _vllm_argv(request) if engine == "vllm" else _sglang_argv(request)
    return EngineExport(argv, request.warnings + _sampling_warning(sampling, engine))


def vllm_export(
    load: LoadSettings, spec: SpecSettings, sampling: SamplingSettings | None = None, **options
) -> EngineExport:
    return engine_export("vllm", load, spec, sampling, **options)


def sglang_export(
    load: LoadSettings, spec: SpecSettings, sampling: SamplingSettings | None = None, **options
) -> EngineExport:
    return engine_export("sglang", load, spec, sampling, **options)


def _vllm_argv(r: _Request) -> list[str]:
    method, draft = r.method, r.draft
    config: dict = {"num_speculative_tokens": method.draft_tokens}
    if method.spec_type == "draft-simple":
        config.update(method="draft_model", model=draft)
    elif method.spec_type == "draft-eagle3":
        config.update(method="eagle3", model=draft)
    elif method.spec_type == "draft-mtp":
        config.update(method="mtp")
    else:
        # llama.cpp matches exactly `lookup` tokens; vLLM tries lengths from max down to min
        config.update(method="ngram", prompt_lookup_max=method.lookup, prompt_lookup_min=method.lookup)
    return [
        "vllm",
        "serve",
        r.target,
        "--tensor-parallel-size",
        str(r.tensor_parallel_size),
        "--max-model-len",
        str(r.ctx),
        "--speculative-config",
        json.dumps(config),
    ]


def _sglang_argv(r: _Request) -> list[str]:
    method, draft, warnings = r.method, r.draft, r.warnings
    if method.spec_type == "draft-mtp":
        raise EngineExportError(
            "SGLang's multi-token prediction is set up per model family (see its MTP "
            "documentation); SpecTune does not export it"
        )
    argv = [
        "python",
        "-m",
        "sglang.launch_server",
        "--model-path",
        r.target,
        "--tp-size",
        str(r.tensor_parallel_size),
        "--context-length",
        str(r.ctx),
    ]
    if method.spec_type in ("draft-simple", "draft-eagle3"):
        algorithm = "STANDALONE" if method.spec_type == "draft-simple" else "EAGLE3"
        # one chain of K draft tokens: top-k 1, and SGLang counts the root token in num_draft_tokens
        assert draft is not None  # _model_names refuses a draft method without one
        argv += [
            "--speculative-algorithm",
            algorithm,
            "--speculative-draft-model-path",
            draft,
            "--speculative-num-steps",
            str(method.draft_tokens),
            "--speculative-eagle-topk",
            "1",
            "--speculative-num-draft-tokens",
            str(method.draft_tokens + 1),
        ]
    else:
        argv += ["--speculative-algorithm", "NGRAM", "--speculative-num-draft-tokens", str(method.draft_tokens)]
        warnings.append(
            "SGLang's NGRAM speculation runs on CUDA only; its match-window settings are left at SGLang's defaults"
        )
    return argv
