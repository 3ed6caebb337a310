"""llama-server command lines for a set of tuned settings, in the binary's own dialect.

``llama_server_argv`` writes the current dialect of the pinned llama.cpp (after
the b8955 flag rename and the b9131 type names; see engine.llama.dialect).
``export_llama_server`` first reads the target binary's --help
(engine.llama.dialect) and writes what that build understands, refusing a
setting it cannot express, and lists the pitfalls of the result. The argv is a
list (for launching); engine.deploy.shell_quote turns it into text for a person.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

from engine.core.settings import DRAFT_MODEL_TYPES, RANDOM_SEED, LoadSettings, SamplingSettings, SpecSettings
from engine.core.units import format_plan_bytes
from engine.llama.dialect import (
    CURRENT,
    CURRENT_NGRAM_PREFIX,
    NGRAM_FAMILY,
    ServerDialect,
    ServerHelp,
    detect_dialect,
    read_help,
    resolve_server,
)
from engine.planning.advice.preflight import FILE, NO_PLAN, Preflight, preflight
from engine.planning.hardware import cpu_features, probe, ram
from engine.planning.memory.budget import Budget
from engine.planning.memory.memory_plan import GpuBudget

_SPEC_DEFAULTS = SpecSettings()  # the pinned llama.cpp's defaults
N_PARALLEL = 1


class ExportError(ValueError):
    """The target llama-server cannot express these settings; the message says which and why."""


class _ArgvBuilder:
    """An argv that refuses flags the binary does not take and two values for one flag."""

    def __init__(self, server: str | Path, dialect: ServerDialect):
        self.argv = [str(server)]
        self.dialect = dialect
        self._given: dict[str, tuple[str | None, str]] = {}

    def add(self, flag: str, value: str | None, purpose: str) -> None:
        if not self.dialect.accepts(flag):
            raise ExportError(
                f"this llama-server ({self.dialect.name} dialect) does not accept {flag}, needed for {purpose}"
            )
        if flag in self._given:
            old_value, old_purpose = self._given[flag]
            if old_value != value:
                raise ExportError(
                    f"this llama-server ({self.dialect.name} dialect) has one {flag} for both "
                    f"{old_purpose} ({old_value}) and {purpose} ({value}); set them equal, or use a "
                    f"llama-server from b8955 on, which has a flag for each"
                )
            return
        self._given[flag] = (value, purpose)
        self.argv += [flag] if value is None else [flag, value]


def _number(value: float) -> str:
    return f"{value:g}"


def _differs_from_default(dialect: ServerDialect, flag: str, value: float, pinned_default: float) -> bool:
    """Leave a flag out only when the binary's own default is the same value."""
    if dialect.server_help is None:
        return value != pinned_default
    stated = dialect.default_of(flag)
    try:
        return stated is None or float(stated) != value
    except ValueError:
        return True


def _cannot_express(spec_type: str, dialect: ServerDialect) -> str:
    listed = ", ".join(sorted(set(dialect.spec_types.values()))) or "none"
    return (
        f"this llama-server ({dialect.name} dialect) cannot run speculative type {spec_type}: its --spec-type "
        f"knows {listed}; use a newer llama-server or another type"
    )


def server_argv(
    load: LoadSettings,
    spec: SpecSettings,
    sampling: SamplingSettings | None = None,
    server: str | Path = "llama-server",
    dialect: ServerDialect = CURRENT,
    *,
    host: str | None = None,
    port: int | None = None,
    extra: list[str] | None = None,
    parallel: int = N_PARALLEL,
) -> list[str]:
    """The argv that makes this llama-server build speculate as ``spec`` does in the lab. parallel: server
    slots (-np), each given the context ``load.ctx`` (-c is their sum: llama-server splits it)."""
    b = _ArgvBuilder(server, dialect)
    _add_load(b, load, parallel)
    _add_spec_types(b, load, spec.types, dialect)
    _add_draft_model_knobs(b, spec, dialect)
    _add_ngram_knobs(b, spec, dialect)
    if sampling is not None:
        _add_sampling(b, sampling)
    if host is not None:
        b.add("--host", host, "the address")
    if port is not None:
        b.add("--port", str(port), "the port")
    return b.argv + list(extra or [])


def _add_load(b: _ArgvBuilder, load: LoadSettings, parallel: int = N_PARALLEL) -> None:
    if parallel < 1:
        raise ExportError(f"server slots (-np) must be at least 1, not {parallel}")
    b.add("-m", str(load.target), "the target model")
    b.add("-c", str(load.ctx * parallel), "the context size (each slot's times the slots)")
    # one slot by default: the lab measures one client; see export_warnings for why
    b.add("-np", str(parallel), "the server slots")
    if load.ngl != -1:
        b.add("-ngl", str(load.ngl), "target layers on the GPU")
    if load.device:
        b.add("-dev", load.device, "the GPUs the target uses")
    if load.threads > 0:
        b.add("-t", str(load.threads), "threads")
    if load.threads_batch > 0:
        b.add("-tb", str(load.threads_batch), "batch threads")
    if not load.repack:
        b.add("-nr", None, "no CPU weight repacking")
    if load.lock_in_ram:
        b.add("-lm", "mmap+mlock", "the weights locked in RAM")
    if load.n_cpu_moe < 0:
        b.add("--cpu-moe", None, "every layer's expert weights on the CPU")
    elif load.n_cpu_moe > 0:
        b.add("-ncmoe", str(load.n_cpu_moe), "the expert weights of the first layers on the CPU")


def _is_gemma4_assistant(path: str | Path) -> bool:
    """A Gemma 4 assistant file: the draft model of draft-mtp (`-md FILE --spec-type draft-mtp`)."""
    from engine.models.gguf_inspect import GGUFInspectError, inspect_gguf

    try:
        return inspect_gguf(path).speculative_role == "gemma4-assistant"
    except (GGUFInspectError, OSError):
        return False


def _draft_model_types(load: LoadSettings, types: list[str]) -> list[str]:
    """The types that run on the -md draft model: draft-mtp too when that model is a Gemma 4 assistant."""
    assistant = "draft-mtp" in types and load.draft is not None and _is_gemma4_assistant(load.draft)
    return [t for t in types if t in DRAFT_MODEL_TYPES or (assistant and t == "draft-mtp")]


def _add_spec_types(b: _ArgvBuilder, load: LoadSettings, types: list[str], dialect: ServerDialect) -> None:
    """--spec-type in the dialect's names, and the draft model when a type uses one."""
    type_names = []
    for t in types:
        if t in dialect.implied_by_draft_model:
            continue
        if t not in dialect.spec_types:
            raise ExportError(_cannot_express(t, dialect))
        type_names.append(dialect.spec_types[t])
    if type_names:
        b.add("--spec-type", ",".join(type_names), "the speculative types")
    draft_types = _draft_model_types(load, types)
    if draft_types and load.draft is not None:
        b.add("-md", str(load.draft), "the draft model")
        if load.ngl_draft != -1:
            b.add("-ngld", str(load.ngl_draft), "draft layers on the GPU")
        if load.device_draft:
            b.add("-devd", load.device_draft, "the GPUs the draft uses")
        if load.n_cpu_moe_draft:
            # -1 (every layer) as a count the flag takes: more layers than any draft has
            layers = str(load.n_cpu_moe_draft if load.n_cpu_moe_draft > 0 else 9999)
            b.add("-ncmoed", layers, "the draft's expert weights of the first layers on the CPU")
    elif load.draft is None and any(t in dialect.implied_by_draft_model for t in types):
        raise ExportError(f"{', '.join(draft_types)} needs a draft model (--draft)")


def _add_draft_model_knobs(b: _ArgvBuilder, spec: SpecSettings, dialect: ServerDialect) -> None:
    """K, n-min and p-min of the draft-model types."""
    if not any(t.startswith("draft-") for t in spec.types):
        return
    # pre-rename ngram-mod shares --draft-min/--draft-max with the draft model: no flag may fall to a default
    shared_mod = "ngram-mod" in spec.types and not dialect.own_ngram_mod_flags
    b.add(dialect.draft_n_max_flag, str(spec.draft_n_max), "the draft model's K (draft_n_max)")
    if shared_mod or _differs_from_default(
        dialect, dialect.draft_n_min_flag, spec.draft_n_min, _SPEC_DEFAULTS.draft_n_min
    ):
        b.add(dialect.draft_n_min_flag, str(spec.draft_n_min), "the draft model's draft_n_min")
    if _differs_from_default(dialect, dialect.draft_p_min_flag, spec.draft_p_min, _SPEC_DEFAULTS.draft_p_min):
        b.add(dialect.draft_p_min_flag, _number(spec.draft_p_min), "the draft model's draft_p_min")


def _add_ngram_knobs(b: _ArgvBuilder, spec: SpecSettings, dialect: ServerDialect) -> None:
    """The n-gram types' sizes (per type or shared, by dialect) and ngram-mod's own three."""
    for t in (t for t in spec.types if t in NGRAM_FAMILY):
        if dialect.per_type_ngram_flags:
            name = CURRENT_NGRAM_PREFIX[t]
            b.add(f"--spec-ngram-{name}-size-n", str(spec.ngram_size_n), f"{t}'s size n")
            b.add(f"--spec-ngram-{name}-size-m", str(spec.ngram_size_m), f"{t}'s size m")
            b.add(f"--spec-ngram-{name}-min-hits", str(spec.ngram_min_hits), f"{t}'s min hits")
        else:
            b.add("--spec-ngram-size-n", str(spec.ngram_size_n), "the n-gram types' size n")
            b.add("--spec-ngram-size-m", str(spec.ngram_size_m), "the n-gram types' size m")
            b.add("--spec-ngram-min-hits", str(spec.ngram_min_hits), "the n-gram types' min hits")
    if "ngram-mod" not in spec.types:
        return
    if dialect.own_ngram_mod_flags:
        b.add("--spec-ngram-mod-n-match", str(spec.ngram_mod_n_match), "ngram-mod's n_match")
        b.add("--spec-ngram-mod-n-min", str(spec.ngram_mod_n_min), "ngram-mod's n_min")
        b.add("--spec-ngram-mod-n-max", str(spec.ngram_mod_n_max), "ngram-mod's n_max")
    else:
        b.add("--spec-ngram-size-n", str(spec.ngram_mod_n_match), "ngram-mod's n_match")
        b.add(dialect.draft_n_min_flag, str(spec.ngram_mod_n_min), "ngram-mod's n_min")
        b.add(dialect.draft_n_max_flag, str(spec.ngram_mod_n_max), "ngram-mod's n_max")


def _add_sampling(b: _ArgvBuilder, sampling: SamplingSettings) -> None:
    # always written: llama-server's default temperature (0.8) is not the lab's (0)
    b.add("--temp", _number(sampling.temp), "the temperature")
    b.add("--top-k", str(sampling.top_k), "top-k")
    b.add("--top-p", _number(sampling.top_p), "top-p")
    b.add("--min-p", _number(sampling.min_p), "min-p")
    if sampling.seed != RANDOM_SEED:
        b.add("--seed", str(sampling.seed), "the seed")


def llama_server_argv(
    load: LoadSettings,
    spec: SpecSettings,
    sampling: SamplingSettings | None = None,
    server: str | Path = "llama-server",
    *,
    host: str | None = None,
    port: int | None = None,
    extra: list[str] | None = None,
    parallel: int = N_PARALLEL,
) -> list[str]:
    """The argv in the pinned llama.cpp's (current) dialect."""
    return server_argv(load, spec, sampling, server, CURRENT, host=host, port=port, extra=extra, parallel=parallel)


# -- the export of one binary, with its pitfalls ---------------------------------------------


@dataclass
class ServerExport:
    argv: list[str]
    dialect: str
    warnings: list[str] = field(default_factory=list)

    def line(self, shell: str) -> str:
        """The command line for a terminal. Nothing goes in front of the program, not for the bundled
        llama-server either: it finds its libraries through its RPATH ($ORIGIN/../lib) on Linux, and on
        Windows they sit beside it."""
        from engine.deploy.shell_quote import join

        return join(self.argv, shell)


def export_llama_server(
    load: LoadSettings,
    spec: SpecSettings,
    sampling: SamplingSettings | None = None,
    server: str | Path | None = None,
    *,
    server_help: ServerHelp | None = None,
    gpus: list | None = None,
    ram_available: int | None = None,
    parallel: int = N_PARALLEL,
) -> ServerExport:
    """The argv for ``server`` (default: the bundled llama-server) in its dialect, and what to watch out for.

    server_help: an already parsed --help (else the binary is asked). gpus / ram_available:
    the memory budget to check the plan against (else NVML and the OS are asked).
    """
    path = resolve_server(server)
    dialect = detect_dialect(server_help if server_help is not None else read_help(path))
    argv = server_argv(load, spec, sampling, server if server is not None else path, dialect, parallel=parallel)
    return ServerExport(
        argv,
        dialect.name,
        export_warnings(load, spec, dialect, gpus=gpus, ram_available=ram_available, parallel=parallel),
    )


def export_warnings(
    load: LoadSettings,
    spec: SpecSettings,
    dialect: ServerDialect = CURRENT,
    *,
    gpus: list | None = None,
    ram_available: int | None = None,
    parallel: int = N_PARALLEL,
) -> list[str]:
    types = spec.types
    draft_types = _draft_model_types(load, types)
    warnings = []
    if load.draft is not None and not draft_types:
        warnings.append(
            f"a draft model is given but the speculative types ({spec.spec_type}) include no draft-simple: "
            "since b9464 llama-server loads a -md draft and silently does not speculate with it unless "
            "--spec-type names draft-simple, so the export leaves the draft model out"
        )
    if dialect.implied_by_draft_model & set(types):
        warnings.append(
            f"this llama-server ({dialect.name} dialect) has no draft type in --spec-type: -md alone "
            "turns the draft model on; a build from b9464 on needs --spec-type draft-simple as well"
        )
    if not load.repack:
        warnings.append(
            "-nr: llama.cpp will not repack the weights for this CPU's AMX / AVX-512 kernels (the Lab turns this off "
            "when loading died of an illegal instruction while repacking, on a CPU that reports AMX it cannot run); "
            "on a machine that runs them, leave -nr out for faster CPU passes"
        )
    if parallel == 1:
        warnings.append(
            "the command runs 1 server slot (-np 1): llama-server's default (-np auto, 4 slots "
            "on a unified KV cache) shares the context between the slots and verifies their drafts in one batch, "
            "so the speed measured here only holds for one client at a time; raise -np and -c together to serve "
            "more"
        )
    with_draft = bool(draft_types and load.draft is not None)
    check = preflight(
        load.target,
        load.draft if with_draft else None,
        load.ctx * parallel,
        _budget(gpus, ram_available),
        ngl=load.ngl,
        ngl_draft=load.ngl_draft,
        check_files=False,
        # llama-server sizes its outputs n_parallel * (1 + draft_n_max) for the target
        n_outputs=parallel * (1 + spec.draft_n_max),
        n_outputs_draft=parallel,
        # the server loads for the K and the types it starts with (--spec-draft-n-max, --spec-type)
        draft_n_max=spec.draft_n_max,
        spec_types=types,
    )
    return warnings + _preflight_warnings(check, load.ctx * parallel)


def _budget(gpus: list[GpuBudget] | None, ram_available: int | None) -> Budget:
    """This machine's memory (NVML and the RAM figure), or the GPUs and RAM the caller names."""
    if gpus is None:
        budget = Budget.from_report(probe())
        return budget if ram_available is None else replace(budget, ram_bytes=ram_available)
    return Budget(tuple(gpus), ram()[1] if ram_available is None and not gpus else ram_available, tuple(cpu_features()))


def _preflight_warnings(check: Preflight, ctx: int) -> list[str]:
    """The preflight's verdict as what it means for the exported command."""
    warnings = [f"the models could not be checked: {m}" for m in check.messages(FILE)]
    if check.vocab_reasons:
        warnings.append(
            'llama-server will refuse this draft model ("draft model vocab type must match target '
            'model") and run without speculation: ' + "; ".join(check.vocab_reasons)
        )
    warnings += [f"{m} (for -c {ctx})" for m in check.messages(NO_PLAN)]
    fit = check.fit
    if fit is None or fit.fits is not False:
        return warnings
    totals = fit.plan.device_totals()
    if fit.where == "VRAM":
        short = [
            f"{g.name} needs {format_plan_bytes(totals.get(g.name, 0))} of {format_plan_bytes(g.free_bytes)} free"
            for g in fit.plan.gpus
            if g.name in fit.short_devices
        ]
        return warnings + [
            f"the memory plan for -c {ctx} does not fit: "
            + "; ".join(short)
            + " (llama-server's --fit would move layers to the CPU; lower -c or the layer count)"
        ]
    if fit.host_part:
        return warnings + [
            f"the GPUs hold their part of the memory plan for -c {ctx}, but it keeps "
            f"{format_plan_bytes(fit.needed_bytes)} in host memory (what it places on the CPU), "
            f"{format_plan_bytes(fit.available_bytes or 0)} available: free some RAM, keep fewer experts (-ncmoe) "
            "or the draft on the CPU where the GPUs have room, or take a smaller quantization"
        ]
    return warnings + [
        f"the memory plan for -c {ctx} needs {format_plan_bytes(fit.needed_bytes)} of host memory, "
        f"{format_plan_bytes(fit.available_bytes or 0)} available; lower -c"
    ]
