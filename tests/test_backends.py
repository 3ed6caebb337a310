"""engine.llama.backends: ggml's backend modules, loaded from the install and accounted for, on the real build."""

from __future__ import annotations

import ctypes
import json
import platform
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from engine.llama.backends import (
    NATIVE,
    BackendModule,
    BackendReport,
    load_backends,
    loader_message,
    module_files,
    split_module_name,
    why_not_loadable,
)
from engine.llama.install import find_install
from engine.models.synthetic import PairSpec, write_pair

from .repo_sources import packaging_script

X86 = platform.machine().lower() in ("x86_64", "amd64")
# the variants below haswell: the x86-64 levels without AVX2 (ggml/src/CMakeLists.txt)
BELOW_AVX2 = {"x64", "sse42", "sandybridge", "ivybridge", "piledriver"}


def mapped_files() -> set[str]:
    """The files mapped into this process (Linux), to see which module the loader really took."""
    return {line.split(maxsplit=5)[-1] for line in Path("/proc/self/maps").read_text().splitlines() if "/" in line}


def cpu_flags() -> set[str]:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()


@pytest.mark.parametrize(
    "name, expected",
    [
        ("libggml-cpu-haswell.so", ("cpu", "haswell")),
        ("libggml-cpu-android_armv8.2_1.so", ("cpu", "android_armv8.2_1")),
        ("libggml-cuda.so", ("cuda", "")),
        ("ggml-cpu-x64.dll", ("cpu", "x64")),
    ],
)
def test_module_names(name, expected):
    assert split_module_name(name) == expected


def test_a_missing_driver_is_said_as_such():
    message = "libcuda.so.1: cannot open shared object file: No such file or directory"
    assert why_not_loadable("cuda", message) == f"CUDA backend present; no NVIDIA driver ({message})"
    assert why_not_loadable("cuda", "x.so: invalid ELF header") == "cannot be loaded: x.so: invalid ELF header"


def cpu_modules() -> list[BackendModule]:
    return [m for m in load_backends().modules if m.backend == "cpu"]


def picked_cpu_file() -> str:
    """The CPU module file ggml took ("libggml-cpu-zen4.so", or a native build's "libggml-cpu.so")."""
    return next(m.file for m in cpu_modules() if m.loaded)


def test_the_cpu_module_taken_is_the_one_mapped_and_no_other():
    install = find_install()
    report = load_backends()
    assert report.error == "" and report.directory == str(install.backend_dir)
    picked = picked_cpu_file()
    assert [m.file for m in cpu_modules() if m.loaded] == [picked]
    if sys.platform.startswith("linux"):  # what the loader really took, from the install's folder
        maps = mapped_files()
        assert str(install.backend_dir / picked) in maps
        assert not [f for f in maps if "libggml-cpu" in f and Path(f).name != picked]
    assert [d.type for d in report.devices] == ["CPU"] and report.devices[0].backend == "CPU"
    assert BackendReport.from_dict(json.loads(json.dumps(report.to_dict()))) == report


@pytest.mark.skipif(not sys.platform.startswith("linux") or not X86, reason="the x86-64 CPU variants, on Linux")
@pytest.mark.skipif(len(cpu_modules()) == 1, reason="a native build (scripts/setup.sh without --portable)")
def test_the_portable_install_loads_the_best_cpu_variant_and_says_why_not_the_others():
    """The build the bundles ship (setup.sh --portable; packaging/smoke_test.sh checks the bundle's)."""
    cpu = cpu_modules()
    report = load_backends()
    assert {"x64", "sse42", "haswell", "skylakex"} <= {m.variant for m in cpu}  # GGML_CPU_ALL_VARIANTS
    picked = report.cpu_variant
    assert picked_cpu_file() == f"libggml-cpu-{picked}.so"
    # ggml's score agrees with the CPU's flags on the line that matters most (AVX2)
    assert ("avx2" in cpu_flags()) == (picked not in BELOW_AVX2)
    for m in cpu:
        if not m.loaded:
            assert m.why, m
    if picked != "x64":  # the baseline runs on any x86-64 CPU
        assert next(m for m in cpu if m.variant == "x64").why == f"runs on this CPU, but {picked} scores higher"
    assert report.lines()[0].startswith(f"CPU: the {picked} variant of {len(cpu)}")


# ggml-cpu/arch/x86/cpu-feats.cpp: what each feature compiled into a module adds to its score (1 to start)
SCORE_BITS = {"FMA": 0, "F16C": 1, "SSE42": 2, "BMI2": 3, "AVX": 4, "AVX2": 5, "AVX_VNNI": 6, "AVX512": 7}
SCORE_BITS |= {"AVX512_VBMI": 8, "AVX512_BF16": 9, "AVX512_VNNI": 10, "AMX_INT8": 11}


@pytest.mark.skipif(not sys.platform.startswith("linux") or not X86, reason="the native build is for x86-64 Linux")
@pytest.mark.skipif(len(cpu_modules()) != 1, reason="a portable build (scripts/setup.sh --portable)")
def test_the_native_install_has_one_cpu_module_with_the_features_this_cpu_has():
    """setup.sh's default: one CPU module compiled with packaging/cpu_features.py's switches for this CPU. The
    module's own score (ggml's check of the features compiled into it) shows which switches reached it."""
    cpu_features = packaging_script("cpu_features")
    install = find_install()
    report = load_backends()
    assert picked_cpu_file() == "libggml-cpu.so" and report.cpu_variant == NATIVE
    assert report.lines()[0] == f"CPU: one module, built for this CPU ({NATIVE}: scripts/setup.sh without --portable)"
    switched_on = [s.removeprefix("-DGGML_").removesuffix("=ON") for s in cpu_features.native_switches(cpu_flags())]
    expected = 1 + sum(1 << SCORE_BITS[f] for f in switched_on if f in SCORE_BITS)
    module = ctypes.CDLL(str(install.backend_dir / "libggml-cpu.so"))
    assert module.ggml_backend_score() == expected
    assert expected >= 1 + (1 << SCORE_BITS["SSE42"])  # every x86-64 CPU of the last 15 years has SSE4.2


def test_specrt_runs_on_the_backends_loaded_here():
    """libspecrt, loaded before the modules (llama-server's order), shares libggml with engine.llama.backends:
    the same devices."""
    from engine.runtime.binding import devices

    assert [d["name"] for d in devices()] == [d.name for d in load_backends().devices]


def run_python(code: str, cwd: Path) -> subprocess.CompletedProcess:
    """A fresh process: ggml's registry is one per process, and this one's is loaded already."""
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, timeout=300)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/self/maps")
def test_the_engine_loads_llama_cpps_libraries_before_the_backend_modules(tmp_path):
    """llama-server's order: libspecrt with libllama and libllama-common first, the modules after. The other
    order died inside dlopen(libspecrt) on an H200 with the CUDA module loaded (engine.runtime.binding)."""
    r = run_python(
        "import engine.runtime.binding as b\n"
        "first = b.load_backends\n"
        "def spy():\n"
        "    maps = open('/proc/self/maps').read()\n"
        "    print('libspecrt' in maps, 'libllama-common' in maps, 'libggml-cpu' in maps)\n"
        "    return first()\n"
        "b.load_backends = spy\n"
        "b.load_library()\n"
        "print('libggml-cpu' in open('/proc/self/maps').read())",
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.split() == ["True", "True", "False", "True"], r.stdout


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/self/maps")
def test_the_working_directory_is_not_searched(tmp_path):
    """llama.cpp's default (llama_backend_init -> ggml_backend_load_all) would take a module from the working
    directory; the engine takes them from the install only."""
    install = find_install()
    # the very module ggml would choose, so that without the engine's own loading it would come from here
    stray = install.backend_dir / picked_cpu_file()
    shutil.copy2(stray, tmp_path / stray.name)
    r = run_python(
        "from engine.runtime.binding import devices; devices()\n"
        "print('\\n'.join(l.split()[-1] for l in open('/proc/self/maps') if 'libggml-cpu' in l))",
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    taken = set(r.stdout.split())
    assert taken and all(Path(f).parent == install.backend_dir for f in taken), taken


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="builds an ELF shared library")
def test_a_module_the_loader_refuses_is_reported_with_its_reason(tmp_path):
    """A CUDA module on a machine without the NVIDIA driver, made for real: a library that needs
    libcuda.so.1, built against a stub that is then taken away. The CPU still loads."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler")
    stub_dir, backends = tmp_path / "stub", tmp_path / "bin"
    stub_dir.mkdir()
    backends.mkdir()
    (tmp_path / "stub.c").write_text("int cuInit(unsigned flags) { return 0; }\n")
    (tmp_path / "cuda.c").write_text("int cuInit(unsigned); int ggml_backend_score(void) { return cuInit(0) + 1; }\n")
    shared = [cc, "-shared", "-fPIC"]
    subprocess.run(
        [*shared, "-Wl,-soname,libcuda.so.1", "-o", stub_dir / "libcuda.so.1", tmp_path / "stub.c"], check=True
    )
    (stub_dir / "libcuda.so").symlink_to("libcuda.so.1")
    cuda = [*shared, "-o", backends / "libggml-cuda.so", tmp_path / "cuda.c", f"-L{stub_dir}", "-lcuda"]
    subprocess.run(cuda, check=True)
    shutil.rmtree(stub_dir)
    install = find_install()
    for module in module_files(install.backend_dir):
        if split_module_name(module.name)[0] == "cpu":  # a CUDA build's own module would replace the made one
            shutil.copy2(module, backends / module.name)
    r = run_python(
        "import dataclasses, json\n"
        "from pathlib import Path\n"
        "from engine.llama.backends import load_backends\n"
        "from engine.llama.install import find_install\n"
        f"install = dataclasses.replace(find_install(), bin_dir=Path({str(backends)!r}))\n"
        "print(json.dumps(load_backends(install).to_dict()))",
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    report = BackendReport.from_dict(json.loads(r.stdout))
    cuda = next(m for m in report.modules if m.backend == "cuda")
    assert not cuda.loaded and cuda.why.startswith("CUDA backend present; no NVIDIA driver (")
    assert "libcuda.so.1" in cuda.why
    assert report.cpu_variant == load_backends().cpu_variant and not report.error
    assert any(line.startswith("CUDA: not loaded: CUDA backend present; no NVIDIA driver") for line in report.lines())


@pytest.mark.skipif(not find_install().is_cuda, reason="the CPU build has no CUDA module")
def test_the_cuda_builds_module_finds_cublas_and_says_when_the_driver_is_missing():
    """The CUDA variant (setup.sh --cuda): its module finds cuBLAS and the runtime through its own RUNPATH,
    so on a machine without the NVIDIA driver the one thing missing is the driver's libcuda.so.1."""
    report = load_backends()
    cuda = next(m for m in report.modules if m.backend == "cuda")
    if cuda.loaded:  # a machine with the driver: the GPUs are devices of the CUDA backend
        assert any(d.backend == "CUDA" for d in report.devices)
        return
    assert cuda.why.startswith("CUDA backend present; no NVIDIA driver (libcuda.so.1"), cuda.why
    assert report.cpu_variant and not report.error  # the same install runs on the CPU


def test_llama_cpp_pythons_own_bindings_run_on_the_backends_loaded_from_the_install(tmp_path):
    """Nothing in SpecTune imports llama-cpp-python's bindings today; whoever does calls load_backends()
    first, and the bindings' libllama then shares that libggml (by SONAME) and its backends. Without it
    they would have none: the wheel's libggml loads no module by itself."""
    target, _ = write_pair(tmp_path, PairSpec())
    r = run_python(
        "from engine.llama.backends import load_backends\n"
        "report = load_backends()\n"
        "import llama_cpp\n"
        f"llm = llama_cpp.Llama(model_path={str(target)!r}, n_ctx=64, verbose=False)\n"
        "out = llm('def', max_tokens=4, temperature=0.0)\n"
        "print(report.cpu_variant, out['usage']['completion_tokens'])",
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    variant, generated = r.stdout.split()
    assert variant == str(load_backends().cpu_variant) and int(generated) > 0


def test_the_loaders_words_survive_the_frozen_bundles_ctypes():
    """PyInstaller's CDLL replaces the loader's OSError with its own, raised from it; the report keeps the
    loader's (seen in the CUDA bundle: it had said 'not found when the application was frozen')."""
    loader = OSError("libcuda.so.1: cannot open shared object file: No such file or directory")
    try:
        try:
            raise loader
        except OSError as base_error:
            raise OSError("Failed to load dynlib/dll 'x.so'. Most likely ... frozen.") from base_error
    except OSError as frozen:
        assert loader_message(frozen) == str(loader)
        assert why_not_loadable("cuda", loader_message(frozen)).startswith("CUDA backend present; no NVIDIA driver")
    assert loader_message(OSError("plain")) == "plain"


def test_functions_a_windows_ggml_dll_does_not_export_are_bound_from_ggml_base_beside_it():
    """On Windows ggml.dll exports only its own functions: the backend registry's (ggml-backend.cpp) and
    ggml_log_set live in ggml-base.dll. Here the real libggml stands in for such a DLL by hiding those names,
    as Windows' export table would; _bind must take them from the ggml-base library beside it."""
    import ctypes

    from engine.llama.backends import _bind, ggml_library

    lib = ctypes.CDLL(str(ggml_library(find_install())))
    hidden = {"ggml_backend_reg_name", "ggml_backend_dev_name", "ggml_log_set"}

    class ExportsOwnOnly:
        _name = lib._name

        def __getattr__(self, name):
            if name in hidden:
                raise AttributeError(name)
            return getattr(lib, name)

    bound = _bind(ExportsOwnOnly())  # type: ignore[arg-type]
    base = ctypes.CDLL(str(Path(lib._name).with_name("libggml-base.so")))
    for name in hidden:
        fn = getattr(bound, name)
        assert ctypes.cast(fn, ctypes.c_void_p).value == ctypes.cast(getattr(base, name), ctypes.c_void_p).value
    assert bound.ggml_backend_dev_count() >= 1  # a function ggml exports itself, bound as before
