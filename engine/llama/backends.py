"""ggml's backends: loaded from the install, and what became of each.

The pinned llama.cpp is built with GGML_BACKEND_DL (scripts/setup.sh): every backend is a module
file beside llama-server in the install's bin/ folder: the CPU backend once per x86-64 level in the
portable build (libggml-cpu-x64.so ... libggml-cpu-sapphirerapids.so), or once, for the CPU it was built
on, in a source install's native build (libggml-cpu.so), and a CUDA build's libggml-cuda.so. libggml
loads none of them until asked. llama.cpp's default, ggml_backend_load_all() (which
llama_backend_init() calls when nothing is loaded yet), looks in the program's own folder and in
the working directory: for a Python process that is the interpreter's folder and wherever the
user happens to be. So every process that uses llama.cpp calls ``load_backends()`` first, and it
loads them from the install's folder and nowhere else. For each backend ggml keeps the module
with the highest ``ggml_backend_score`` (0: this machine cannot run it).

``load_backends()`` also says what happened, for ``spectune gpus`` and the Hardware page: which
modules were loaded (which CPU variant ggml picked), which devices they brought, and for every
module that was not loaded, why (the loader's own message for one that would not load).

The Python bindings of llama-cpp-python 0.3.36 do not expose ggml_backend_load_all_from_path
(upstream request #2069), so this calls libggml through ctypes. It must be the libggml that
libllama uses: the one file the loader resolves for libllama's NEEDED entry (lib/libggml.so.0).
Whichever of them a process loads first, the others share it, since the loader matches libraries
by SONAME (or by file when a path is given): the engine worker loads libspecrt first and the
modules after it, as llama-server does (engine.runtime.binding says why); the GUI process loads
the modules alone; llama-cpp-python's own bindings, which nothing in SpecTune imports today, load
after this (tests/test_backends.py shows the orders that work).
"""

from __future__ import annotations

import ctypes
import re
import sys
import threading
from dataclasses import asdict, dataclass, field
from pathlib import Path

from engine.llama.install import LIB_PREFIX, LIB_SUFFIX, LlamaInstall, LlamaInstallError, find_install

# ggml_backend_dev_type, in the order of ggml-backend.h
DEVICE_TYPES = ("CPU", "GPU", "IGPU", "ACCEL", "META")
# ggml-backend-reg.cpp's load_backend() logs this line for each module it takes
_LOADED_LINE = re.compile(r"loaded (?P<backend>\S+) backend from (?P<path>.+?)\s*$")
# the loader's message when a module needs the NVIDIA driver's library and there is none
_NO_DRIVER = ("libcuda.so", "nvcuda.dll")
# the name given to the one CPU module of a native build (libggml-cpu.so, packaging/cpu_features.py)
NATIVE = "native"
# how a module that would run here but lost to a better one is described (and recognised in lines())
_LOWER_SCORE = "runs on this CPU"


@dataclass(frozen=True)
class BackendModule:
    file: str  # libggml-cpu-haswell.so
    backend: str  # cpu, cuda, ...
    variant: str  # haswell; "" for a backend built once
    loaded: bool
    why: str = ""  # why it was not loaded (empty when it was)


@dataclass(frozen=True)
class BackendDevice:
    name: str  # CPU, CUDA0
    description: str
    backend: str  # the registered backend's name (CPU, CUDA)
    type: str  # CPU, GPU, IGPU, ACCEL


@dataclass
class BackendReport:
    directory: str  # where the modules were looked for
    modules: list[BackendModule] = field(default_factory=list)
    devices: list[BackendDevice] = field(default_factory=list)
    error: str = ""  # why nothing could be loaded at all

    @property
    def cpu_variant(self) -> str | None:
        """The CPU module ggml picked ("haswell", or NATIVE for the one module of a native build); None when
        none was loaded."""
        return next((m.variant or NATIVE for m in self.modules if m.backend == "cpu" and m.loaded), None)

    def to_dict(self) -> dict:
        return asdict(self) | {"cpu_variant": self.cpu_variant}

    @classmethod
    def from_dict(cls, d: dict) -> BackendReport:
        """The report a worker sent in its hello (see to_dict)."""
        return cls(
            str(d.get("directory", "")),
            [BackendModule(**m) for m in d.get("modules", [])],
            [BackendDevice(**x) for x in d.get("devices", [])],
            str(d.get("error", "")),
        )

    def lines(self) -> list[str]:
        """The report in words, one backend a line."""
        if self.error:
            return [f"no llama.cpp backend loaded: {self.error}"]
        by_backend: dict[str, list[BackendModule]] = {}
        for m in self.modules:
            by_backend.setdefault(m.backend, []).append(m)
        out = []
        for backend, mods in by_backend.items():
            loaded = [m for m in mods if m.loaded]
            devices = [d for d in self.devices if d.backend.lower() == backend]
            if backend == "cpu" and len(mods) > 1:
                out.append(_cpu_line(mods))
            elif backend == "cpu" and loaded and not loaded[0].variant:
                out.append(f"CPU: one module, built for this CPU ({NATIVE}: scripts/setup.sh without --portable)")
            elif loaded and devices:
                out.append(f"{backend.upper()}: loaded; " + ", ".join(f"{d.name} ({d.description})" for d in devices))
            elif loaded:
                out.append(f"{backend.upper()}: loaded, but it found no device")
            else:
                out.append(f"{backend.upper()}: not loaded: {mods[0].why}")
        if not self.modules:  # a build with its backends linked into libggml (no GGML_BACKEND_DL)
            out += [f"{d.backend}: {d.name} ({d.description}), linked in" for d in self.devices]
        return out


def _cpu_line(mods: list[BackendModule]) -> str:
    picked = next((m for m in mods if m.loaded), None)
    runs = [m.variant for m in mods if not m.loaded and m.why.startswith(_LOWER_SCORE)]
    cannot = [m.variant for m in mods if not m.loaded and not m.why.startswith(_LOWER_SCORE)]
    head = f"CPU: the {picked.variant} variant" if picked else "CPU: no variant loaded"
    parts = [f"{head} of {len(mods)}"]
    if runs:
        parts.append(f"would also run here, scoring lower: {', '.join(runs)}")
    if cannot:
        reasons = sorted({m.why for m in mods if m.variant in cannot})
        parts.append(f"not for this CPU: {', '.join(cannot)} ({'; '.join(reasons)})")
    return "; ".join(parts)


def ggml_library(install: LlamaInstall) -> Path:
    """The libggml file libllama is linked to, as the loader finds it: lib/libggml.so.<major> (its SONAME)
    on Linux, bin/ggml.dll on Windows, where llama.cpp installs the DLLs."""
    if sys.platform == "win32":
        return install.bin_dir / "ggml.dll"
    # libggml.so.0 rather than libggml.so or libggml.so.0.25.3: the wheel holds all three as copies
    named = sorted(install.lib_dir.glob(f"{LIB_PREFIX}ggml{LIB_SUFFIX}.*"), key=lambda p: len(p.name))
    if not named:
        raise LlamaInstallError(f"no {LIB_PREFIX}ggml{LIB_SUFFIX}.N in {install.lib_dir}; run scripts/setup.sh")
    return named[0]


def module_files(directory: Path) -> list[Path]:
    """The backend modules in ``directory`` (ggml's own pattern: [lib]ggml-NAME[-VARIANT].so|.dll)."""
    prefix, suffix = ("ggml-", ".dll") if sys.platform == "win32" else ("libggml-", ".so")
    # on Windows bin/ also holds ggml-base.dll, which every module links and which is no backend
    return sorted(p for p in directory.glob(f"{prefix}*{suffix}") if p.name != f"{prefix}base{suffix}")


def split_module_name(name: str) -> tuple[str, str]:
    """ "libggml-cpu-haswell.so" -> ("cpu", "haswell"); "libggml-cuda.so" -> ("cuda", "")."""
    stem = name.removeprefix("lib").removeprefix("ggml-").rsplit(".", 1)[0]
    backend, _, variant = stem.partition("-")
    return backend, variant


def why_not_loadable(backend: str, loader_message: str) -> str:
    """The loader's refusal in words; the NVIDIA driver's absence said as such."""
    if any(lib in loader_message for lib in _NO_DRIVER):
        return f"{backend.upper()} backend present; no NVIDIA driver ({loader_message})"
    return f"cannot be loaded: {loader_message}"


def loader_message(exc: OSError) -> str:
    """The dynamic loader's own words for a module it refused. In the frozen bundle PyInstaller's ctypes
    raises its own "Failed to load dynlib/dll ... not found when the application was frozen" instead,
    with the loader's error as the cause."""
    cause = exc.__cause__
    return str(cause) if isinstance(cause, OSError) else str(exc)


_report: BackendReport | None = None
_lock = threading.Lock()


def load_backends(install: LlamaInstall | None = None) -> BackendReport:
    """Load the install's backend modules into this process (once; later calls return the first report)."""
    global _report
    with _lock:
        if _report is None:
            _report = _load(install)
        return _report


def _load(install: LlamaInstall | None) -> BackendReport:
    try:
        install = install or find_install()
        directory = install.backend_dir
        ggml = _bind(ctypes.CDLL(str(ggml_library(install))))
    except (LlamaInstallError, OSError) as exc:
        return BackendReport("", error=str(exc))
    # a registry that is not empty holds backends linked into libggml (a build without GGML_BACKEND_DL):
    # then there are no modules to load or to account for
    modules = []
    if ggml.ggml_backend_reg_count() == 0:
        with _GgmlLog(ggml) as log:
            ggml.ggml_backend_load_all_from_path(str(directory).encode())
        taken = {}  # backend name -> the module file ggml took for it
        for line in log.lines:
            if m := _LOADED_LINE.search(line):
                taken[m["backend"].lower()] = Path(m["path"]).name
        modules = _modules(module_files(directory), taken)
    devices = [_device(ggml, ggml.ggml_backend_dev_get(i)) for i in range(ggml.ggml_backend_dev_count())]
    error = "" if devices else f"no backend module in {directory} could be loaded; rebuild with scripts/setup.sh"
    return BackendReport(str(directory), modules, devices, error)


def _modules(files: list[Path], taken: dict[str, str]) -> list[BackendModule]:
    out = []
    for path in files:
        backend, variant = split_module_name(path.name)
        if taken.get(backend) == path.name:
            out.append(BackendModule(path.name, backend, variant, True))
            continue
        try:
            score = _score(path)
        except OSError as exc:
            why = why_not_loadable(backend, loader_message(exc))
            out.append(BackendModule(path.name, backend, variant, False, why))
            continue
        if score == 0:
            why = "needs instructions this CPU lacks" if backend == "cpu" else "not supported on this system"
        elif backend in taken:
            why = f"{_LOWER_SCORE}, but {split_module_name(taken[backend])[1] or taken[backend]} scores higher"
        else:
            why = "loads, but ggml did not register it"
        out.append(BackendModule(path.name, backend, variant, False, why))
    return out


def _score(path: Path) -> int | None:
    """The module's ggml_backend_score() (None: it has none), as ggml_backend_load_best asks it.

    Loading a module ggml rejected is safe: ggml itself loads every candidate to ask; the score
    function is compiled without the variant's instruction set for that reason."""
    lib = ctypes.CDLL(str(path), mode=getattr(ctypes, "RTLD_LOCAL", 0))
    try:
        fn = getattr(lib, "ggml_backend_score", None)
        if fn is None:
            return None
        fn.restype = ctypes.c_int
        return int(fn())
    finally:
        _unload(lib)


def _unload(lib: ctypes.CDLL) -> None:
    import _ctypes

    close = getattr(_ctypes, "FreeLibrary" if sys.platform == "win32" else "dlclose")
    close(lib._handle)


def _device(ggml: ctypes.CDLL, dev: int) -> BackendDevice:
    reg = ggml.ggml_backend_dev_backend_reg(dev)
    kind = ggml.ggml_backend_dev_type(dev)
    return BackendDevice(
        _text(ggml.ggml_backend_dev_name(dev)),
        _text(ggml.ggml_backend_dev_description(dev)),
        _text(ggml.ggml_backend_reg_name(reg)),
        DEVICE_TYPES[kind] if 0 <= kind < len(DEVICE_TYPES) else str(kind),
    )


def _text(raw: bytes | None) -> str:
    return (raw or b"").decode(errors="replace")


def _bind(ggml: ctypes.CDLL) -> ctypes.CDLL:
    p, s, c = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p
    base: ctypes.CDLL | None = None
    for name, args, res in (
        ("ggml_backend_load_all_from_path", [c], None),
        ("ggml_backend_reg_count", [], s),
        ("ggml_backend_reg_name", [p], c),
        ("ggml_backend_dev_count", [], s),
        ("ggml_backend_dev_get", [s], p),
        ("ggml_backend_dev_name", [p], c),
        ("ggml_backend_dev_description", [p], c),
        ("ggml_backend_dev_type", [p], ctypes.c_int),
        ("ggml_backend_dev_backend_reg", [p], p),
        ("ggml_log_set", [_LOG_FN, p], None),
    ):
        try:
            fn = getattr(ggml, name)
        except AttributeError:
            # Windows: a DLL exports its own functions only, and these (ggml-backend.cpp, ggml.c) live in
            # ggml-base.dll beside ggml.dll; on Linux dlsym finds them through libggml's NEEDED entries.
            # Seen under Wine with a mingw-w64 build (packaging/wine_check.sh)
            if base is None:
                base = ctypes.CDLL(str(Path(ggml._name).with_name(f"{LIB_PREFIX}ggml-base{LIB_SUFFIX}")))
            fn = getattr(base, name)
            setattr(ggml, name, fn)
        fn.argtypes = args
        fn.restype = res
    return ggml


# void (*ggml_log_callback)(enum ggml_log_level level, const char * text, void * user_data)
_LOG_FN = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p)


class _GgmlLog:
    """ggml's log while loading, kept instead of printed: it names the module taken for each backend.
    ggml's default logger (stderr) is back afterwards; libspecrt installs its own when it starts."""

    def __init__(self, ggml: ctypes.CDLL):
        self._ggml = ggml
        self.lines: list[str] = []
        self._fn = _LOG_FN(lambda _level, text, _user: self.lines.append(_text(text)))

    def __enter__(self) -> _GgmlLog:
        self._ggml.ggml_log_set(self._fn, None)
        return self

    def __exit__(self, *exc: object) -> None:
        self._ggml.ggml_log_set(_LOG_FN(), None)
