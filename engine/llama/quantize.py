"""The pinned build's llama-quantize, for files SpecTune makes itself (the CPU probe's models, benchmarks):
the same quant mixes llama.cpp users download (Q4_K_M's Q6_K layers, its fallbacks for rows that are no
whole number of 256-blocks)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from engine.llama.install import find_install


class QuantizeError(RuntimeError):
    """llama-quantize failed; the message holds the end of its output."""


def quantize(source: Path, out: Path, ftype: str, timeout_s: float = 1800.0, pure: bool = False) -> Path:
    """Write ``out`` as ``source`` quantized to ``ftype`` (llama-quantize's name: Q8_0, Q4_K_M, ...); the file
    appears only once it is whole. ``pure``: every matrix of that type alone (no mix, llama-quantize --pure),
    as the CPU probe times one kernel class at a time."""
    install = find_install()
    part = out.with_name(out.name + ".part")
    r = subprocess.run(
        [str(install.tool("llama-quantize")), *(["--pure"] if pure else []), str(source), str(part), ftype],
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )
    if r.returncode != 0:
        part.unlink(missing_ok=True)
        raise QuantizeError(f"llama-quantize {source.name} -> {ftype} failed:\n{(r.stdout + r.stderr)[-1500:]}")
    part.replace(out)
    return out
