"""Bytes as SpecTune writes them, in one place: binary units (GiB = 2**30 bytes, as llama.cpp and nvidia-smi
count memory), at the precision each kind of figure needs."""

from __future__ import annotations

GIB = 2**30
MIB = 2**20


def format_bytes(n: float) -> str:
    """A file or a transfer: the largest unit that keeps the figure under 1024, one decimal (bytes whole)."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def format_plan_bytes(n: float) -> str:
    """A buffer of a memory plan, which is checked against llama.cpp's report to a percent or two: GiB to
    two decimals from 1 GiB up, MiB to one below."""
    return f"{n / GIB:.2f} GiB" if abs(n) >= GIB else f"{n / MIB:.1f} MiB"


def format_gib(n: float | None) -> str:
    """Memory a device has (free or in all), one decimal of GiB; "?" where it is not known."""
    return "?" if n is None else f"{n / GIB:.1f} GiB"
