"""Chooses CMAKE_CUDA_ARCHITECTURES for the CUDA build of llama.cpp and native/.

    python packaging/cuda_arch.py                 # the GPUs NVML sees, e.g. "89" or "86;90"
    python packaging/cuda_arch.py 8.6 9.0         # a list: compute capabilities or CMake names
    CMAKE_CUDA_ARCHITECTURES=$(python packaging/cuda_arch.py) bash scripts/setup.sh --cuda

Prints the value on stdout (';'-separated, as CMake wants it); what it found and
why goes to stderr. With no GPU visible and no list given it prints DEFAULT_ARCHS
(Turing to Blackwell). Exits 2 for a name it cannot read or one the installed nvcc
cannot build.

The mapping follows the pinned llama.cpp (ggml/src/ggml-cuda/CMakeLists.txt):
compute capability X.Y is CMake's "XY" (8.9 -> 89, 9.0 -> 90, 10.0 -> 100),
except the consumer Blackwell line 12.x, which llama.cpp itself rewrites to the
architecture-specific "12Xa" because its FP4 tensor-core code is not forward
compatible; the rewrite is done here already so the printed value is what gets
built. Hopper stays "90", not "90a": ggml-cuda has no sm_90a-only code (no
__CUDA_ARCH_FEAT_SM90_ALL), and "90a" machine code would run on nothing but 9.0.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
from pathlib import Path

# CMake's forms: 90, 90a, 120f, with -real (machine code only) or -virtual (PTX only)
CMAKE_ARCH = re.compile(r"^(\d{2,3})([af]?)(-real|-virtual)?$")
CAPABILITY = re.compile(r"^(\d{1,2})\.(\d)$")


# With no GPU to ask, the list llama.cpp's own CMakeLists builds for a CUDA 13 toolkit when it is not told
# (GGML_NATIVE off): PTX for Turing (7.5) and Ampere (8.0), which the driver compiles for any newer GPU at
# first use, machine code for the consumer cards RTX 30 (8.6) and RTX 40 (8.9), PTX for Hopper (9.0, and
# through it the datacenter Blackwells 10.x), and machine code for consumer Blackwell, RTX 50 (12.0) and
# DGX Spark (12.1). Each entry costs about one architecture's compile time.
DEFAULT_ARCHS = ("75-virtual", "80-virtual", "86-real", "89-real", "90-virtual", "120a-real", "121a-real")


class ArchError(ValueError):
    pass


def from_capability(major: int, minor: int) -> str:
    arch = f"{major}{minor}"
    return arch + "a" if major == 12 else arch


def normalize(name: str) -> str:
    """One user-given name ("8.9", "sm_89", "compute_89", "89", "90a", "86-real") as CMake's name."""
    text = name.strip().lower()
    text = re.sub(r"^(sm|compute)_", "", text)
    m = CAPABILITY.match(text)
    if m:
        return from_capability(int(m.group(1)), int(m.group(2)))
    m = CMAKE_ARCH.match(text)
    if not m:
        raise ArchError(
            f"cannot read {name!r} as a CUDA architecture: give a compute capability such as 8.9 "
            "or a CMake name such as 89, 90a or 86-real"
        )
    number, variant, suffix = m.groups()
    if number.startswith("12") and not variant:
        variant = "a"  # what llama.cpp's CMakeLists would make of it
    return number + variant + (suffix or "")


def join(archs: list[str]) -> str:
    seen: list[str] = []
    for arch in archs:
        if arch not in seen:
            seen.append(arch)
    return ";".join(sorted(seen, key=lambda a: (int(CMAKE_ARCH.match(a).group(1)), a)))


def _nvidia_smi() -> list[tuple[str, str]]:
    """(name, compute capability) per GPU from nvidia-smi, for a Python without nvidia-ml-py (before setup)."""
    smi = shutil.which("nvidia-smi")
    if not smi:
        return []
    proc = subprocess.run(
        [smi, "--query-gpu=name,compute_cap", "--format=csv,noheader"], capture_output=True, text=True
    )
    if proc.returncode != 0:
        return []
    rows = [line.rsplit(",", 1) for line in proc.stdout.splitlines() if "," in line]
    return [(name.strip(), cap.strip()) for name, cap in rows if CAPABILITY.match(cap.strip())]


def detected(nvml=None, smi=_nvidia_smi) -> tuple[list[str], str]:
    """(architectures of the visible GPUs, a line saying what was seen): NVML through engine.planning.hardware,
    or nvidia-smi where this Python has no nvidia-ml-py."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from engine.planning.hardware import probe

    report = probe(nvml)
    found = [(f"GPU {g.index} {g.name or '?'}", g.compute_capability) for g in report.gpus if g.compute_capability]
    source = report.message
    if not found:
        found = [(f"GPU {i} {name}", cap) for i, (name, cap) in enumerate(smi())]
        source = f"{report.message}; nvidia-smi: {'found ' + str(len(found)) if found else 'no GPU either'}"
    archs = [from_capability(*(int(x) for x in cap.split("."))) for _, cap in found]
    seen = "; ".join(f"{who}: compute capability {cap}" for who, cap in found)
    return archs, seen or source


def nvcc_archs(nvcc: str | None) -> set[str] | None:
    """The architecture numbers this nvcc can build (``nvcc --list-gpu-arch``), or None without nvcc."""
    path = nvcc or shutil.which("nvcc")
    if not path:
        return None
    proc = subprocess.run([path, "--list-gpu-arch"], capture_output=True, text=True)
    if proc.returncode != 0:
        return None
    return {m.group(1) for m in re.finditer(r"compute_(\d+)", proc.stdout)}


def check_toolkit(archs: list[str], supported: set[str] | None) -> None:
    if supported is None:
        return
    missing = [a for a in archs if CMAKE_ARCH.match(a).group(1) not in supported]
    if missing:
        raise ArchError(
            f"this CUDA toolkit's nvcc cannot build {', '.join(missing)} (it knows "
            f"{', '.join(sorted(supported, key=int))}); install a toolkit that does, or leave "
            "those GPUs out"
        )


def main(argv: list[str] | None = None, nvml=None, smi=_nvidia_smi) -> int:
    ap = argparse.ArgumentParser(prog="cuda_arch.py", description=__doc__.splitlines()[0])
    ap.add_argument(
        "archs", nargs="*", help="compute capabilities (8.9) or CMake names (89, 90a); ';' or ',' lists work too"
    )
    ap.add_argument("--nvcc", help="the nvcc to check against (default: the one on PATH; none: no check)")
    a = ap.parse_args(argv)
    try:
        names = [n for arg in a.archs for n in re.split(r"[;,\s]+", arg) if n]
        if names:
            archs = [normalize(n) for n in names]
            print(f"cuda_arch: from the list given: {' '.join(names)}", file=sys.stderr)
        else:
            archs, seen = detected(nvml, smi)
            if not archs:
                archs = list(DEFAULT_ARCHS)
                print(
                    f"cuda_arch: no NVIDIA GPU is visible ({seen}); building for the GPUs people own, Turing to "
                    f"Blackwell ({join(archs)}); name fewer to build faster, e.g. "
                    "`python packaging/cuda_arch.py 8.9`",
                    file=sys.stderr,
                )
            else:
                print(f"cuda_arch: {seen}", file=sys.stderr)
        if a.nvcc != "none":
            supported = nvcc_archs(a.nvcc)
            if supported is None:
                print("cuda_arch: no working nvcc found; the list is not checked against a toolkit", file=sys.stderr)
            check_toolkit(archs, supported)
    except ArchError as exc:
        print(f"cuda_arch: {exc}", file=sys.stderr)
        return 2
    print(join(archs))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
