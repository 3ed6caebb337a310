"""Chooses how llama.cpp's CPU backend is compiled for scripts/setup.sh.

    python packaging/cpu_features.py            # this machine: "-DGGML_SSE42=ON -DGGML_AVX=ON ..."
    python packaging/cpu_features.py --portable # every x86-64 level, as the bundles ship it

A source install runs on the machine that built it, so it needs one CPU module, for that machine's CPU:
a fourteenth of the portable build's CPU work (ggml compiles its CPU backend once per x86-64 level with
GGML_CPU_ALL_VARIANTS). GGML_NATIVE would do it in one switch, but the pinned llama.cpp refuses it beside
GGML_BACKEND_DL (ggml-cpu/CMakeLists.txt: the module's feature check is built from the GGML_<feature>
switches, which -march=native bypasses). So this turns on each of ggml's x86 feature switches that the CPU
has, by the names /proc/cpuinfo gives them: the module is what the best of the portable variants would be
here (or better, where the CPU has a mix no variant has), it carries ggml's score check like them, and it is
named libggml-cpu.so (engine.llama.backends reports it as the "native" variant).

Prints the CMake switches on stdout, what it found on stderr. Away from x86-64 Linux it prints the portable
switches: there is no /proc/cpuinfo to read, and ggml's ARM variants are named by architecture level.
"""

from __future__ import annotations

import argparse
import platform
import sys
from pathlib import Path

PORTABLE = ("-DGGML_NATIVE=OFF", "-DGGML_CPU_ALL_VARIANTS=ON")

# ggml's x86 feature switches (those its x86 variants use, ggml/src/CMakeLists.txt) -> the /proc/cpuinfo flags
# that ggml's score check (ggml-cpu/arch/x86/cpu-feats.cpp) asks the CPU for. AMX_BF16 is left out as the
# variants leave it out; AMX_TILE has no check of its own there, it comes with AMX_INT8 on every CPU.
FEATURES: dict[str, tuple[str, ...]] = {
    "SSE42": ("sse4_2",),
    "AVX": ("avx",),
    "F16C": ("f16c",),
    "FMA": ("fma",),
    "AVX2": ("avx2",),
    "BMI2": ("bmi2",),
    "AVX_VNNI": ("avx_vnni",),
    "AVX512": ("avx512f", "avx512cd", "avx512vl", "avx512dq", "avx512bw"),
    "AVX512_VBMI": ("avx512vbmi",),
    "AVX512_VNNI": ("avx512_vnni",),
    "AVX512_BF16": ("avx512_bf16",),
    "AMX_TILE": ("amx_tile",),
    "AMX_INT8": ("amx_int8",),
}


def cpu_flags(cpuinfo: str) -> set[str]:
    """The first processor's flags in /proc/cpuinfo's text (every core of a PC has the same)."""
    for line in cpuinfo.splitlines():
        if line.startswith("flags"):
            return set(line.partition(":")[2].split())
    return set()


def native_switches(flags: set[str]) -> list[str]:
    """CMake switches for a CPU module with every ggml feature these flags hold, and no other."""
    switches = ["-DGGML_NATIVE=OFF", "-DGGML_CPU_ALL_VARIANTS=OFF"]
    for feature, needs in FEATURES.items():
        switches.append(f"-DGGML_{feature}={'ON' if set(needs) <= flags else 'OFF'}")
    return switches


def switches(portable: bool) -> tuple[list[str], str]:
    """The switches, and a line saying what they build."""
    if portable:
        return list(PORTABLE), "every x86-64 level (portable)"
    if not sys.platform.startswith("linux") or platform.machine().lower() not in ("x86_64", "amd64"):
        return list(PORTABLE), f"every level: {sys.platform}/{platform.machine()} is not x86-64 Linux"
    try:
        flags = cpu_flags(Path("/proc/cpuinfo").read_text())
    except OSError as exc:
        return list(PORTABLE), f"every level: /proc/cpuinfo unreadable ({exc})"
    if not flags:
        return list(PORTABLE), "every level: /proc/cpuinfo lists no flags"
    chosen = native_switches(flags)
    have = [s.removeprefix("-DGGML_").removesuffix("=ON") for s in chosen if s.endswith("=ON")]
    return chosen, f"this CPU only: {' '.join(have) or 'baseline x86-64'}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--portable", action="store_true", help="every x86-64 level, as the bundles ship it")
    args = parser.parse_args(argv)
    chosen, what = switches(args.portable)
    print(f"cpu_features: {what}", file=sys.stderr)
    print(" ".join(chosen))
    return 0


if __name__ == "__main__":
    sys.exit(main())
