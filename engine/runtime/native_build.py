"""Builds native/ (libspecrt) against the installed llama.cpp, once per key.

The build lives in the user cache under a key made of the llama-cpp-python
version, the backend variant (CPU or CUDA libraries present), the compiler and
the hash of native/'s sources, so a changed source or a rebuilt llama.cpp gives
a fresh build and an unchanged one is reused. ``python -m engine.runtime.native_build``
builds (or finds) it and prints the library path.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from engine.core.paths import NATIVE_DIR, cache_dir
from engine.llama.install import LIB_PREFIX, LIB_SUFFIX, LlamaInstallError, find_install, source_tree


class NativeBuildError(RuntimeError):
    """The native runtime could not be built; the message says what to install or fix."""


def _sources_hash() -> str:
    h = hashlib.sha256()
    for path in sorted(NATIVE_DIR.rglob("*")):
        if path.is_file() and path.suffix in {".cpp", ".h", ".txt", ".cmake"}:
            h.update(str(path.relative_to(NATIVE_DIR)).encode())
            h.update(path.read_bytes())
    return h.hexdigest()


def build_key() -> str:
    install = find_install()
    h = hashlib.sha256()
    h.update(install.version.encode())
    h.update(b"cuda" if install.is_cuda else b"cpu")
    h.update(str(install.prefix).encode())
    h.update(_sources_hash().encode())
    h.update((os.environ.get("CXX") or shutil.which("c++") or "").encode())
    return h.hexdigest()[:16]


def library_path() -> Path:
    """Path of the built library for the current key (it may not exist yet)."""
    return cache_dir() / "specrt" / build_key() / f"{LIB_PREFIX}specrt{LIB_SUFFIX}"


def _run(cmd: list[str], log: Path) -> None:
    with log.open("a") as fh:
        fh.write("$ " + " ".join(cmd) + "\n")
        fh.flush()
        proc = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT)
    if proc.returncode != 0:
        tail = log.read_text(errors="replace")[-3000:]
        raise NativeBuildError(f"building native/ failed ({' '.join(cmd[:2])}...); log {log}:\n{tail}")


def ensure_built(verbose: bool = False) -> Path:
    """Return the path of libspecrt, building it first when missing or stale."""
    override = os.environ.get("SPECTUNE_SPECRT")
    if override:
        return Path(override)
    try:
        lib = library_path()
    except LlamaInstallError as exc:
        raise NativeBuildError(str(exc)) from exc
    if lib.exists():
        return lib
    cmake = shutil.which("cmake")
    if not cmake:
        raise NativeBuildError(
            "CMake is needed to build SpecTune's native runtime: install it (apt-get install cmake, "
            "or pip install cmake) and try again"
        )
    if not (os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++") or shutil.which("cl")):
        raise NativeBuildError(
            "a C++ compiler is needed to build SpecTune's native runtime: install g++ "
            "(Linux) or the MSVC build tools (Windows)"
        )
    install = find_install()
    src = source_tree()
    out_dir = lib.parent
    work = out_dir.with_name(out_dir.name + f".build-{os.getpid()}")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    log = work / "build.log"
    if verbose:
        print(f"[specrt] building native runtime in {work}", file=sys.stderr)
    t0 = time.monotonic()
    _run(
        [
            cmake,
            "-S",
            str(NATIVE_DIR),
            "-B",
            str(work / "build"),
            "-DCMAKE_BUILD_TYPE=Release",
            f"-DLLAMA_PREFIX={install.prefix}",
            f"-DLLAMA_SRC={src}",
        ],
        log,
    )
    _run([cmake, "--build", str(work / "build"), "--config", "Release", "-j", str(os.cpu_count() or 2)], log)
    built = next((p for p in (work / "build").rglob(f"{LIB_PREFIX}specrt{LIB_SUFFIX}")), None)
    if built is None:
        raise NativeBuildError(f"the build finished but produced no {LIB_PREFIX}specrt{LIB_SUFFIX}; log {log}")
    shutil.copy2(built, work / lib.name)
    shutil.copy2(log, work / "build-done.log")
    shutil.rmtree(work / "build", ignore_errors=True)
    try:
        work.rename(out_dir)  # atomic: a concurrent builder that lost the race just uses the winner's
    except OSError:
        shutil.rmtree(work, ignore_errors=True)
    if verbose:
        print(f"[specrt] built in {time.monotonic() - t0:.1f}s", file=sys.stderr)
    return lib


def main() -> int:
    try:
        print(ensure_built(verbose=True))
    except (NativeBuildError, LlamaInstallError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
