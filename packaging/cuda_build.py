"""The CUDA build of the pinned llama.cpp on a machine without network or a full CUDA toolkit.

    python packaging/cuda_build.py trim-sdist SRC DEST

Used by bench/gpu_check.py on a lent GPU machine, which has nvcc and CMake but
nothing can be downloaded there and its toolkit may lack cuBLAS (this
workplace's CUDA image keeps cuBLAS in pip's nvidia wheels, beside PyTorch):

- ``trim_sdist``: the llama-cpp-python sdist without what the build does not
  read (git history, docs, benchmark data, test vocabularies): 11 of 73 MiB, so
  it fits in what a device call carries;
- ``cuda_link_setup``: where cuBLAS, cuBLASLt, their header and libcuda are, as
  CMake arguments and loader folders;
- ``build_cuda_wheel``: ``pip wheel`` without build isolation, with
  scripts/setup.sh's CMAKE_ARGS (read from it) plus the CUDA switches;
- ``install_wheel``: into a folder named site-packages on PYTHONPATH, where
  engine.llama.install.find_install() looks.
"""

from __future__ import annotations

import argparse
import importlib
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# the one pin: pyproject.toml's "llama-cpp-python==VERSION"
LLAMA_VERSION = re.search(r'"llama-cpp-python==([^"]+)"', (REPO / "pyproject.toml").read_text(encoding="utf-8"))[1]


# -- the sdist that travels -------------------------------------------------------------------------

# Not needed to build the wheel, and too big to travel (the device takes 64 MiB in all):
# git history, documentation, benchmark data, media, the test vocabularies.
SDIST_DROP = re.compile(
    r"^[^/]+/(\.git(/.*)?$|vendor/llama\.cpp/\.git$|vendor/llama\.cpp/(docs|benches|media)/"
    r"|vendor/llama\.cpp/models/.*\.gguf$)"
)
SDIST_NEEDS = (
    "CMakeLists.txt",
    "pyproject.toml",
    "vendor/llama.cpp/CMakeLists.txt",
    "vendor/llama.cpp/ggml/src/ggml-cuda/CMakeLists.txt",
    "vendor/llama.cpp/common/speculative.h",
    "vendor/llama.cpp/tools/server/server.cpp",
)


def trim_sdist(src: Path, dest: Path) -> None:
    top = f"llama_cpp_python-{LLAMA_VERSION}/"
    kept = set()
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(src) as tin, tarfile.open(dest, "w:gz", compresslevel=9) as tout:
        for member in tin:
            if SDIST_DROP.match(member.name):
                continue
            tout.addfile(member, tin.extractfile(member) if member.isfile() else None)
            kept.add(member.name)
    missing = [p for p in SDIST_NEEDS if top + p not in kept]
    if missing:
        raise SystemExit(f"trim-sdist: {src} lacks {', '.join(missing)}; is it llama-cpp-python {LLAMA_VERSION}?")
    print(f"{dest}: {dest.stat().st_size / 2**20:.1f} MiB (from {src.stat().st_size / 2**20:.1f} MiB)")


# -- CUDA libraries the build links ------------------------------------------------------------------


def setup_cmake_args() -> list[str]:
    """scripts/setup.sh's CMAKE_ARGS, read from it so the two cannot drift apart, plus the CUDA switch."""
    text = (REPO / "scripts" / "setup.sh").read_text()
    # the unindented lines that set or extend cmake_args for every build (the CUDA ones are indented)
    parts = re.findall(r'^cmake_args="(?:\$cmake_args )?([^"]+)"', text, re.M)
    if not parts or "-DGGML_CUDA=on" not in text:
        raise SystemExit("cuda_build: scripts/setup.sh no longer has the cmake_args lines this check reads")
    return " ".join(parts).replace("\\$", "$").split() + ["-DGGML_CUDA=on"]


def _cuda_home() -> Path:
    nvcc = shutil.which("nvcc")
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    if home:
        return Path(home)
    return Path(nvcc).resolve().parent.parent if nvcc else Path("/usr/local/cuda")


def _python_nvidia_dirs() -> list[Path]:
    """nvidia/*/ folders of pip's CUDA wheels (PyTorch's cuBLAS lives there on images without a full toolkit)."""
    out = []
    for entry in sys.path:
        base = Path(entry) / "nvidia"
        if base.is_dir():
            out += sorted(p for p in base.iterdir() if p.is_dir())
    return out


def _find(name_glob: str, dirs: list[Path]) -> Path | None:
    for d in dirs:
        hits = sorted(d.glob(name_glob))
        if hits:
            return hits[0]
    return None


def _ldconfig(soname: str) -> Path | None:
    """Where the loader's cache says a library is (``ldconfig -p``)."""
    try:
        listing = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True).stdout
    except OSError:
        return None
    m = re.search(rf"^\s*{re.escape(soname)} \(.*x86-64.*\) => (\S+)$", listing, re.M)
    return Path(m.group(1)) if m else None


DRIVER_DIRS = (
    Path("/usr/local/nvidia/lib64"),
    Path("/usr/lib/x86_64-linux-gnu"),
    Path("/usr/lib64"),
    Path("/usr/local/nvidia/lib"),
)


def cuda_link_setup(shim: Path, driver_dirs: tuple[Path, ...] = DRIVER_DIRS) -> tuple[list[str], list[str], list[str]]:
    """(extra CMake arguments, library folders for the loader, include folders) so the CUDA build finds
    cuBLAS, cuBLASLt and the driver library where this machine has them.

    A full toolkit has them in its lib64 (and libcuda in lib64/stubs); then nothing is added. Otherwise
    cuBLAS comes from pip's nvidia wheels and libcuda from the driver's folder, each through an unversioned
    link in ``shim`` (find_library wants libX.so, those folders hold libX.so.N only).
    """
    home = _cuda_home()
    toolkit_libs = [home / "lib64", home / "lib", home / "targets" / "x86_64-linux" / "lib"]
    nv = _python_nvidia_dirs()
    args, lib_dirs, inc_dirs = [], [], []
    shim_lib = shim / "lib"
    wanted = {"cublas": "libcublas.so*", "cublasLt": "libcublasLt.so*"}
    for name, pattern in wanted.items():
        if _find(f"lib{name}.so", toolkit_libs):
            continue
        found = _find(pattern, [d / "lib" for d in nv])
        if found is None:
            raise SystemExit(
                f"cuda_build: lib{name} is neither in the CUDA toolkit ({home}) nor in a pip nvidia "
                "package of this Python; the CUDA build of llama.cpp needs it"
            )
        shim_lib.mkdir(parents=True, exist_ok=True)
        link = shim_lib / f"lib{name}.so"
        link.unlink(missing_ok=True)
        link.symlink_to(found)
        args.append(f"-DCUDA_{name}_LIBRARY={link}")
        lib_dirs.append(str(found.parent))
    if not _find("cublas_v2.h", [home / "include"]):
        header = _find("cublas_v2.h", [d / "include" for d in nv])
        if header is None:
            raise SystemExit("cuda_build: cublas_v2.h is neither in the CUDA toolkit nor in a pip nvidia package")
        inc_dirs.append(str(header.parent))
    if not _find("libcuda.so", toolkit_libs + [d / "stubs" for d in toolkit_libs]):
        driver = _find("libcuda.so.1", list(driver_dirs)) or _ldconfig("libcuda.so.1")
        if driver is None:
            raise SystemExit("cuda_build: no libcuda.so (toolkit stub or driver); is the NVIDIA driver installed?")
        shim_lib.mkdir(parents=True, exist_ok=True)
        link = shim_lib / "libcuda.so"
        link.unlink(missing_ok=True)
        link.symlink_to(driver)
        args.append(f"-DCUDA_cuda_driver_LIBRARY={link}")
        lib_dirs.append(str(driver.parent))
    lib_dirs += [str(d) for d in toolkit_libs if d.is_dir()]
    return args, lib_dirs, inc_dirs


def prepend_env(env: dict, var: str, dirs: list[str]) -> None:
    if dirs:
        env[var] = os.pathsep.join(dirs + ([env[var]] if env.get(var) else []))


# -- building ------------------------------------------------------------------------------------


def run_logged(argv: list[str], log: Path, env: dict | None = None, what: str = "") -> float:
    """Run argv with its output in log, saying once a minute that it still runs; return the seconds it took.
    On failure, stop with the log's end."""
    t0 = last = time.monotonic()
    with log.open("a") as fh:
        fh.write(f"$ {' '.join(argv)}\n")
        fh.flush()
        proc = subprocess.Popen(argv, stdout=fh, stderr=subprocess.STDOUT, env=env)
        while proc.poll() is None:
            time.sleep(1)
            if time.monotonic() - last >= 60:
                last = time.monotonic()
                print(f"  ... {what}: {last - t0:.0f} s", flush=True)
    if proc.returncode != 0:
        tail = log.read_text(errors="replace")[-4000:]
        raise SystemExit(f"cuda_build: {what} failed (exit {proc.returncode}); end of {log}:\n{tail}")
    return time.monotonic() - t0


def build_cuda_wheel(sdist: Path, work: Path, log: Path, architectures: str) -> tuple[Path, float, dict]:
    """(the wheel, seconds, {"cmake_args", "loader_dirs"}); loader_dirs must be on LD_LIBRARY_PATH to run it."""
    extra, lib_dirs, inc_dirs = cuda_link_setup(work / "cuda-shim")
    cmake_args = setup_cmake_args() + [f"-DCMAKE_CUDA_ARCHITECTURES={architectures}"] + extra
    env = dict(os.environ, CMAKE_ARGS=" ".join(cmake_args), CMAKE_BUILD_PARALLEL_LEVEL=str(os.cpu_count() or 4))
    prepend_env(env, "CPATH", inc_dirs)  # nvcc preprocesses with the host compiler, which reads CPATH
    prepend_env(env, "LIBRARY_PATH", lib_dirs)
    # linking llama-server and friends, ld looks for libggml-cuda's own needs (libcublas.so.13, libcuda.so.1)
    # along LD_LIBRARY_PATH
    prepend_env(env, "LD_LIBRARY_PATH", lib_dirs)
    print(f"CMAKE_ARGS={env['CMAKE_ARGS']}", flush=True)
    wheel_dir = work / "wheel"
    shutil.rmtree(wheel_dir, ignore_errors=True)
    # no build isolation: nothing can be downloaded; scikit-build-core and pathspec travel as wheels
    seconds = run_logged(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-v",
            "--no-deps",
            "--no-build-isolation",
            "--no-cache-dir",
            "-w",
            str(wheel_dir),
            str(sdist),
        ],
        log,
        env,
        "building the CUDA wheel",
    )
    wheel = next(wheel_dir.glob("llama_cpp_python-*.whl"))
    return wheel, seconds, {"cmake_args": cmake_args, "loader_dirs": lib_dirs}


def install_wheel(wheel: Path, site: Path, log: Path) -> None:
    run_logged(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-index",
            "--no-deps",
            "--upgrade",
            "--target",
            str(site),
            str(wheel),
        ],
        log,
        what=f"installing {wheel.name}",
    )
    importlib.invalidate_caches()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("trim-sdist", help="repack the sdist without what the build does not read")
    t.add_argument("src", type=Path)
    t.add_argument("dest", type=Path)
    a = ap.parse_args(argv)
    trim_sdist(a.src, a.dest)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
