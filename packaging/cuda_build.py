"""The CUDA build of the pinned llama.cpp, on a machine without a full CUDA toolkit or a GPU.

    python packaging/cuda_build.py wheel --cpu-wheel W --sdist S --architectures A --out DIR
    python packaging/cuda_build.py trim-sdist SRC DEST

``wheel`` is what ``scripts/setup.sh --cuda`` runs (here: nvcc without cuBLAS, no
driver). bench/gpu_check.py uses the same parts on a lent GPU machine, which has
nvcc and CMake but nothing can be downloaded there and its toolkit may lack cuBLAS
(this workplace's CUDA image keeps cuBLAS in pip's nvidia wheels, beside PyTorch):

- ``trim_sdist``: the llama-cpp-python sdist without what the build does not
  read (git history, docs, benchmark data, test vocabularies): 11 of 73 MiB, so
  it fits in what a device call carries;
- ``cuda_link_setup``: where cuBLAS, cuBLASLt, their header and libcuda are, as
  CMake arguments and loader folders;
- ``build_cuda_module`` and ``wheel_with_module``: ggml's CUDA backend compiled
  alone (with scripts/setup.sh's ggml switches, read from it) and added to the
  CPU wheel: the CUDA wheel of ``scripts/setup.sh --cuda`` (``wheel``) and of the
  GPU check;
- ``install_wheel``: into a folder named site-packages on PYTHONPATH, where
  engine.llama.install.find_install() looks.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import importlib
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
import zipfile
from pathlib import Path
from types import ModuleType

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
    """scripts/setup.sh's CMAKE_ARGS, read from it so the two cannot drift apart, with the portable CPU
    switches (the CUDA module goes into the portable wheel that bundles and the GPU check carry; it links
    only libggml-base, so a native CPU wheel takes it as well) and the CUDA switch."""
    text = (REPO / "scripts" / "setup.sh").read_text()
    # the unindented lines that set or extend cmake_args (the CPU wheel's, which the CUDA variant extends)
    parts = re.findall(r'^cmake_args="(?:\$cmake_args )?([^"]+)"', text, re.M)
    if not parts:
        raise SystemExit("cuda_build: scripts/setup.sh no longer has the cmake_args lines this check reads")
    cpu = _sibling("cpu_features").PORTABLE
    return " ".join(parts).replace("\\$", "$").split() + [*cpu, "-DGGML_CUDA=on"]


def _sibling(name: str) -> ModuleType:
    """Another script of packaging/, imported by path (this one runs as a script and is loaded by path in tests)."""
    spec = importlib.util.spec_from_file_location(f"spectune_packaging_{name}", Path(__file__).with_name(f"{name}.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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
        shim_lib.mkdir(parents=True, exist_ok=True)
        link = shim_lib / "libcuda.so"
        link.unlink(missing_ok=True)
        if driver is not None:
            link.symlink_to(driver)
            lib_dirs.append(str(driver.parent))
        else:
            # no driver (a build machine without a GPU): link against a stub, as the toolkit's lib64/stubs does
            cuda_h = _find("cuda.h", [home / "include"] + [d / "include" for d in nv])
            if cuda_h is None:
                raise SystemExit("cuda_build: no libcuda.so (toolkit stub or driver) and no cuda.h to make a stub from")
            libcuda_stub(link, cuda_h)
        args.append(f"-DCUDA_cuda_driver_LIBRARY={link}")
    lib_dirs += [str(d) for d in toolkit_libs if d.is_dir()]
    return args, lib_dirs, inc_dirs


def libcuda_stub(dest: Path, cuda_h: Path) -> Path:
    """A link-time stand-in for the driver's libcuda.so.1: every CUresult function cuda.h declares (under
    the names a normal compile maps them to, e.g. cuMemGetInfo_v2), each a dummy. ggml-cuda records the
    SONAME libcuda.so.1 and, on the user's machine, the loader finds the real driver under that name. The
    stub is never shipped: it stays in the build folder, and nothing's RUNPATH points there."""
    proc = subprocess.run(
        ["cc", "-E", "-P", "-x", "c", "-I", str(cuda_h.parent), str(cuda_h)], capture_output=True, text=True
    )
    if proc.returncode != 0:
        raise SystemExit(f"cuda_build: could not preprocess {cuda_h}: {proc.stderr[-1000:]}")
    names = sorted(set(re.findall(r"\bCUresult\s+(cu\w+)\s*\(", proc.stdout)))
    if len(names) < 100:
        raise SystemExit(f"cuda_build: found only {len(names)} driver functions in {cuda_h}; is it CUDA's cuda.h?")
    source = dest.with_suffix(".stub.c")
    source.write_text("".join(f"int {n}(void) {{ return 999; }}\n" for n in names))
    proc = subprocess.run(
        ["cc", "-shared", "-fPIC", "-o", str(dest), "-Wl,-soname,libcuda.so.1", str(source)],
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        raise SystemExit(f"cuda_build: could not build the libcuda link stub: {proc.stderr[-1000:]}")
    print(f"cuda_build: no NVIDIA driver here; linking against a stub libcuda ({len(names)} functions, never shipped)")
    return dest


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


# -- the CUDA wheel: the CPU wheel plus ggml's CUDA backend module -------------------------------------
#
# With GGML_BACKEND_DL every backend is a module that links only libggml-base, which is built the same
# way with or without CUDA. So the CUDA variant is the CPU wheel (cached, the one CI uses) with
# bin/libggml-cuda.so added: only the CUDA code is compiled, and a change of architectures rebuilds
# nothing else.


def cuda_runtime_pins() -> list[str]:
    """pyproject.toml's [project.optional-dependencies] cuda: the pinned nvidia-* wheels (cuBLAS, the runtime)."""
    text = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    block = re.search(r"^cuda = \[(.*?)\]", text, re.M | re.S)
    if not block:
        raise SystemExit("cuda_build: pyproject.toml has no 'cuda' optional-dependency list")
    return re.findall(r'"([^"]+)"', block[1])


def _site_relative_rpath() -> list[str]:
    """RUNPATH entries, relative to site-packages/bin, of the pip nvidia folders holding cuBLAS and the runtime."""
    out = []
    for d in _python_nvidia_dirs():
        if any((d / "lib").glob("libcublas.so.*")) or any((d / "lib").glob("libcudart.so.*")):
            out.append(f"$ORIGIN/../{d.parent.name}/{d.name}/lib")
    return out


def build_cuda_module(sdist: Path, work: Path, log: Path, architectures: str, jobs: int) -> tuple[Path, float, dict]:
    """Compile ggml's CUDA backend from the pinned sdist: (libggml-cuda.so, seconds, {"cmake_args",
    "loader_dirs"}); loader_dirs hold cuBLAS and the runtime where the module's RUNPATH does not reach."""
    src = work / "src"
    top = f"llama_cpp_python-{LLAMA_VERSION}/vendor/llama.cpp/"
    if not (src / "ggml" / "src" / "ggml-cuda" / "CMakeLists.txt").is_file():
        shutil.rmtree(src, ignore_errors=True)
        with tarfile.open(sdist) as tar:
            # llama.cpp's own top level (ggml as a subproject, as the wheel builds it), without the test
            # vocabularies and docs
            members = [
                m
                for m in tar.getmembers()
                if m.name.startswith(top) and not m.name.startswith(tuple(top + d for d in ("models/", "docs/")))
            ]
            for m in members:
                m.name = m.name[len(top) :]
            tar.extractall(src, members=members, filter="data")
    extra, lib_dirs, inc_dirs = cuda_link_setup(work / "cuda-shim")
    rpath = ";".join(["$ORIGIN/../lib", *_site_relative_rpath()])
    # the CPU wheel's switches that shape ggml (setup.sh's), then the CUDA ones; ggml alone is configured,
    # since only its CUDA module is built
    ggml_args = [a for a in setup_cmake_args() if a.startswith("-DGGML_")]
    cmake_args = [
        *ggml_args,
        "-DCMAKE_BUILD_TYPE=Release",
        "-DBUILD_SHARED_LIBS=ON",
        # nothing of llama.cpp but ggml is built; the rest is switched off so configuring needs nothing more
        "-DLLAMA_BUILD_TOOLS=OFF",
        "-DLLAMA_BUILD_SERVER=OFF",
        "-DLLAMA_BUILD_EXAMPLES=OFF",
        "-DLLAMA_BUILD_TESTS=OFF",
        "-DLLAMA_CURL=OFF",
        f"-DCMAKE_CUDA_ARCHITECTURES={architectures}",
        # the module's own RUNPATH from the start: libggml-base in ../lib, cuBLAS and the runtime in the pip
        # nvidia folders beside it in a venv (a bundle puts them in ../lib)
        "-DCMAKE_BUILD_WITH_INSTALL_RPATH=ON",
        f"-DCMAKE_INSTALL_RPATH={rpath}",
        *extra,
    ]
    env = dict(os.environ)
    prepend_env(env, "CPATH", inc_dirs)
    prepend_env(env, "LIBRARY_PATH", lib_dirs)
    build = work / "build"
    t0 = time.monotonic()
    run_logged(["cmake", "-S", str(src), "-B", str(build), *cmake_args], log, env, "configuring ggml with CUDA")
    run_logged(
        ["cmake", "--build", str(build), "--target", "ggml-cuda", "--parallel", str(jobs)],
        log,
        env,
        f"compiling ggml-cuda for {architectures}",
    )
    found = sorted(build.rglob("libggml-cuda.so"))
    if not found:
        raise SystemExit(f"cuda_build: the build finished without a libggml-cuda.so under {build}")
    return found[0], time.monotonic() - t0, {"cmake_args": cmake_args, "loader_dirs": lib_dirs}


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def wheel_with_module(cpu_wheel: Path, module: Path, out_dir: Path) -> Path:
    """A copy of cpu_wheel with bin/<module> added (and listed in its RECORD), written to out_dir."""
    out_dir.mkdir(parents=True, exist_ok=True)
    dest = out_dir / cpu_wheel.name
    data = module.read_bytes()
    arcname = f"bin/{module.name}"
    with zipfile.ZipFile(cpu_wheel) as zin, zipfile.ZipFile(dest, "w", zipfile.ZIP_DEFLATED) as zout:
        record_name = next(n for n in zin.namelist() if n.endswith(".dist-info/RECORD"))
        if arcname in zin.namelist():
            raise SystemExit(f"cuda_build: {cpu_wheel.name} already holds {arcname}; is it the CPU wheel?")
        for info in zin.infolist():
            if info.filename == record_name:
                continue
            zout.writestr(info, zin.read(info))
        entry = zipfile.ZipInfo(arcname, date_time=time.localtime()[:6])
        entry.external_attr = 0o100755 << 16
        entry.compress_type = zipfile.ZIP_DEFLATED
        zout.writestr(entry, data)
        record = zin.read(record_name).decode().rstrip("\n").split("\n")
        record.insert(len(record) - 1, f"{arcname},{_record_hash(data)},{len(data)}")
        zout.writestr(zin.getinfo(record_name), "\n".join(record) + "\n")
    return dest


def ensure_cuda_runtime_wheels(log: Path) -> None:
    """pip-install the pinned cuBLAS and runtime wheels into this Python (a no-op when they are there)."""
    pins = cuda_runtime_pins()
    run_logged([sys.executable, "-m", "pip", "install", "-q", *pins], log, what="installing cuBLAS and the runtime")
    importlib.invalidate_caches()


def cuda_wheel(cpu_wheel: Path, sdist: Path, architectures: str, out_dir: Path, jobs: int) -> Path:
    """Build the CUDA module and write the CUDA wheel and its build record (build.txt) into out_dir."""
    out_dir.mkdir(parents=True, exist_ok=True)
    work = out_dir.parent / (out_dir.name + ".work")
    work.mkdir(parents=True, exist_ok=True)
    log = work / "build.log"
    print(f"cuda_build: compiling ggml's CUDA backend for {architectures} with {jobs} jobs (log: {log})", flush=True)
    ensure_cuda_runtime_wheels(log)
    cpu0 = os.times()
    module, seconds, info = build_cuda_module(sdist, work, log, architectures, jobs)
    cmake_args = info["cmake_args"]
    cpu1 = os.times()
    wheel = wheel_with_module(cpu_wheel, module, out_dir)
    cpu_seconds = (cpu1.children_user + cpu1.children_system) - (cpu0.children_user + cpu0.children_system)
    load = " ".join(Path("/proc/loadavg").read_text().split()[:3]) if Path("/proc/loadavg").exists() else "?"
    (out_dir / "build.txt").write_text(
        f"seconds {seconds:.0f}\ncpu_seconds {cpu_seconds:.0f}\njobs {jobs}\ncpus {os.cpu_count()}\nload {load}\n"
        f"date {time.strftime('%Y-%m-%dT%H:%MZ', time.gmtime())}\ncmake_args {' '.join(cmake_args)}\n"
        f"cpu_wheel {cpu_wheel}\nmodule_bytes {module.stat().st_size}\n"
    )
    shutil.copy2(log, out_dir / "build.log")
    shutil.rmtree(work, ignore_errors=True)  # kept after a failure: the log, and the sources for the next try
    print(f"cuda_build: {wheel} ({wheel.stat().st_size / 1e6:.1f} MB) in {seconds / 60:.1f} min", flush=True)
    return wheel


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("trim-sdist", help="repack the sdist without what the build does not read")
    t.add_argument("src", type=Path)
    t.add_argument("dest", type=Path)
    w = sub.add_parser("wheel", help="the CUDA wheel: the CPU wheel plus ggml's CUDA module compiled here")
    w.add_argument("--cpu-wheel", type=Path, required=True)
    w.add_argument("--sdist", type=Path, required=True)
    w.add_argument("--architectures", required=True, help="CMAKE_CUDA_ARCHITECTURES (packaging/cuda_arch.py)")
    w.add_argument("--out", type=Path, required=True, help="the folder for the wheel and build.txt")
    w.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    a = ap.parse_args(argv)
    if a.cmd == "trim-sdist":
        trim_sdist(a.src, a.dest)
    else:
        cuda_wheel(a.cpu_wheel, a.sdist, a.architectures, a.out, a.jobs)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
