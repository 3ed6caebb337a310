"""A model named on the command line without its file: what ``spectune predict --target`` accepts besides a path.

- a GGUF path: the file's header, as before;
- a catalog preset ("qwen3-8b+0.6b-q4km"): its target, and its draft when no --draft is given;
- a catalog file as the catalog writes it ("Qwen/Qwen3-8B-GGUF/Qwen3-8B-Q4_K_M.gguf") or a catalog id and quant
  ("qwen3-8b:Q4_K_M");
- a described model, ARCH:SIZE:QUANT ("llama:8B:Q4_0"): the catalog's numbers for its model of that architecture
  nearest in size (its layers, widths and vocabulary), at that quant. A published benchmark row names a model
  this way, so it can be predicted without the file.

Every model but a path is planned from the catalog's numbers (engine.planning.advice.model_numbers), as the recommender
plans what is not downloaded yet.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from engine.models.catalog import Catalog, CatalogError, Model
from engine.models.gguf_inspect import ModelInfo, inspect_gguf
from engine.planning.advice.catalog_models import CatalogModels

# a described model's size may differ from the catalog model standing for it by this much (Llama 2 7B, 6.7B, is
# costed as Mistral 7B's 7.25B); further, the numbers would describe another model
SIZE_TOLERANCE = 0.3
_SIZE = re.compile(r"^(\d+(?:\.\d+)?)([bm])$", re.IGNORECASE)


class NamedModelError(ValueError):
    """A name that is no file, preset, catalog file or described model; the message says what would be."""


@dataclass(frozen=True)
class NamedModel:
    info: ModelInfo
    label: str  # what to print: the path, or "llama-3.1-8b-instruct Q4_0 (catalog numbers)"
    draft: NamedModel | None = None  # a preset's draft


def _size(text: str) -> float:
    m = _SIZE.match(text.strip())
    if not m:
        raise NamedModelError(f"{text!r} is not a model size: write it like 8B, 0.5B or 500M")
    return float(m.group(1)) * (1e9 if m.group(2).lower() == "b" else 1e6)


def _from_catalog(models: CatalogModels, model: Model, quant: str, how: str) -> NamedModel:
    try:
        models.catalog.quant(quant)
    except CatalogError:
        known = ", ".join(q.name for q in models.catalog.quants)
        raise NamedModelError(f"{quant!r} is not a quant the catalog knows; known: {known}") from None
    return NamedModel(models.info(model, quant), f"{model.id} {quant} ({how})")


def described(catalog: Catalog, arch: str, size: str, quant: str, tolerance: float = SIZE_TOLERANCE) -> NamedModel:
    """ARCH:SIZE:QUANT: the catalog's model of that architecture nearest in parameters, at that quant; an error when
    none is within ``tolerance`` of the size."""
    params = _size(size)
    same = [m for m in catalog.models if m.architecture.architecture == arch.lower()]
    if not same:
        archs = sorted({m.architecture.architecture for m in catalog.models})
        raise NamedModelError(f"the catalog has no {arch!r} model; its architectures: {', '.join(archs)}")
    # the nearest in size; of equals (a distill keeps its base's numbers), the one whose id names the architecture
    nearest = min(same, key=lambda m: (abs(m.architecture.params / params - 1), not m.id.startswith(arch.lower())))
    off = nearest.architecture.params / params - 1
    if abs(off) > tolerance:
        sizes = ", ".join(sorted({f"{m.architecture.params / 1e9:.2g}B" for m in same}, key=lambda s: float(s[:-1])))
        raise NamedModelError(
            f"the catalog's {arch} models are {sizes}: none within {tolerance:.0%} of {size}, so its numbers "
            "would describe another model"
        )
    return _from_catalog(CatalogModels(catalog), nearest, quant.upper(), f"described as {arch}:{size}")


def resolve(text: str, catalog: Catalog) -> NamedModel:
    """What a --target or --draft names (module docstring). A path that exists is always the file."""
    path = Path(text)
    if path.exists():
        return NamedModel(inspect_gguf(path), str(path))
    models = CatalogModels(catalog)
    presets = {p.name: p for p in catalog.presets}
    if text in presets:
        p = presets[text]
        draft = _from_catalog(models, catalog.model(p.draft.model), p.draft.quant, f"preset {text}")
        target = _from_catalog(models, catalog.model(p.target.model), p.target.quant, f"preset {text}")
        return NamedModel(target.info, target.label, draft)
    for m in catalog.models:
        for quant, filename in m.files.items():
            if text in (f"{m.repo}/{filename}", filename):
                return _from_catalog(models, m, quant, "catalog numbers")
    parts = text.split(":")
    if len(parts) == 2:
        try:
            return _from_catalog(models, catalog.model(parts[0]), parts[1].upper(), "catalog numbers")
        except CatalogError:
            pass
    if len(parts) == 3:
        arch, size, quant = parts
        return described(catalog, arch, size, quant)
    raise NamedModelError(
        f"{text!r} is not a file, a catalog preset, a catalog file (REPO/FILE), a catalog id with a quant "
        "(qwen3-8b:Q4_K_M) or a described model (ARCH:SIZE:QUANT, e.g. llama:8B:Q4_0)"
    )
