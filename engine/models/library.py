"""The GGUF files already on this machine, wherever the usual tools put them, and which of them pair up.

Places looked in (each can be moved by the environment variable its tool reads):

  huggingface  $HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub: models--ORG--NAME/
               snapshots/COMMIT/FILE links into blobs/ (huggingface_hub, llama.cpp's -hf, spectune pull)
  lmstudio     ~/.lmstudio/models and ~/.cache/lm-studio/models: PUBLISHER/REPO/FILE.gguf
  llama.cpp    $LLAMA_CACHE, else the platform cache folder + llama.cpp (flat files, or the HF layout)
  ollama       $OLLAMA_MODELS, else ~/.ollama/models: manifests/HOST/NAMESPACE/MODEL/TAG name a blob
               (the layer with mediaType application/vnd.ollama.image.model), stored as blobs/sha256-HEX
  user         folders added with ``spectune models --add DIR``, kept in library.json in the data folder
  bundled      the demo pair SpecTune ships (resources/models, engine.models.demo_models)

Split models (NAME-00001-of-00003.gguf) are listed once, by their first part, with the size of all
parts; downloads in progress (*.incomplete and the like) are not GGUF-named and are never listed. A file
that cannot be read is listed with its error; the scan goes on.

Compatibility is llama.cpp's draft/target rule (engine.models.compat), which depends only on the vocabulary.
Files are grouped by what that rule reads (vocab fingerprint, type, size, BOS/EOS); the rule runs once
per pair of groups, on one representative each, so a library of a hundred files costs a hundred header
reads, not ten thousand comparisons. What was learnt is kept in library-cache.json in the data folder
(per file: path, size and modification time; per pair of vocabularies: the verdict), so scanning an
unchanged library again opens no file at all.

Draft heads are not models: an EAGLE-3 or DFlash draft file is listed as such (``LocalModel.kind``,
engine.models.draft_heads) and takes part in no pair, since llama.cpp runs it only through its own
method; a model with an MTP head is said to need no separate draft.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from engine.core.paths import data_dir
from engine.models.compat import SPEC_VOCAB_MAX_SIZE_DIFFERENCE, vocab_compatibility
from engine.models.demo_models import MODELS_DIR as BUNDLED_DIR
from engine.models.draft_heads import HEAD_METHODS, kind_label
from engine.models.gguf_inspect import VocabInfo, file_type_name, inspect_gguf

STORE_NAME = "library.json"
OLLAMA_MODEL_MEDIA_TYPE = "application/vnd.ollama.image.model"
OLLAMA_DEFAULT_HOST = "registry.ollama.ai"

_SPLIT = re.compile(r"^(?P<stem>.+)-(?P<part>\d{5})-of-(?P<count>\d{5})\.gguf$", re.IGNORECASE)
_QUANT_IN_NAME = re.compile(
    r"(?<![A-Za-z0-9])(I?Q\d(?:_[A-Z0-9]+)*|BF16|F16|F32|FP16|FP8)(?![A-Za-z0-9])", re.IGNORECASE
)
# draft heads that speculate through their own llama.cpp types, never as a plain draft model
_NOT_PLAIN_MODELS = set(HEAD_METHODS)


class LibraryError(ValueError):
    """A folder cannot be added or removed; the message says why."""


@dataclass(frozen=True)
class Source:
    kind: str  # huggingface | lmstudio | llama.cpp | ollama | user | bundled
    path: Path


@dataclass
class LocalModel:
    name: str  # org/repo:file.gguf, an Ollama model:tag, or the path under its folder
    path: str  # the file to load (the first part of a split model)
    source: str
    source_path: str
    size_bytes: int  # every part of a split model
    repo: str | None = None  # the hub repository (Hugging Face cache)
    aliases: list[str] = field(default_factory=list)  # more names for the same file (Ollama tags)
    split_parts: int | None = None
    architecture: str | None = None
    family: str | None = None
    size_label: str | None = None  # general.size_label, e.g. "0.5B"
    quant: str | None = None
    parameter_count: int | None = None
    vocab_fingerprint: str | None = None
    speculative_role: str | None = None
    error: str | None = None
    compatible_with: list[str] = field(default_factory=list)  # paths of the files it can pair with

    @property
    def kind(self) -> str | None:
        """ "EAGLE-3 draft (...)", "has an MTP head — no separate draft needed (...)"; None for a plain model."""
        return kind_label(self)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "kind": self.kind}


@dataclass
class Library:
    sources: list[dict[str, Any]]  # kind, path, exists, files
    models: list[LocalModel]
    pairs: list[dict[str, str]]  # target/draft paths and names, the draft the smaller model

    def to_dict(self) -> dict[str, Any]:
        return {"sources": self.sources, "models": [m.to_dict() for m in self.models], "pairs": self.pairs}


# -- where to look -----------------------------------------------------------------------------


def store_path() -> Path:

    return data_dir() / STORE_NAME


def user_folders(store: Path | None = None) -> list[Path]:
    store = store or store_path()
    try:
        data = json.loads(store.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return []
    except (OSError, ValueError) as exc:
        raise LibraryError(f"the library's folder list {store} cannot be read ({exc})") from None
    folders = data.get("folders", []) if isinstance(data, dict) else []
    return [Path(f) for f in folders if isinstance(f, str)]


def _save(folders: list[Path], store: Path) -> None:
    store.parent.mkdir(parents=True, exist_ok=True)
    tmp = store.with_name(store.name + ".tmp")
    tmp.write_text(json.dumps({"folders": [str(f) for f in folders]}, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, store)  # a crash mid-write never leaves half a list


def add_folder(folder: str | Path, store: Path | None = None) -> Path:
    store = store or store_path()
    path = Path(folder).expanduser().resolve()
    if not path.is_dir():
        raise LibraryError(f"{folder} is not a folder")
    folders = user_folders(store)
    if path not in folders:
        _save([*folders, path], store)
    return path


def remove_folder(folder: str | Path, store: Path | None = None) -> Path:
    store = store or store_path()
    folders = user_folders(store)
    path = Path(folder).expanduser()
    for candidate in (path, path.resolve()):
        if candidate in folders:
            _save([f for f in folders if f != candidate], store)
            return candidate
    known = ", ".join(str(f) for f in folders) or "none"
    raise LibraryError(f"{folder} is not in the library's folders (added: {known})")


def _platform_cache(env: Mapping[str, str], home: Path) -> Path:
    if sys.platform == "win32":
        return Path(env.get("LOCALAPPDATA") or home / "AppData" / "Local")
    if sys.platform == "darwin":
        return home / "Library" / "Caches"
    return Path(env.get("XDG_CACHE_HOME") or home / ".cache")


def default_sources(
    env: Mapping[str, str] | None = None, home: Path | None = None, store: Path | None = None
) -> list[Source]:
    """Every place to look, from the environment (os.environ) and the home folder; duplicates dropped."""
    env = os.environ if env is None else env
    home = Path.home() if home is None else Path(home)
    xdg_cache = Path(env.get("XDG_CACHE_HOME") or home / ".cache")

    if env.get("HF_HUB_CACHE") or env.get("HUGGINGFACE_HUB_CACHE"):
        hf = Path(env.get("HF_HUB_CACHE") or env["HUGGINGFACE_HUB_CACHE"])
    elif env.get("HF_HOME"):
        hf = Path(env["HF_HOME"]) / "hub"
    else:
        hf = xdg_cache / "huggingface" / "hub"
    sources = [
        Source("huggingface", hf),
        Source("lmstudio", home / ".lmstudio" / "models"),
        Source("lmstudio", home / ".cache" / "lm-studio" / "models"),
        Source(
            "llama.cpp",
            Path(env["LLAMA_CACHE"]) if env.get("LLAMA_CACHE") else _platform_cache(env, home) / "llama.cpp",
        ),
        Source("ollama", Path(env["OLLAMA_MODELS"]) if env.get("OLLAMA_MODELS") else home / ".ollama" / "models"),
    ]
    sources += [Source("user", p) for p in user_folders(store)]
    sources.append(Source("bundled", BUNDLED_DIR))  # what SpecTune itself ships
    seen: set[Path] = set()
    unique = []
    for s in sources:
        key = s.path.expanduser().resolve()
        if key not in seen:
            seen.add(key)
            unique.append(Source(s.kind, s.path.expanduser()))
    return unique


# -- finding the files ---------------------------------------------------------------------------


@dataclass
class _Candidate:
    name: str
    path: Path
    source: Source
    repo: str | None = None
    aliases: list[str] = field(default_factory=list)
    error: str | None = None


def _is_gguf_name(name: str) -> bool:
    return name.lower().endswith(".gguf")


def _walk_gguf(root: Path) -> Iterable[Path]:
    """GGUF files under root; hidden folders (.cache, .git, partial downloads) and HF-layout repos skipped."""
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False, onerror=lambda exc: None):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and not d.startswith("models--"))
        for f in sorted(filenames):
            if _is_gguf_name(f):
                yield Path(dirpath) / f


def _hf_repo_files(root: Path, source: Source) -> list[_Candidate]:
    """models--ORG--NAME/snapshots/*/FILE.gguf; a file in several snapshots is listed once, preferring the
    snapshot refs/main points at. Links whose blob is gone (a deleted or unfinished download) are skipped."""
    found = []
    try:
        repos = sorted(p for p in root.iterdir() if p.name.startswith("models--") and p.is_dir())
    except OSError:
        return []
    for repo_dir in repos:
        parts = repo_dir.name.split("--", 2)
        repo = "/".join(parts[1:]) if len(parts) == 3 else parts[-1]
        main_commit = None
        try:
            main_commit = (repo_dir / "refs" / "main").read_text().strip()
        except OSError:
            pass
        snapshots = repo_dir / "snapshots"
        if not snapshots.is_dir():
            continue
        commits = sorted((p for p in snapshots.iterdir() if p.is_dir()), key=lambda p: p.name != main_commit)
        for commit_dir in commits:
            for path in _walk_gguf(commit_dir):
                if not path.exists():  # a link to a missing blob
                    continue
                rel = path.relative_to(commit_dir).as_posix()
                found.append(_Candidate(f"{repo}:{rel}", path, source, repo=repo))
    return found


def _folder_files(root: Path, source: Source) -> list[_Candidate]:
    return [_Candidate(p.relative_to(root).as_posix(), p, source) for p in _walk_gguf(root) if p.exists()]


def _ollama_name(rel_parts: tuple[str, ...]) -> str:
    *prefix, tag = rel_parts
    host = prefix[0] if prefix else ""
    if host == OLLAMA_DEFAULT_HOST and len(prefix) == 3 and prefix[1] == "library":
        return f"{prefix[2]}:{tag}"
    if host == OLLAMA_DEFAULT_HOST:
        return f"{'/'.join(prefix[1:])}:{tag}"
    return f"{'/'.join(prefix)}:{tag}"


def _ollama_files(root: Path, source: Source) -> list[_Candidate]:
    """Resolve every manifest to its model blob; tags that share a blob become one entry with aliases."""
    manifests = root / "manifests"
    by_blob: dict[Path, _Candidate] = {}
    broken: list[_Candidate] = []
    if not manifests.is_dir():
        return []
    for dirpath, dirnames, filenames in os.walk(manifests, onerror=lambda exc: None):
        dirnames.sort()
        for f in sorted(filenames):
            manifest = Path(dirpath) / f
            name = _ollama_name(manifest.relative_to(manifests).parts)
            try:
                data = json.loads(manifest.read_text(encoding="utf-8"))
                layers = data["layers"]
                digest = next(layer["digest"] for layer in layers if layer.get("mediaType") == OLLAMA_MODEL_MEDIA_TYPE)
            except StopIteration:
                continue  # an adapter-, projector- or template-only manifest: no model weights
            except (OSError, ValueError, KeyError, TypeError) as exc:
                broken.append(
                    _Candidate(name, manifest, source, error=f"Ollama manifest {manifest} cannot be read ({exc})")
                )
                continue
            algo, _, hex_digest = str(digest).partition(":")
            blob = root / "blobs" / f"{algo}-{hex_digest}"
            if blob in by_blob:
                by_blob[blob].aliases.append(name)
            elif not blob.is_file():
                broken.append(_Candidate(name, blob, source, error=f"Ollama blob {blob.name} of {name} is missing"))
            else:
                by_blob[blob] = _Candidate(name, blob, source)
    return [*by_blob.values(), *broken]


def _candidates(source: Source) -> list[_Candidate]:
    root = source.path
    if not root.is_dir():
        return []
    if source.kind == "ollama":
        return _ollama_files(root, source)
    if source.kind == "huggingface":
        return _hf_repo_files(root, source)
    # llama.cpp's cache holds flat files or (newer builds) the HF layout; a user's folder may hold either
    return _hf_repo_files(root, source) + _folder_files(root, source)


def _merge_splits(cands: list[_Candidate]) -> list[tuple[_Candidate, int, int | None]]:
    """-> (candidate, size of all parts, number of parts or None); later parts folded into the first."""
    groups: dict[tuple[Path, str, int], dict[int, _Candidate]] = {}
    merged: list[tuple[_Candidate, int, int | None]] = []
    for c in cands:
        m = _SPLIT.match(c.path.name) if c.error is None else None
        if not m:
            merged.append((c, _file_size(c.path), None))
            continue
        key = (c.path.parent, m["stem"], int(m["count"]))
        groups.setdefault(key, {})[int(m["part"])] = c
    for (_, _, count), parts in groups.items():
        first = parts[min(parts)]
        size = sum(_file_size(p.path) for p in parts.values())
        missing = [str(i) for i in range(1, count + 1) if i not in parts]
        if missing:
            first.error = (
                f"split model is incomplete: part{'s' if len(missing) > 1 else ''} "
                f"{', '.join(missing)} of {count} missing"
            )
        merged.append((first, size, count))
    return merged


def _file_size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _quant(file_type: int | None, filename: str) -> str | None:
    name = file_type_name(file_type)
    if name and not name.startswith("unknown"):
        return name.removeprefix("MOSTLY_").removeprefix("ALL_")
    m = _QUANT_IN_NAME.search(filename)
    return m.group(1).upper() if m else None


# -- the scan ------------------------------------------------------------------------------------

_DEFAULT_CACHE = object()
CACHE_NAME = "library-cache.json"
CACHE_VERSION = 1
_FACTS = (
    "architecture",
    "family",
    "size_label",
    "quant",
    "parameter_count",
    "vocab_fingerprint",
    "speculative_role",
    "error",
)


def cache_path() -> Path:

    return data_dir() / CACHE_NAME


def _vocab_key(v: VocabInfo) -> str:
    """Everything llama.cpp's rule reads, as one string: files with equal keys pair with the same files."""
    return json.dumps([v.fingerprint, v.vocab_type, v.n_tokens, v.add_bos, v.bos_id, v.add_eos, v.eos_id])


def _facts(path: Path, filename: str) -> tuple[dict[str, Any], VocabInfo | None]:
    """What the listing shows of one file, and its vocabulary when it can take part in a pair."""
    try:
        info = inspect_gguf(path, keep=False)  # a scan: leave the pair in use cached
    except Exception as exc:  # noqa: BLE001 - one unreadable file must never end the scan
        return {"error": str(exc) or type(exc).__name__, "quant": _quant(None, filename)}, None
    md = info.metadata
    family = md.get("general.basename") or md.get("general.name") or info.architecture
    label = md.get("general.size_label")
    v = info.vocab
    facts: dict[str, Any] = {
        "architecture": info.architecture,
        "family": family if isinstance(family, str) else info.architecture,
        "size_label": label if isinstance(label, str) else None,
        "quant": _quant(info.file_type, filename),
        "parameter_count": info.parameter_count,
        "vocab_fingerprint": v.fingerprint,
        "speculative_role": info.speculative_role,
        "error": None,
        "vocab_key": None,
    }
    plain = info.speculative_role not in _NOT_PLAIN_MODELS and info.architecture != "clip"
    if plain and v.n_tokens > 0 and v.load_error is None and v.fingerprint is not None:
        facts["vocab_key"] = _vocab_key(v)
        return facts, v
    return facts, None


class _ScanCache:
    """Facts per file (keyed by path, size and mtime) and verdicts per pair of vocabularies, kept between
    scans, so a rescan of an unchanged library opens no file. A cache that cannot be read or written is
    simply not used: it only saves time."""

    def __init__(self, path: Path | None):
        self.path = path
        self.files: dict[str, dict] = {}
        self.verdicts: dict[str, bool] = {}
        self.used: set[str] = set()
        if path is None:
            return
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            if data.get("version") == CACHE_VERSION:
                self.files, self.verdicts = dict(data["files"]), dict(data["verdicts"])
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            pass

    @staticmethod
    def _signature(path: Path) -> list[int] | None:
        try:
            st = path.stat()
        except OSError:
            return None
        return [st.st_size, st.st_mtime_ns]

    def facts(self, path: Path) -> dict | None:
        entry = self.files.get(str(path))
        if entry is not None and entry.get("signature") == self._signature(path):
            self.used.add(str(path))
            return entry["facts"]
        return None

    def put(self, path: Path, facts: dict) -> None:
        self.files[str(path)] = {"signature": self._signature(path), "facts": facts}
        self.used.add(str(path))

    @staticmethod
    def _pair(a: str, b: str) -> str:
        return "\n".join(sorted((a, b)))

    def verdict(self, a: str, b: str) -> bool | None:
        return self.verdicts.get(self._pair(a, b))

    def put_verdict(self, a: str, b: str, compatible: bool) -> None:
        self.verdicts[self._pair(a, b)] = compatible

    def save(self) -> None:
        if self.path is None:
            return
        # files of this scan, and those of earlier scans of other places that are still there
        files = {p: e for p, e in self.files.items() if p in self.used or Path(p).exists()}
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_name(self.path.name + ".tmp")
            tmp.write_text(
                json.dumps({"version": CACHE_VERSION, "files": files, "verdicts": self.verdicts}), encoding="utf-8"
            )
            os.replace(tmp, self.path)
        except OSError:
            pass


def _may_pair(a: str, b: str) -> bool:
    """The rule's cheap parts (same vocab type, sizes within 128) on two keys, before any token is compared."""
    ka, kb = json.loads(a), json.loads(b)
    return ka[1] == kb[1] and abs(ka[2] - kb[2]) <= SPEC_VOCAB_MAX_SIZE_DIFFERENCE


def scan(
    sources: list[Source] | None = None,
    *,
    cache: Any = _DEFAULT_CACHE,
    on_progress: Callable[[int, int, str], None] | None = None,
) -> Library:
    """Find, inspect (header only) and pair every GGUF in the sources (default_sources() when None).

    cache: where facts about files are kept between scans (default: library-cache.json in the data
    folder; None: no cache). on_progress(done, total, path) is called before each file is looked at.
    """
    sources = default_sources() if sources is None else sources
    store = _ScanCache(cache_path() if cache is _DEFAULT_CACHE else cache)
    entries, source_info = _gather(sources)
    found = _inspect_all(entries, store, on_progress)
    pairs = _pair_all(found, _VocabJudge(found, store))
    store.save()
    return Library(source_info, found.models, pairs)


def _gather(sources: list[Source]) -> tuple[list[tuple[_Candidate, int, int | None]], list[dict]]:
    """Every GGUF candidate of every source, each real file once; and what each source held."""
    seen: set[Path] = set()
    entries: list[tuple[_Candidate, int, int | None]] = []
    source_info = []
    for source in sources:
        found = 0
        for cand, size, parts in _merge_splits(_candidates(source)):
            real = cand.path.resolve()
            if real in seen:  # one file reached from two places (a link, an overlapping folder)
                continue
            seen.add(real)
            entries.append((cand, size, parts))
            found += 1
        source_info.append(
            {"kind": source.kind, "path": str(source.path), "exists": source.path.is_dir(), "files": found}
        )
    return entries, source_info


@dataclass
class _Found:
    """The scanned models, with their vocabulary groups (models whose token lists are identical)."""

    models: list[LocalModel] = field(default_factory=list)
    groups: dict[str, list[int]] = field(default_factory=dict)  # vocab key -> indices into models
    vocabs: dict[str, VocabInfo] = field(default_factory=dict)  # one token list per group, read when needed
    params: list[int] = field(default_factory=list)  # parameter count per model (0: unknown)


def _inspect_all(
    entries: list[tuple[_Candidate, int, int | None]],
    store: _ScanCache,
    on_progress: Callable[[int, int, str], None] | None,
) -> _Found:
    found = _Found()
    for i, (cand, size, parts) in enumerate(entries):
        if on_progress is not None:
            on_progress(i, len(entries), str(cand.path))
        model = LocalModel(
            name=cand.name,
            path=str(cand.path),
            source=cand.source.kind,
            source_path=str(cand.source.path),
            size_bytes=size,
            repo=cand.repo,
            aliases=cand.aliases,
            split_parts=parts,
            error=cand.error,
            quant=_quant(None, cand.path.name),
        )
        found.models.append(model)
        found.params.append(0)
        if cand.error is not None:
            continue
        facts = store.facts(cand.path)
        if facts is None:
            facts, vocab = _facts(cand.path, cand.path.name)
            store.put(cand.path, facts)
            if vocab is not None:
                found.vocabs.setdefault(facts["vocab_key"], vocab)
        for name in _FACTS:
            setattr(model, name, facts.get(name))
        found.params[i] = facts.get("parameter_count") or 0
        if facts.get("vocab_key"):
            found.groups.setdefault(facts["vocab_key"], []).append(i)
    return found


class _VocabJudge:
    """llama.cpp's draft/target rule between two vocabulary groups, remembered in the scan cache."""

    def __init__(self, found: _Found, store: _ScanCache):
        self.found, self.store = found, store

    def vocab_of(self, key: str) -> VocabInfo | None:
        vocabs = self.found.vocabs
        if key not in vocabs:
            try:
                vocabs[key] = inspect_gguf(self.found.models[self.found.groups[key][0]].path, keep=False).vocab
            except Exception:  # noqa: BLE001 - changed since it was cached: it pairs with nothing this time
                return None
        return vocabs[key]

    def compatible(self, ka: str, kb: str) -> bool:
        if ka == kb:
            return True
        if not _may_pair(ka, kb):
            return False
        verdict = self.store.verdict(ka, kb)
        if verdict is None:
            va, vb = self.vocab_of(ka), self.vocab_of(kb)
            if va is None or vb is None:
                return False
            verdict = vocab_compatibility(va, vb)["compatible"]
            self.store.put_verdict(ka, kb, verdict)
        return verdict


def _pair_all(found: _Found, judge: _VocabJudge) -> list[dict]:
    """Mark every compatible pair on both models; the larger of two different sizes is the target."""
    models, groups, params = found.models, found.groups, found.params
    pairs = []
    keys = list(groups)
    for gi, ka in enumerate(keys):
        for kb in keys[gi:]:
            if not judge.compatible(ka, kb):
                continue
            for a in groups[ka]:
                for b in groups[kb]:
                    if a == b or (ka == kb and b < a):
                        continue
                    models[a].compatible_with.append(models[b].path)
                    models[b].compatible_with.append(models[a].path)
                    if params[a] != params[b]:
                        target, draft = (a, b) if params[a] > params[b] else (b, a)
                        pairs.append(
                            {
                                "target": models[target].path,
                                "draft": models[draft].path,
                                "target_name": models[target].name,
                                "draft_name": models[draft].name,
                            }
                        )
    pairs.sort(key=lambda p: (p["target_name"], p["draft_name"]))
    return pairs


def format_library(lib: Library) -> str:
    from engine.core.units import format_bytes

    lines = ["sources:"]
    for s in lib.sources:
        state = f"{s['files']} file{'s' if s['files'] != 1 else ''}" if s["exists"] else "not found"
        lines.append(f"  {s['kind']:<12} {s['path']}  ({state})")
    lines.append(f"models ({len(lib.models)}):")
    for m in lib.models:
        what = " ".join(x for x in (m.architecture, m.size_label, m.quant) if x)
        parts = f", {m.split_parts} parts" if m.split_parts else ""
        lines.append(f"  {m.name}  {what}  {format_bytes(m.size_bytes)}{parts}  [{m.source}]")
        if m.kind:
            lines.append(f"      {m.kind}")
        if m.aliases:
            lines.append(f"      also: {', '.join(m.aliases)}")
        lines.append(f"      {m.path}")
        if m.error:
            lines.append(f"      error: {m.error}")
    lines.append(f"compatible pairs ({len(lib.pairs)}):" if lib.pairs else "compatible pairs: none")
    for p in lib.pairs:
        lines.append(f"  target {p['target_name']}  <-  draft {p['draft_name']}")
    return "\n".join(lines)
