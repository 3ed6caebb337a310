"""NVIDIA GPUs by name, from resources/catalog/gpus.json: memory, bandwidth, tensor throughput and compute
capability, each figure with the address it was read at.

Two uses. The speed model prices a pass on a GPU from its bandwidth, which NVML gives, and its compute, which NVML
does not: the table supplies that by the name NVML reports (lookup). And a user can ask for a card they do not
have ("what would this pair do on an RTX 4060 Ti 16GB?"): find_gpu matches what they type forgivingly and
described_report builds the HardwareReport NVML would give for it, so planning, recommending and predicting run
as they would on that machine.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from engine.core.paths import RESOURCES_DIR
from engine.planning.hardware import CpuInfo, GpuInfo, HardwareReport, cpu_info

GPU_TABLE = RESOURCES_DIR / "catalog" / "gpus.json"
# words that every card's name may carry or lack: "NVIDIA GeForce RTX 4090" is "RTX 4090"
_NOISE = ("nvidia", "geforce", "tesla", "quadro")
_MEMORY = re.compile(r"(\d+(?:\.\d+)?)\s*(?:gb|gib|g)\b")


class GpuTableError(ValueError):
    """A card the table does not know, or a name that fits several: the message lists what it could be."""


@dataclass(frozen=True)
class GpuSpec:
    name: str  # as NVML reports it
    aliases: tuple[str, ...]
    generation: str  # Pascal, Volta, Turing, Ampere, Ada, Hopper, Blackwell
    compute_capability: str | None
    vram_gb: float | None  # as sold: GiB for GDDR cards (24 GB = 24564 MiB), close to it for HBM
    bandwidth_gb_s: float | None  # peak
    fp16_tensor_tflops: float | None  # dense
    int8_tensor_tops: float | None  # dense
    sources: dict[str, str] = field(default_factory=dict)
    notes: str = ""

    @property
    def label(self) -> str:
        """The short name a person reads: "RTX 4090", "H100 SXM"."""
        return self.aliases[0] if self.aliases else self.name


def _norm(text: str) -> str:
    words = re.sub(r"[-_/,()]+", " ", text.lower()).split()
    return " ".join(w for w in words if w not in _NOISE)


def _memory_gb(text: str) -> float | None:
    m = _MEMORY.search(text.lower())
    return float(m.group(1)) if m else None


@lru_cache(maxsize=4)
def load_gpus(path: Path = GPU_TABLE) -> tuple[GpuSpec, ...]:
    data = json.loads(path.read_text(encoding="utf-8"))
    out = []
    for g in data["gpus"]:
        out.append(
            GpuSpec(
                name=g["name"],
                aliases=tuple(g.get("aliases", ())),
                generation=g.get("generation") or "",
                compute_capability=g.get("compute_capability"),
                vram_gb=g.get("vram_gb"),
                bandwidth_gb_s=g.get("memory_bandwidth_gb_s"),
                fp16_tensor_tflops=g.get("fp16_tensor_tflops"),
                int8_tensor_tops=g.get("int8_tensor_tops"),
                sources=dict(g.get("sources", {})),
                notes=g.get("notes", ""),
            )
        )
    return tuple(out)


def _names(g: GpuSpec) -> tuple[str, ...]:
    return (g.name, *g.aliases)


def _words(text: str, memory: bool = True) -> str:
    """A name as compared: lower case, without the words every card may carry or lack, and (memory False) without
    a memory size."""
    return _norm(text.lower() if memory else _MEMORY.sub(" ", text.lower()))


def candidates(query: str, gpus: tuple[GpuSpec, ...]) -> list[GpuSpec]:
    """The cards a query may mean, from the most to the least certain way of matching:
    1. a name equal to the query (with or without the query's memory size): "RTX 4090", "rtx-4090 24GB";
    2. names holding every word of the query: "A100" (three cards), "H100 PCIe";
    3. the longest name found whole inside the query: an NVML name the table lacks, "NVIDIA GeForce RTX 4070 Laptop
       GPU" taken for the RTX 4070."""
    full, bare = _words(query), _words(query, memory=False)
    exact = [g for g in gpus if any(_words(n) in (full, bare) for n in _names(g))]
    if exact:
        return exact
    words = bare.split()
    partial = [g for g in gpus if words and any(set(words) <= set(_words(n, False).split()) for n in _names(g))]
    if partial:
        return partial
    scored = []
    for g in gpus:
        best = max((len(a) for a in (_words(n, False) for n in _names(g)) if a and f" {a} " in f" {bare} "), default=0)
        if best:
            scored.append((best, g))
    top = max((s for s, _ in scored), default=0)
    return [g for s, g in scored if s == top]


def find_gpu(query: str, gpus: tuple[GpuSpec, ...] | None = None) -> GpuSpec:
    """The card a person or NVML means: "4090", "RTX 4090", "rtx-4090 24GB" and "NVIDIA GeForce RTX 4090" all find
    the RTX 4090 (candidates says how). A memory size in the query picks between cards sold in several ("4060 Ti
    16GB"). Raises GpuTableError naming the candidates when none or several fit ("A100": which one?)."""
    gpus = gpus if gpus is not None else load_gpus()
    best = candidates(query, gpus)
    if not best:
        raise GpuTableError(
            f"no GPU in SpecTune's table matches {query!r}; it knows: " + ", ".join(sorted({g.label for g in gpus}))
        )
    memory = _memory_gb(query)
    if memory is not None and len(best) > 1:
        sized = [g for g in best if g.vram_gb is not None and abs(g.vram_gb - memory) < 1.0]
        best = sized or best
    # variants that differ in nothing the speed model or the plan reads are one card for these purposes
    if len({(g.vram_gb, g.bandwidth_gb_s, g.fp16_tensor_tflops) for g in best}) > 1:
        raise GpuTableError(
            f"{query!r} fits several GPUs: "
            + "; ".join(f"{g.label} ({g.vram_gb:g} GB, {g.bandwidth_gb_s:g} GB/s)" for g in best)
            + ". Name one"
        )
    return best[0]


def lookup(nvml_name: str | None) -> GpuSpec | None:
    """The table's entry for the name NVML reports, or None when it has none."""
    if not nvml_name:
        return None
    try:
        return find_gpu(nvml_name)
    except GpuTableError:
        return None


def described_report(spec: GpuSpec, count: int = 1, cpu: CpuInfo | None = None) -> HardwareReport:
    """What NVML would report on a machine with ``count`` of this card, all its memory free (a desktop keeps a few
    hundred MiB of it; the plans' headroom covers that). The CPU side is this machine's unless given."""
    if count < 1:
        raise GpuTableError(f"--gpu-count must be 1 or more, got {count}")
    if spec.vram_gb is None or spec.bandwidth_gb_s is None:
        missing = [n for n, v in (("memory", spec.vram_gb), ("bandwidth", spec.bandwidth_gb_s)) if v is None]
        raise GpuTableError(f"SpecTune's table has no {' or '.join(missing)} for the {spec.label} (no source read)")
    total = int(spec.vram_gb * 2**30)
    gpus = []
    for i in range(count):
        g = GpuInfo(
            i,
            name=spec.name,
            memory_total_bytes=total,
            memory_used_bytes=0,
            memory_free_bytes=total,
            compute_capability=spec.compute_capability,
        )
        g.peak_memory_bandwidth_bytes_per_s = spec.bandwidth_gb_s * 1e9
        gpus.append(g)
    return HardwareReport(
        "ok",
        f"{count} x {spec.label}, described from SpecTune's GPU table (not this machine)",
        None,
        None,
        gpus,
        cpu or cpu_info(),
    )
