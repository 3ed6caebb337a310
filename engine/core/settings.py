"""The knobs of a run, their llama.cpp defaults, and their validation.

Pure data: the CLI, the worker protocol, the GUI and the exporter all speak in
these three dataclasses. Defaults follow the pinned llama.cpp (common/common.h, common_params_speculative).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any

# every type llama-server's --spec-type knows, in llama.cpp's priority order
SPEC_TYPES = (
    "ngram-simple",
    "ngram-map-k",
    "ngram-map-k4v",
    "ngram-mod",
    "ngram-cache",
    "draft-simple",
    "draft-eagle3",
    "draft-mtp",
    "draft-dflash",
    "draft-dspark",
)
DRAFT_MODEL_TYPES = {"draft-simple", "draft-eagle3", "draft-dflash", "draft-dspark"}
# the types whose state outlives a request in one llama-server (common/speculative.cpp of the pin):
# ngram-mod's shared pool, ngram-cache's context cache and the n-gram maps' keys. A prompt sent again
# is drafted from its own earlier answer, which a new request of a user's would not be.
LEARNS_ACROSS_REQUESTS = frozenset({"ngram-map-k", "ngram-map-k4v", "ngram-mod", "ngram-cache"})
MAX_DRAFT_N = 64
RANDOM_SEED = 0xFFFFFFFF  # llama.cpp's LLAMA_DEFAULT_SEED: a fresh random seed for every request


class SettingsError(ValueError):
    """A setting has a value the engine cannot use; the message names it."""


def parse_spec_types(text: str) -> list[str]:
    """'draft-simple, ngram-mod' -> ['draft-simple', 'ngram-mod']; 'none' -> []."""
    names = [t.strip() for t in text.split(",") if t.strip()]
    if not names or names == ["none"]:
        return []
    if "none" in names:
        raise SettingsError("'none' cannot be combined with other speculative types")
    unknown = [n for n in names if n not in SPEC_TYPES]
    if unknown:
        raise SettingsError(
            f"unknown speculative type {', '.join(map(repr, unknown))}; known: none, {', '.join(SPEC_TYPES)}. "
            "These are the types of the llama.cpp SpecTune is pinned to: a newer llama-server may know more, "
            "but SpecTune cannot measure, tune or export a type it does not know yet"
        )
    return names


@dataclass(frozen=True)
class LoadSettings:
    target: Path
    draft: Path | None = None
    ctx: int = 4096
    n_batch: int = 2048
    n_ubatch: int = 512
    ngl: int = -1
    ngl_draft: int = -1
    threads: int = 0
    threads_batch: int = 0
    draft_n_max_limit: int = MAX_DRAFT_N
    flash_attn: int = -1
    verbose: bool = False
    # CPU weight repacking into AMX / AVX-512 layouts (llama.cpp's default). Some
    # virtual machines report AMX without enabling it: loading then dies of SIGILL.
    repack: bool = True
    # MoE: expert weights of the first N layers stay on the CPU (llama-server's --n-cpu-moe), so that
    # the rest of a model too big for the GPU fits there; -1 keeps every layer's experts on the CPU
    n_cpu_moe: int = 0
    n_cpu_moe_draft: int = 0
    # the GPUs the draft may use, as llama-server's -devd names them ("CUDA1"; "" = the target's GPUs): with
    # GPUs of different sizes, the draft on one of its own can fit where the default split does not
    device_draft: str = ""
    device: str = ""  # the same for the target (llama-server's -dev)
    # the K the model is loaded for, as llama-server's --spec-draft-n-max at its start (0: llama.cpp's 3). With
    # draft-mtp on a hybrid model (Qwen3.5) llama.cpp keeps this many recurrent-state snapshots, so a rejected
    # draft of up to K tokens rolls back in place; a larger K set later rolls back by checkpoint and replay,
    # which gives the same text in more steps than a server started with that K
    draft_n_max_at_load: int = 0
    # map the weights and lock them in RAM (llama-server's --load-mode mmap+mlock). A system that pages out
    # file pages left idle (a VM's proactive reclaim: this project's 2-core VM drops mapped pages unread
    # for a minute) makes a model's speed depend on what it did a minute ago; a benchmark or the CPU probe
    # locks its models so that each arm starts from the same state. Without the right to lock that much
    # (RLIMIT_MEMLOCK), llama.cpp warns and loads unlocked.
    lock_in_ram: bool = False

    @property
    def offloads(self) -> bool:
        """Layers of the target, or of the draft, go to a GPU (when the engine has one)."""
        return self.ngl != 0 or (self.draft is not None and self.ngl_draft != 0)

    def validate(self) -> LoadSettings:
        if not Path(self.target).is_file():
            raise SettingsError(f"target model not found: {self.target}")
        if self.draft is not None and not Path(self.draft).is_file():
            raise SettingsError(f"draft model not found: {self.draft}")
        if not 64 <= self.ctx <= 1 << 20:
            raise SettingsError(f"ctx must be between 64 and 1048576, got {self.ctx}")
        if self.ngl < -1 or self.ngl_draft < -1:
            raise SettingsError("ngl must be -1 (auto) or a layer count >= 0")
        if self.threads < 0 or self.threads_batch < 0:
            raise SettingsError("threads must be >= 0 (0 = llama.cpp's default)")
        if not 1 <= self.draft_n_max_limit <= 255:
            raise SettingsError("draft_n_max_limit must be between 1 and 255")
        if not 0 <= self.draft_n_max_at_load <= self.draft_n_max_limit:
            raise SettingsError("draft_n_max_at_load must be between 0 (llama.cpp's default) and draft_n_max_limit")
        for name, value in (("device", self.device), ("device_draft", self.device_draft)):
            if value and not all(re.fullmatch(r"[A-Za-z][A-Za-z0-9_]*", d) for d in value.split(",")):
                raise SettingsError(f"{name} must be device names like CUDA1 (comma-separated), got {value!r}")
        if self.n_cpu_moe < -1 or self.n_cpu_moe_draft < -1:
            raise SettingsError("n_cpu_moe must be -1 (every layer's experts on the CPU), 0 (none) or a layer count")
        return self


@dataclass(frozen=True)
class SpecSettings:
    spec_type: str = "draft-simple"
    draft_n_max: int = 3
    draft_n_min: int = 0
    draft_p_min: float = 0.0
    ngram_size_n: int = 12
    ngram_size_m: int = 48
    ngram_min_hits: int = 1
    ngram_mod_n_match: int = 24
    ngram_mod_n_min: int = 48
    ngram_mod_n_max: int = 64

    @property
    def types(self) -> list[str]:
        return parse_spec_types(self.spec_type)

    @property
    def learns_across_requests(self) -> bool:
        """Whether a method here keeps what one request taught it for the next (LEARNS_ACROSS_REQUESTS)."""
        return any(t in LEARNS_ACROSS_REQUESTS for t in self.types)

    def label(self, sizes: bool = False) -> str:
        """The setting in a few words, as tables, sentences and the tunes' JSON name it: the method, K where a
        draft proposes tokens, p-min when set; sizes: the n-gram methods' sizes too (where settings differ
        only in them)."""
        try:
            types = self.types
        except SettingsError:  # a method typed in that llama.cpp does not know: named as typed (the Lab says why)
            return self.spec_type
        parts = [self.spec_type]
        drafts = any(t.startswith("draft-") for t in types)
        if drafts:
            parts.append(f"K={self.draft_n_max}")
        if drafts and self.draft_p_min:
            parts.append(f"p-min={self.draft_p_min:g}")
        if sizes and any(t.startswith("ngram-") and t != "ngram-mod" for t in types):
            parts.append(f"n={self.ngram_size_n},m={self.ngram_size_m}")
        if sizes and "ngram-mod" in types:
            parts.append(f"match={self.ngram_mod_n_match},min={self.ngram_mod_n_min},max={self.ngram_mod_n_max}")
        return " ".join(parts)

    def validate(
        self, has_draft: bool | None = None, k_limit: int = MAX_DRAFT_N, unavailable: Mapping[str, str] | None = None
    ) -> SpecSettings:
        """unavailable: the types the loaded pair cannot run, each with the sentence that says why
        (engine.models.draft_heads.unavailable); a setting that uses one is refused with it."""
        types = self.types
        for t in types:
            if unavailable and t in unavailable:
                raise SettingsError(unavailable[t])
        if has_draft is False:
            needs = [t for t in types if t in DRAFT_MODEL_TYPES]
            if needs:
                raise SettingsError(f"{', '.join(needs)} needs a draft model (--draft)")
        if not 0 <= self.draft_n_max <= k_limit:
            raise SettingsError(f"draft_n_max (K) must be between 0 and {k_limit}, got {self.draft_n_max}")
        if not 0 <= self.draft_n_min <= self.draft_n_max:
            raise SettingsError(
                f"draft_n_min must be between 0 and draft_n_max ({self.draft_n_max}), got {self.draft_n_min}"
            )
        if not 0.0 <= self.draft_p_min <= 1.0:
            raise SettingsError(f"draft_p_min must be between 0 and 1, got {self.draft_p_min}")
        if not 1 <= self.ngram_size_n <= 1024:
            raise SettingsError(f"ngram_size_n must be between 1 and 1024, got {self.ngram_size_n}")
        if not 1 <= self.ngram_size_m <= k_limit:
            raise SettingsError(f"ngram_size_m must be between 1 and {k_limit}, got {self.ngram_size_m}")
        if not 1 <= self.ngram_min_hits <= 32767:
            raise SettingsError(f"ngram_min_hits must be between 1 and 32767, got {self.ngram_min_hits}")
        if not 1 <= self.ngram_mod_n_max <= k_limit:
            raise SettingsError(f"ngram_mod_n_max must be between 1 and {k_limit}, got {self.ngram_mod_n_max}")
        if not 0 <= self.ngram_mod_n_min <= self.ngram_mod_n_max:
            raise SettingsError("ngram_mod_n_min must be between 0 and ngram_mod_n_max")
        if not 1 <= self.ngram_mod_n_match <= 1024:
            raise SettingsError("ngram_mod_n_match must be between 1 and 1024")
        return self


@dataclass(frozen=True)
class SamplingSettings:
    temp: float = 0.0
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    seed: int = RANDOM_SEED

    @property
    def repeatable(self) -> bool:
        """Whether two runs draw the same tokens: greedy sampling, or a fixed seed (llama-server seeds
        each request's sampler with it, specrt each generation's)."""
        return self.temp == 0 or self.seed != RANDOM_SEED

    def validate(self) -> SamplingSettings:
        if not 0.0 <= self.temp <= 100.0:
            raise SettingsError(f"temp must be between 0 and 100, got {self.temp}")
        if self.top_k < 0:
            raise SettingsError(f"top_k must be >= 0, got {self.top_k}")
        if not 0.0 < self.top_p <= 1.0:
            raise SettingsError(f"top_p must be in (0, 1], got {self.top_p}")
        if not 0.0 <= self.min_p <= 1.0:
            raise SettingsError(f"min_p must be in [0, 1], got {self.min_p}")
        if not 0 <= self.seed <= 0xFFFFFFFF:
            raise SettingsError("seed must fit in 32 bits")
        return self


def to_dict(obj: Any) -> dict:
    d = asdict(obj)
    return {k: (str(v) if isinstance(v, Path) else v) for k, v in d.items()}


def from_dict(cls: type, data: dict) -> Any:
    """Build a settings object from a dict, refusing unknown keys with their names."""
    names = {f.name for f in fields(cls)}
    unknown = set(data) - names
    if unknown:
        raise SettingsError(f"unknown {cls.__name__} field(s): {', '.join(sorted(unknown))}")
    kwargs = dict(data)
    for key in ("target", "draft"):
        if key in kwargs and kwargs[key] is not None:
            kwargs[key] = Path(kwargs[key])
    try:
        return cls(**kwargs)
    except TypeError as exc:
        raise SettingsError(str(exc)) from exc


def updated(obj: Any, changes: dict) -> Any:
    names = {f.name for f in fields(obj)}
    unknown = set(changes) - names
    if unknown:
        raise SettingsError(f"unknown setting(s): {', '.join(sorted(unknown))}")
    return replace(obj, **changes)


__all__ = [
    "LoadSettings",
    "SpecSettings",
    "SamplingSettings",
    "SettingsError",
    "SPEC_TYPES",
    "parse_spec_types",
    "LEARNS_ACROSS_REQUESTS",
    "to_dict",
    "from_dict",
    "updated",
]
