"""The catalog of model families, GGUF files, draft pairings and presets (resources/catalog/).

The catalog is data, not code: resources/catalog/README.md describes its files.
This module reads them, checks every entry, and answers questions about them:

  catalog = load_catalog()
  catalog.preset("qwen2.5-coder-7b+0.5b-q4km")     -> Preset(target=ModelFile, draft=ModelFile)
  catalog.model_file("qwen2.5-7b-instruct", "Q4_K_M") -> ModelFile(repo, filename, ...)
  catalog.tokenizer("phi-3")                          -> Tokenizer(vocab_gguf="ggml-vocab-phi-3.gguf", ...)

Any fault in a file becomes one CatalogError that names the file and the entry,
so a broken edit is found at load time and not when someone clicks a preset.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.core.paths import RESOURCES_DIR
from engine.models.draft_heads import HEAD_ARCHITECTURES
from engine.models.tensor_layout import HYBRID_ARCHITECTURES, ArchitectureNumbers, parameter_count

CATALOG_DIR = RESOURCES_DIR / "catalog"
FORMAT_VERSION = 1
# a repo value for files shipped in resources/models instead of fetched from the hub
BUNDLED = "bundled"
BUNDLED_DIR = RESOURCES_DIR / "models"

_ID = re.compile(r"^[a-z0-9][a-z0-9._+-]*$")
_REPO = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


class CatalogError(ValueError):
    """A catalog file is missing, unreadable or inconsistent, or a name is not in it; the message says where."""


# -- what the catalog holds ----------------------------------------------------------------


@dataclass(frozen=True)
class Quant:
    """One llama.cpp quantization type, as tools/quantize/quantize.cpp describes it."""

    name: str  # llama-quantize's name: Q4_K_M, Q8_0, F16
    weight_type: str  # ggml type of most weight matrices (Q4_K for Q4_K_M)
    bits_per_weight: float  # average over the whole file of the reference model
    ppl_increase: float | None  # perplexity increase on the reference model (None: not published)
    reference: str  # what the two numbers were measured on, e.g. "Llama-3-8B"
    quantize_comment: str  # the comment of QUANT_OPTIONS, verbatim


@dataclass(frozen=True)
class Family:
    id: str
    name: str
    vendor: str
    tokenizer: str  # models with the same tokenizer id can draft for each other
    license: str
    notes: str = ""


@dataclass(frozen=True)
class Tokenizer:
    """A tokenizer id of the catalog (tokenizers.json): models that share it can draft for each other."""

    id: str
    name: str
    vocab_gguf: str | None  # the pinned llama.cpp's models/ggml-vocab-*.gguf holding this vocabulary, if one does
    vocab_source: str = ""  # the model that file was made from
    nearest_gguf: str | None = None  # a vocabulary file of the same lineage that is not this tokenizer
    notes: str = ""


@dataclass(frozen=True, kw_only=True)
class Architecture(ArchitectureNumbers):
    """A catalog model's decoder: its numbers as its config.json / GGUF header state them (the fields of
    engine.models.tensor_layout.ArchitectureNumbers, which lays its tensors out) and the published parameter
    count. resources/catalog/README.md gives each field's config.json key; a hybrid's delta-net sizes and
    Gemma 4's per-layer shapes are written as the "hybrid" and "gemma4" objects of a catalog entry."""

    params: int  # parameter count (of the language model; vision towers excluded)

    @property
    def is_moe(self) -> bool:
        return self.n_expert > 0

    def estimated_params(self) -> int:
        """Parameters of a decoder with these numbers (norms and biases left out); an MoE model counts every
        expert, a hybrid one its delta-net layers as such; an MTP block is not counted."""
        return parameter_count(self)

    def estimated_active_params(self) -> int:
        """The parameters one token passes through: the used experts only, and the output matrix but not the
        input embeddings (a row is looked up, not multiplied). Equal to estimated_params less the input
        embeddings for a dense model."""
        return parameter_count(self, per_token=True)

    @property
    def active_params(self) -> int:
        """The parameters a token uses: for an MoE model the published count scaled by the share of it a token
        passes through (estimated_active_params / estimated_params), and so for a model with per-layer
        embeddings (Gemma 4 E2B: 4.6B in the file, 2.3B a token reads); for other dense models the published
        count."""
        if not self.is_moe and not self.n_embd_per_layer:
            return self.params
        return round(self.params * self.estimated_active_params() / self.estimated_params())


@dataclass(frozen=True)
class Model:
    id: str
    family: str
    name: str
    hf_model: str  # the original (unquantized) repository, where the numbers come from ("" if none)
    architecture: Architecture
    repo: str  # the GGUF repository on the hub, or BUNDLED
    files: Mapping[str, str]  # quant name -> file name in repo
    sizes: Mapping[str, int]  # quant name -> exact file size in bytes, where known
    sha256: Mapping[str, str]  # quant name -> sha256 of the file, where known
    checked: tuple[str, ...]  # quants whose file name was seen in a public listing of the repo
    tokenizer: str = ""  # the family's tokenizer unless the model says otherwise
    notes: str = ""

    @property
    def quants(self) -> tuple[str, ...]:
        return tuple(self.files)

    @property
    def is_draft_head(self) -> bool:
        """An EAGLE-3 or DFlash draft file: it drafts only through its own method, never as a plain draft
        model (draft-simple) and never as a target."""
        return self.architecture.architecture in HEAD_ARCHITECTURES


@dataclass(frozen=True)
class Speedup:
    """A published measurement of this pair: decode speed with the draft over without it."""

    speedup: float
    setup: str  # hardware, quants, settings as the source states them
    source: str  # URL


@dataclass(frozen=True)
class Pairing:
    target: str
    draft: str
    speedups: tuple[Speedup, ...] = ()
    notes: str = ""


@dataclass(frozen=True)
class ModelFile:
    """One GGUF file to fetch: what `spectune pull` downloads and the library looks for."""

    model: str  # catalog model id
    quant: str  # quant name (Q4_K_M, F16, ...)
    repo: str  # Hugging Face repository, or BUNDLED
    filename: str  # path inside the repository
    size_bytes: int | None  # exact size when the catalog knows it
    sha256: str | None  # expected sha256 when the catalog knows it

    @property
    def bundled(self) -> bool:
        return self.repo == BUNDLED

    @property
    def bundled_path(self) -> Path | None:
        """Where a bundled file lives (resources/models); None for hub files."""
        return BUNDLED_DIR / self.filename if self.bundled else None


@dataclass(frozen=True)
class Preset:
    name: str
    description: str
    target: ModelFile
    draft: ModelFile


@dataclass(frozen=True)
class Catalog:
    families: tuple[Family, ...]
    models: tuple[Model, ...]
    presets: tuple[Preset, ...]
    quants: tuple[Quant, ...] = ()
    pairings: tuple[Pairing, ...] = ()
    path: Path | None = None
    tokenizers: tuple[Tokenizer, ...] = ()
    _index: dict = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._index.update(
            family={f.id: f for f in self.families},
            model={m.id: m for m in self.models},
            preset={p.name: p for p in self.presets},
            quant={q.name: q for q in self.quants},
            tokenizer={t.id: t for t in self.tokenizers},
        )

    def _get(self, kind: str, key: str) -> Any:
        table = self._index[kind]
        if key not in table:
            raise CatalogError(f"no {kind} {key!r} in the catalog; known: {', '.join(table) or 'none'}")
        return table[key]

    def family(self, family_id: str) -> Family:
        return self._get("family", family_id)

    def model(self, model_id: str) -> Model:
        return self._get("model", model_id)

    def quant(self, name: str) -> Quant:
        return self._get("quant", name)

    def preset(self, name: str) -> Preset:
        return self._get("preset", name)

    def model_file(self, model_id: str, quant: str) -> ModelFile:
        m = self.model(model_id)
        if quant not in m.files:
            raise CatalogError(f"model {model_id!r} has no {quant} file in the catalog; known: {', '.join(m.files)}")
        return ModelFile(m.id, quant, m.repo, m.files[quant], m.sizes.get(quant), m.sha256.get(quant))

    def tokenizer_of(self, model_id: str) -> str:
        return self.model(model_id).tokenizer

    def tokenizer(self, tokenizer_id: str) -> Tokenizer:
        return self._get("tokenizer", tokenizer_id)

    def drafts_for(self, target_id: str) -> list[Model]:
        """Catalog models that can draft for the target as plain draft models (draft-simple): same tokenizer,
        fewer parameters, no draft heads, smallest first."""
        target = self.model(target_id)
        tokenizer = target.tokenizer
        return sorted(
            (
                m
                for m in self.models
                if m.tokenizer == tokenizer
                and m.architecture.params < target.architecture.params
                and not m.is_draft_head
            ),
            key=lambda m: m.architecture.params,
        )

    def pairing(self, target_id: str, draft_id: str) -> Pairing | None:
        return next((p for p in self.pairings if p.target == target_id and p.draft == draft_id), None)


# -- reading and checking ---------------------------------------------------------------------


class _Entry:
    """Reads the fields of one JSON object and reports faults with the file and entry named."""

    def __init__(self, data: Any, where: str):
        if not isinstance(data, dict):
            raise CatalogError(f"{where}: expected an object, found {type(data).__name__}")
        self.data, self.where = data, where
        self.used: set[str] = set()

    def fail(self, message: str) -> CatalogError:
        return CatalogError(f"{self.where}: {message}")

    def get(self, key: str, kind: type | tuple[type, ...], default: Any = ..., check=None) -> Any:
        self.used.add(key)
        if key not in self.data:
            if default is ...:
                raise self.fail(f"missing {key!r}")
            return default
        value = self.data[key]
        kinds = kind if isinstance(kind, tuple) else (kind,)
        # JSON has no separate bool: true must not pass for a number, 3 may pass for a float
        ok = isinstance(value, kinds) and not (isinstance(value, bool) and bool not in kinds)
        if not ok and float in kinds and isinstance(value, int) and not isinstance(value, bool):
            ok, value = True, float(value)
        if not ok:
            names = " or ".join(k.__name__ for k in kinds)
            raise self.fail(f"{key!r} must be {names}, found {json.dumps(value)}")
        if check is not None:
            problem = check(value)
            if problem:
                raise self.fail(f"{key!r} {problem}, found {json.dumps(value)}")
        return value

    def done(self) -> None:
        unknown = sorted(set(self.data) - self.used)
        if unknown:
            raise self.fail(f"unknown key{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))}")


def _named_entries(
    top: _Entry, list_key: str, path: Path, kind: str, key: str, check: Callable[[str], str | None]
) -> Iterator[tuple[_Entry, str]]:
    """Each object of top's list list_key as an _Entry named after its own `key` field (a quant, a tokenizer,
    a preset), with that name; a name given twice is a fault."""
    seen: set[str] = set()
    for i, raw in enumerate(top.get(list_key, list)):
        e = _Entry(raw, f"{path}: {list_key}[{i}]")
        name = e.get(key, str, check=check)
        e.where = f"{path}: {kind} {name!r}"
        if name in seen:
            raise e.fail(f"the {key} is used twice")
        seen.add(name)
        yield e, name


def _positive(value: Any) -> str | None:
    return None if value > 0 else "must be positive"


def _identifier(value: str) -> str | None:
    return None if _ID.match(value) else "must be lower case letters, digits and . _ + -"


def _url(value: str) -> str | None:
    return None if re.match(r"^https?://\S+$", value) else "must be an http(s) URL"


def _nonempty(value: str) -> str | None:
    return None if value.strip() else "must not be empty"


def _read_json(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise CatalogError(f"{path}: catalog file missing") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise CatalogError(f"{path}: cannot read it ({exc})") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise CatalogError(f"{path}: not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}") from None


def _check_format(doc: Any, path: Path) -> _Entry:
    top = _Entry(doc, str(path))
    version = top.get("format", int)
    if version != FORMAT_VERSION:
        raise top.fail(f"format {version} is not one this SpecTune reads (it reads {FORMAT_VERSION})")
    top.get("comment", str, "")
    return top


def _quants(path: Path) -> list[Quant]:
    top = _check_format(_read_json(path), path)
    out = []
    for e, name in _named_entries(top, "quants", path, "quant", "name", _nonempty):
        q = Quant(
            name=name,
            weight_type=e.get("weight_type", str, check=_nonempty),
            bits_per_weight=e.get("bits_per_weight", float, check=_positive),
            ppl_increase=e.get("ppl_increase", (float, type(None)), None),
            reference=e.get("reference", str, ""),
            quantize_comment=e.get("quantize_comment", str, ""),
        )
        if q.bits_per_weight > 32:
            raise e.fail(f"'bits_per_weight' {q.bits_per_weight} is more than f32's 32")
        e.done()
        out.append(q)
    top.done()
    return out


_MOE_KEYS = ("n_expert", "n_expert_used", "n_ff_exp")
_HYBRID_KEYS = (
    "full_attention_interval",
    "ssm_conv_kernel",
    "ssm_state_size",
    "ssm_group_count",
    "ssm_time_step_rank",
    "ssm_inner_size",
)
_HYBRID_ARCHS = tuple(sorted(HYBRID_ARCHITECTURES))


def _hybrid(raw: Any, where: str) -> dict[str, Any]:
    e = _Entry(raw, where)
    hybrid: dict[str, Any] = {key: e.get(key, int, check=_positive) for key in _HYBRID_KEYS}
    e.done()
    return hybrid


_GEMMA4_ARCHS = ("gemma4",)


def _gemma4(raw: Any, where: str, numbers: dict[str, int]) -> dict[str, Any]:
    e = _Entry(raw, where)
    layers: dict[str, Any] = {
        **{key: e.get(key, int, check=_positive) for key in ("global_every", "head_dim_global", "n_head_kv_global")},
        **{key: e.get(key, int, 0, check=_positive) for key in ("shared_kv_layers", "n_embd_per_layer")},
        "k_eq_v": e.get("k_eq_v", bool, False),
        "double_wide_ffn": e.get("double_wide_ffn", bool, False),
    }
    n_layer, every, shared = numbers["n_layer"], layers["global_every"], layers["shared_kv_layers"]
    # transformers forces the last layer global and llama.cpp reads the pattern as written: a depth that
    # ends on a sliding layer is a mistyped period or depth
    if n_layer % every:
        raise e.fail(f"the last of {n_layer} layers must be global; global_every {every} makes it sliding")
    if numbers["n_head"] % layers["n_head_kv_global"]:
        raise e.fail(f"n_head {numbers['n_head']} is not a multiple of n_head_kv_global {layers['n_head_kv_global']}")
    # the shared layers read the last sliding and the last global layer before them: both must exist
    if n_layer - shared < every:
        raise e.fail(
            f"shared_kv_layers {shared} leaves fewer than global_every {every} "
            "layers with a cache of their own, so no global layer keeps one"
        )
    if layers["double_wide_ffn"] and not shared:
        raise e.fail("double_wide_ffn widens the shared-KV layers' FFN: it needs shared_kv_layers")
    e.done()
    return layers


def _architecture(raw: Any, where: str) -> Architecture:
    e = _Entry(raw, where)
    numbers = {
        key: e.get(key, int, check=_positive)
        for key in ("n_layer", "n_embd", "n_head", "n_head_kv", "head_dim", "n_ff", "n_vocab", "n_ctx_train", "params")
    }
    moe = {key: e.get(key, int, 0, check=_positive) for key in _MOE_KEYS}
    # the catalog's "llama_arch" is general.architecture; "hybrid" and "gemma4" group their architecture's
    # own numbers, which the Architecture holds beside the others
    llama_arch = e.get("llama_arch", str, check=_nonempty)
    raw_hybrid = e.get("hybrid", (dict, type(None)), None)
    raw_gemma4 = e.get("gemma4", dict, None)
    if (raw_hybrid is not None) != (llama_arch in _HYBRID_ARCHS):
        raise e.fail(
            f"'hybrid' (the delta-net sizes) is needed for, and only for, {', '.join(_HYBRID_ARCHS)}; "
            f"this model is {llama_arch}"
        )
    if (raw_gemma4 is not None) != (llama_arch in _GEMMA4_ARCHS):
        raise e.fail(
            f"'gemma4' (the per-layer shapes) is needed for, and only for, {', '.join(_GEMMA4_ARCHS)}; "
            f"this model is {llama_arch}"
        )
    arch = Architecture(
        architecture=llama_arch,
        tied_embeddings=e.get("tied_embeddings", bool),
        sliding_window=e.get("sliding_window", (int, type(None)), None),
        n_ff_shared=e.get("n_ff_shared", int, 0, check=_positive),
        nextn_layers=e.get("nextn_layers", int, 0, check=_positive),
        **({} if raw_hybrid is None else _hybrid(raw_hybrid, f"{where}: hybrid")),
        **({} if raw_gemma4 is None else _gemma4(raw_gemma4, f"{where}: gemma4", numbers)),
        **numbers,
        **moe,
    )
    if raw_gemma4 is not None and not arch.sliding_window:
        raise e.fail("a gemma4 model needs its 'sliding_window' (config.json's sliding_window)")
    if arch.n_ff_shared and not arch.is_moe:
        raise e.fail("n_ff_shared (a shared expert) needs a mixture of experts")
    if arch.n_head % arch.n_head_kv:
        raise e.fail(f"n_head {arch.n_head} is not a multiple of n_head_kv {arch.n_head_kv}")
    given = [key for key in _MOE_KEYS if key in e.data]
    if given and len(given) != len(_MOE_KEYS):
        missing = ", ".join(repr(k) for k in _MOE_KEYS if k not in given)
        raise e.fail(f"a mixture of experts needs {', '.join(map(repr, _MOE_KEYS))}; missing {missing}")
    if arch.n_expert_used > arch.n_expert:
        raise e.fail(f"n_expert_used {arch.n_expert_used} is more than n_expert {arch.n_expert}")
    e.done()
    return arch


def _model(raw: Any, where: str, family: Family, quant_names: set[str]) -> Model:
    e = _Entry(raw, where)
    model_id = e.get("id", str, check=_identifier)
    e.where = f"{where} (model {model_id!r})"
    name = e.get("name", str, check=_nonempty)
    hf_model = e.get("hf_model", str, "", check=lambda v: None if not v or _REPO.match(v) else "must be owner/name")
    tokenizer = e.get("tokenizer", str, family.tokenizer, check=_identifier)
    architecture = _architecture(e.get("arch", dict), f"{e.where}: arch")
    g = _Entry(e.get("gguf", dict), f"{e.where}: gguf")
    repo = g.get(
        "repo",
        str,
        check=lambda v: None if v == BUNDLED or _REPO.match(v) else f"must be owner/name on the hub or {BUNDLED!r}",
    )
    pattern = g.get("file_pattern", str, "")
    quants = g.get("quants", list)
    overrides = g.get("files", dict, {})
    files: dict[str, str] = {}
    for q in quants:
        if not isinstance(q, str) or q not in quant_names:
            raise g.fail(f"quant {json.dumps(q)} is not in quants.json")
        if q in files:
            raise g.fail(f"quant {q} is listed twice")
        if q in overrides:
            files[q] = overrides[q]
        elif pattern:
            try:
                files[q] = pattern.format(quant=q, quant_lower=q.lower())
            except (KeyError, IndexError, ValueError):
                raise g.fail(f"'file_pattern' {pattern!r} may only use {{quant}} and {{quant_lower}}") from None
        else:
            raise g.fail(f"no file name for {q}: give 'file_pattern' or files[{q!r}]")
        if not isinstance(files[q], str) or not files[q].endswith(".gguf"):
            raise g.fail(f"the {q} file name {json.dumps(files[q])} does not end in .gguf")
    if not files:
        raise g.fail("'quants' is empty")
    for key, label in (("sizes", "sizes"), ("sha256", "sha256"), ("files", "files")):
        table = overrides if key == "files" else g.get(key, dict, {})
        for q, value in table.items():
            if q not in files:
                raise g.fail(f"{label}[{q!r}] is for a quant not in 'quants'")
            if key == "sizes" and (not isinstance(value, int) or isinstance(value, bool) or value <= 0):
                raise g.fail(f"sizes[{q!r}] must be a positive byte count, found {json.dumps(value)}")
            if key == "sha256" and (not isinstance(value, str) or not _SHA256.match(value)):
                raise g.fail(f"sha256[{q!r}] must be 64 lower-case hex digits")
    checked = g.get("checked", list, [])
    for q in checked:
        if q not in files:
            raise g.fail(f"checked quant {json.dumps(q)} is not in 'quants'")
    g.get("checked_source", str, "", check=lambda v: None if not v else _url(v))
    sizes, sha = g.data.get("sizes", {}), g.data.get("sha256", {})
    g.done()
    model = Model(
        id=model_id,
        family=family.id,
        name=name,
        hf_model=hf_model,
        architecture=architecture,
        repo=repo,
        files=files,
        sizes=dict(sizes),
        sha256=dict(sha),
        checked=tuple(checked),
        tokenizer=tokenizer,
        notes=e.get("notes", str, ""),
    )
    e.get("config_source", str, "", check=lambda v: None if not v else _url(v))
    e.done()
    return model


def _speedup(raw: Any, where: str) -> Speedup:
    e = _Entry(raw, where)
    s = Speedup(
        speedup=e.get("speedup", float, check=_positive),
        setup=e.get("setup", str, check=_nonempty),
        source=e.get("source", str, check=_url),
    )
    e.done()
    return s


def _family_file(path: Path, quant_names: set[str]) -> tuple[Family, list[Model], list[Pairing]]:
    top = _check_format(_read_json(path), path)
    f = _Entry(top.get("family", dict), f"{path}: family")
    family = Family(
        id=f.get("id", str, check=_identifier),
        name=f.get("name", str, check=_nonempty),
        vendor=f.get("vendor", str, ""),
        tokenizer=f.get("tokenizer", str, check=_identifier),
        license=f.get("license", str, ""),
        notes=f.get("notes", str, ""),
    )
    f.done()
    raw_models = top.get("models", list)
    if not raw_models:
        raise top.fail("'models' is empty")
    models = [_model(raw, f"{path}: models[{i}]", family, quant_names) for i, raw in enumerate(raw_models)]
    pairings = []
    for i, raw in enumerate(top.get("pairings", list, [])):
        e = _Entry(raw, f"{path}: pairings[{i}]")
        pairings.append(
            Pairing(
                target=e.get("target", str),
                draft=e.get("draft", str),
                speedups=tuple(
                    _speedup(s, f"{path}: pairings[{i}].speedups[{j}]")
                    for j, s in enumerate(e.get("speedups", list, []))
                ),
                notes=e.get("notes", str, ""),
            )
        )
        e.done()
    top.done()
    return family, models, pairings


def load_catalog(path: str | Path | None = None) -> Catalog:
    """Read and check the catalog in a folder (default resources/catalog).

    The folder holds quants.json, presets.json and families/*.json (one family each).
    """
    root = Path(path) if path is not None else CATALOG_DIR
    if not root.is_dir():
        raise CatalogError(f"{root}: catalog folder missing")
    quants = _quants(root / "quants.json")
    quant_names = {q.name for q in quants}
    if len(quant_names) != len(quants):
        raise CatalogError(f"{root / 'quants.json'}: a quant name is listed twice")

    family_files = sorted((root / "families").glob("*.json"))
    if not family_files:
        raise CatalogError(f"{root / 'families'}: no family files (*.json)")
    families: list[Family] = []
    models: list[Model] = []
    pairings: list[tuple[Pairing, Path]] = []  # with the file each came from
    seen_models: dict[str, Path] = {}
    seen_families: dict[str, Path] = {}
    for file in family_files:
        family, file_models, file_pairings = _family_file(file, quant_names)
        if family.id in seen_families:
            raise CatalogError(f"{file}: family {family.id!r} is already defined in {seen_families[family.id]}")
        seen_families[family.id] = file
        for m in file_models:
            if m.id in seen_models:
                raise CatalogError(f"{file}: model {m.id!r} is already defined in {seen_models[m.id]}")
            seen_models[m.id] = file
        families.append(family)
        models += file_models
        pairings += [(p, file) for p in file_pairings]

    tokenizer = {m.id: m.tokenizer for m in models}
    by_id = {m.id: m for m in models}
    checked_pairings = []
    for p, file in pairings:
        _check_pair(p.target, p.draft, by_id, tokenizer, f"{file}: pairing {p.target} + {p.draft}")
        checked_pairings.append(p)

    presets = _presets(root / "presets.json", by_id, tokenizer)
    tokenizers = _tokenizers(root / "tokenizers.json")
    declared = {t.id for t in tokenizers}
    for m in models:
        if m.tokenizer not in declared:
            raise CatalogError(
                f"{seen_models[m.id]}: model {m.id!r} uses the tokenizer {m.tokenizer!r}, which "
                f"{root / 'tokenizers.json'} does not declare"
            )
    return Catalog(
        tuple(families),
        tuple(models),
        tuple(presets),
        tuple(quants),
        tuple(checked_pairings),
        root,
        tuple(tokenizers),
    )


_VOCAB_FILE = re.compile(r"^ggml-vocab-[a-z0-9.-]+\.gguf$")


def _vocab_file(value: str | None) -> str | None:
    if value is None or _VOCAB_FILE.match(value):
        return None
    return "must be a file name ggml-vocab-<name>.gguf (the pinned llama.cpp's models/ folder) or null"


def _tokenizers(path: Path) -> list[Tokenizer]:
    top = _check_format(_read_json(path), path)
    out: list[Tokenizer] = []
    for e, tokenizer_id in _named_entries(top, "tokenizers", path, "tokenizer", "id", _identifier):
        t = Tokenizer(
            id=tokenizer_id,
            name=e.get("name", str, check=_nonempty),
            vocab_gguf=e.get("vocab_gguf", (str, type(None)), check=_vocab_file),
            vocab_source=e.get("vocab_source", str, ""),
            nearest_gguf=e.get("nearest_gguf", (str, type(None)), None, check=_vocab_file),
            notes=e.get("notes", str, ""),
        )
        if t.vocab_gguf and not t.vocab_source:
            raise e.fail(f"'vocab_source' must say which model {t.vocab_gguf} was made from")
        e.done()
        out.append(t)
    top.done()
    return out


def _check_pair(target: str, draft: str, by_id: dict[str, Model], tokenizer: dict[str, str], where: str) -> None:
    for role, model_id in (("target", target), ("draft", draft)):
        if model_id not in by_id:
            raise CatalogError(f"{where}: {role} {model_id!r} is not a model in the catalog")
        if by_id[model_id].is_draft_head:
            raise CatalogError(
                f"{where}: the {role} {model_id!r} is a draft head ({by_id[model_id].architecture.architecture}), "
                "which llama.cpp runs only through its own method; pairings and presets pair plain models"
            )
    if tokenizer[target] != tokenizer[draft]:
        raise CatalogError(
            f"{where}: the draft's tokenizer {tokenizer[draft]!r} is not the target's "
            f"{tokenizer[target]!r}; llama.cpp would refuse the pair"
        )
    if by_id[draft].architecture.params >= by_id[target].architecture.params:
        raise CatalogError(f"{where}: the draft is not smaller than the target")


def _presets(path: Path, by_id: dict[str, Model], tokenizer: dict[str, str]) -> list[Preset]:
    top = _check_format(_read_json(path), path)
    out: list[Preset] = []
    for e, name in _named_entries(top, "presets", path, "preset", "name", _identifier):
        description = e.get("description", str, check=_nonempty)
        files = {}
        for role in ("target", "draft"):
            model_id, quant = e.get(role, str), e.get(f"{role}_quant", str)
            if model_id not in by_id:
                raise e.fail(f"{role} {model_id!r} is not a model in the catalog")
            m = by_id[model_id]
            if quant not in m.files:
                raise e.fail(f"{role} {model_id!r} has no {quant} file; known: {', '.join(m.files)}")
            files[role] = ModelFile(m.id, quant, m.repo, m.files[quant], m.sizes.get(quant), m.sha256.get(quant))
        _check_pair(files["target"].model, files["draft"].model, by_id, tokenizer, e.where)
        e.done()
        out.append(Preset(name, description, files["target"], files["draft"]))
    top.done()
    return out
