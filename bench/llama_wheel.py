"""bench/results/llama_wheel-<cpu|native|cuda>.txt: what scripts/setup.sh's llama.cpp build costs, holds and loads here.

    .venv/bin/python bench/llama_wheel.py [--wheel PATH] [--save FILE]

Reads the record setup.sh writes beside the wheel it builds (seconds, parallel jobs, CPUs, CMake
arguments) and the wheel itself (size, files, the same bytes stored more than once, ggml's backend
modules), then asks this machine which CPU variant is loaded: by the engine (engine.llama.backends,
the way the worker loads them) and by the installed llama-server (its own log line), and reads the
RUNPATH that lets the tools start without LD_LIBRARY_PATH. The wheel defaults to the one this
checkout's .venv was set up with.
"""

from __future__ import annotations

import argparse
import hashlib
import platform
import re
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from engine.llama.backends import load_backends  # noqa: E402
from engine.llama.install import find_install  # noqa: E402

MB = 1e6
LOADED = re.compile(r"loaded CPU backend from (\S+)")
RUNPATH_OF = ("bin/llama-server", "bin/llama-quantize", "lib/libllama-server-impl.so")


def setup_wheel() -> Path:
    """The wheel named in .venv/.spectune-setup (written by scripts/setup.sh)."""
    stamp = (ROOT / ".venv" / ".spectune-setup").read_text().split()  # "HASH WHEEL [EXTRAS]"
    return Path(stamp[1])


def build_record(wheel: Path) -> dict[str, str]:
    record = wheel.parent / "build.txt"
    if not record.is_file():
        return {}
    return dict(line.split(" ", 1) for line in record.read_text().splitlines() if " " in line)


def wheel_contents(wheel: Path) -> tuple[int, int, int, list[tuple[str, int]]]:
    """(files, bytes unpacked, bytes of distinct contents, [(backend module, bytes)])."""
    seen: set[str] = set()
    unpacked = distinct = 0
    modules = []
    with zipfile.ZipFile(wheel) as z:
        infos = [i for i in z.infolist() if not i.is_dir()]
        for info in infos:
            unpacked += info.file_size
            digest = hashlib.sha256(z.read(info)).hexdigest()
            if digest not in seen:
                seen.add(digest)
                distinct += info.file_size
            name = info.filename
            if name.startswith("bin/libggml-"):
                modules.append((name.removeprefix("bin/"), info.file_size))
    return len(infos), unpacked, distinct, modules


def dynamic_section(path: Path) -> str:
    return subprocess.run(["readelf", "-d", str(path)], capture_output=True, text=True).stdout


def runpath(dynamic: str) -> str:
    found = re.search(r"\((?:RUNPATH|RPATH)\)\s+Library r(?:un)?path: \[(.*)\]", dynamic)
    return found[1] if found else "(none)"


def needed(dynamic: str) -> list[str]:
    return re.findall(r"\(NEEDED\)\s+Shared library: \[(.*)\]", dynamic)


def server_backends(server: Path) -> list[str]:
    """What llama-server's own loader says of each backend module (-v --list-devices), run from / with a bare
    environment: the CPU variant it loaded, and a module it could not load with the loader's reason."""
    r = subprocess.run(
        [str(server), "-v", "--list-devices"],
        capture_output=True,
        text=True,
        cwd="/",
        env={"PATH": "/usr/bin:/bin"},
        timeout=60,
    )
    log = r.stdout + r.stderr
    lines = [f"loads {m[1]}" for m in LOADED.finditer(log)] or [f"(no 'loaded CPU backend' line; exit {r.returncode})"]
    lines += [m[0].strip() for m in re.finditer(r"^.*failed to load.*$", log, re.M)]
    devices = re.search(r"Available devices:\n((?:\s+.*\n?)*)", log)
    lines.append(
        "devices: " + (", ".join(x.strip() for x in devices[1].splitlines() if x.strip()) or "none")
        if devices
        else "devices: (no list)"
    )
    return lines


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "?"


def _build_line(rec: dict[str, str]) -> str:
    seconds = int(rec.get("seconds", "0"))
    cpu = f"{int(rec['cpu_seconds']) / 60:.1f} CPU-minutes" if "cpu_seconds" in rec else "CPU time not recorded"
    return (
        f"{seconds / 60:.1f} min ({seconds} s) with {rec.get('jobs', '?')} parallel jobs "
        f"on {rec.get('cpus', '?')} CPUs; {cpu}; load average at the end {rec.get('load', 'not recorded')}"
    )


def report(wheel: Path) -> str:
    rec = build_record(wheel)
    files, unpacked, distinct, modules = wheel_contents(wheel)
    install = find_install()
    backends = load_backends(install)
    cuda = "cpu_wheel" in rec  # packaging/cuda_build.py's record: the CPU wheel plus the CUDA module
    portable = "GGML_CPU_ALL_VARIANTS=ON" in rec.get("cmake_args", "")
    flag = "--cuda " if cuda else "--portable " if portable else ""
    what = "CUDA" if cuda else "CPU (every x86-64 level)" if portable else "CPU (this machine's CPU only)"
    lines = [
        f"llama-cpp-python {install.version} wheel, {what} variant, as scripts/setup.sh "
        f"{flag}builds it ({rec.get('date', 'date unknown')})",
        "",
    ]
    if cuda:
        base = build_record(Path(rec["cpu_wheel"]))
        lines += [
            f"CUDA module     compiled in {_build_line(rec)}",
            f"                and added to the CPU wheel {Path(rec['cpu_wheel']).parent.name}, built once before "
            f"in {_build_line(base) if base else '(no record)'}",
        ]
    else:
        lines.append(f"build time      {_build_line(rec)}")
    lines += [
        f"CMake arguments {rec.get('cmake_args', '(no build record)')}",
        f"wheel           {wheel.stat().st_size / MB:.1f} MB compressed, {unpacked / MB:.1f} MB in {files} files "
        f"unpacked, {distinct / MB:.1f} MB of distinct contents (the rest: copies of the same library)",
        f"backend modules {len(modules)} in bin/, {sum(s for _, s in modules) / MB:.1f} MB unpacked:",
    ]
    lines += [f"  {name:<34} {size / MB:5.1f} MB" for name, size in sorted(modules)]
    cuda_module = install.backend_dir / "libggml-cuda.so"
    # one CPU module: the portable build's baseline, or a native build's only one
    cpu_names = ("libggml-cpu-x64.so", "libggml-cpu.so")
    cpu_module = next(f"bin/{n}" for n in cpu_names if (install.backend_dir / n).is_file())
    shown = [*RUNPATH_OF, cpu_module, *(["bin/libggml-cuda.so"] if cuda_module.is_file() else [])]
    lines += [
        "",
        "RUNPATH (tools and modules find lib/ wherever the install lies):",
        *(f"  {rel:<34} {runpath(dynamic_section(install.prefix / rel))}" for rel in shown),
    ]
    if cuda_module.is_file():
        lines.append(f"  bin/libggml-cuda.so needs {', '.join(needed(dynamic_section(cuda_module)))}")
    lines += [
        "",
        f"this machine: {cpu_model()}, {platform.machine()}",
        *(f"  engine        {line}" for line in backends.lines()),
        *(f"  llama-server  {line}" for line in server_backends(install.tool("llama-server"))),
    ]
    return "\n".join(lines) + "\n"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--wheel", type=Path, help="the wheel (default: the one .venv was set up with)")
    p.add_argument("--save", type=Path, help="also write the report to this file")
    p.add_argument("--note", help="what the record cannot know (the machine's load during the build, ...)")
    a = p.parse_args()
    text = report(a.wheel or setup_wheel())
    if a.note:
        text += f"\nnote: {a.note}\n"
    print(text, end="")
    if a.save:
        a.save.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
