"""packaging/: the frozen entry's dispatch, the bundle's llama.cpp layout, the Qt trimming, cuda_arch.

No PyInstaller build here (packaging/build_linux.sh and smoke_test.sh do that).
The modules are loaded from their files: the folder is not a package, and its
name would shadow the PyPI ``packaging`` distribution if it were.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from .fake_nvml import FakeNVML, h100, rtx4090
from .repo_sources import packaging_script, pinned_llama_source

REPO = Path(__file__).resolve().parent.parent


entry = packaging_script("entry")
cuda_arch = packaging_script("cuda_arch")
prune = packaging_script("prune")
llama_bundle = packaging_script("llama_bundle")
cuda_build = packaging_script("cuda_build")
cpu_features = packaging_script("cpu_features")
dependencies = packaging_script("dependencies")


# -- the entry's dispatch ---------------------------------------------------------------------

CLI = {"run", "demo", "server-path", "gui"}


@pytest.mark.parametrize(
    "argv, kind, args",
    [
        (["-m", "engine.runtime.worker"], "worker", []),
        (["-m", "engine.core.child_call"], "child", []),  # the app's ranking and header parses
        (["run", "--target", "t.gguf", "--prompt", "x"], "cli", ["run", "--target", "t.gguf", "--prompt", "x"]),
        (["server-path"], "cli", ["server-path"]),
        (["--help"], "cli", ["--help"]),
        (["-m", "app", "--demo"], "gui", ["--demo"]),  # how `spectune gui` starts the app
        ([], "gui", []),
        (["--selftest"], "gui", ["--selftest"]),
    ],
)
def test_route(argv, kind, args):
    assert entry.route(argv, CLI) == (kind, args)


def test_no_arguments_and_no_display_runs_the_headless_cli():
    assert entry.route([], CLI, has_display=False) == ("cli", [])
    assert entry.route(["--selftest"], CLI, has_display=False) == ("gui", ["--selftest"])
    assert not entry.has_display({}, "linux")
    assert entry.has_display({"WAYLAND_DISPLAY": "wayland-0"}, "linux")
    assert entry.has_display({"QT_QPA_PLATFORM": "offscreen"}, "linux")
    assert entry.has_display({}, "win32")


@pytest.mark.parametrize("argv", [["-m"], ["-m", "os"], ["-m", "engine.cli"]])
def test_only_the_worker_module_runs(argv):
    with pytest.raises(SystemExit, match="runs only -m engine.runtime.worker"):
        entry.route(argv, CLI)


def test_cli_commands_come_from_the_real_parser():
    assert {"run", "demo", "server-path", "gui", "tune"} <= entry.cli_commands()


def test_prepare_frozen_points_at_the_bundle(tmp_path):
    env, path = {}, ["/somewhere"]
    entry.prepare_frozen(tmp_path, env, path)
    root = tmp_path / "llama" / "site-packages"
    assert path == ["/somewhere", str(root)]
    assert env["SPECTUNE_SPECRT"] == str(root / "lib" / entry.specrt_name())
    entry.prepare_frozen(tmp_path, env, path)  # idempotent
    assert path.count(str(root)) == 1


def test_a_users_specrt_wins(tmp_path):
    env = {"SPECTUNE_SPECRT": "/mine/libspecrt.so"}
    entry.prepare_frozen(tmp_path, env, [])
    assert env["SPECTUNE_SPECRT"] == "/mine/libspecrt.so"


def test_the_bundle_layout_satisfies_find_install(tmp_path, monkeypatch):
    """What llama_bundle stages is what engine.llama.install.find_install() accepts."""
    import engine.llama.install as li

    root, _ = entry.bundle_paths(tmp_path)
    for rel in ("bin/llama-server", "include/llama.h", "lib/libllama-common.so.0"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(b"")
    (root / "lib" / "libllama-common.so").symlink_to("libllama-common.so.0")
    # as in a frozen app: the interpreter's own site-packages do not exist, the bundle's root is on sys.path
    monkeypatch.setattr(
        li.sysconfig, "get_paths", lambda: {"platlib": str(tmp_path / "none"), "purelib": str(tmp_path / "none")}
    )
    monkeypatch.setattr(sys, "path", [str(root)])
    # the bundle carries llama-cpp-python's dist-info at its top (the spec's copy_metadata); the
    # smoke test's `spectune server-path` checks that part in a real bundle
    monkeypatch.setattr(li, "installed_version", lambda: li.LLAMA_CPP_PYTHON_VERSION)
    install = li.find_install()
    assert install.prefix == root and install.tool("llama-server") == root / "bin" / "llama-server"
    assert install.backend_dir == root / "bin"  # the backend modules sit beside the server


@pytest.mark.slow
def test_the_worker_runs_through_the_entry_unfrozen():
    """`entry.py -m engine.runtime.worker` is the worker: it says hello and obeys shutdown (needs libspecrt)."""
    from engine.runtime.native_build import NativeBuildError, ensure_built

    try:
        ensure_built()
    except NativeBuildError as exc:
        pytest.skip(f"native runtime not built: {exc}")
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.run(
        [sys.executable, str(REPO / "packaging" / "entry.py"), "-m", "engine.runtime.worker"],
        input=b'{"cmd": "shutdown", "id": 1}\n',
        capture_output=True,
        env=env,
        timeout=120,
    )
    lines = proc.stdout.decode().splitlines()
    assert proc.returncode == 0, proc.stderr.decode()[-2000:]
    assert '"event":"hello"' in lines[0] and '"event":"bye"' in lines[-1]


# -- trimming Qt ----------------------------------------------------------------------------------


def test_qt_pieces_dropped_and_kept():
    dropped = [
        "PySide6/Qt/plugins/platformthemes/libqgtk3.so",
        "PySide6/Qt/lib/libQt6Quick.so.6",
        "libQt6Network.so.6",
        "PySide6/Qt/translations/qt_de.qm",
        "PySide6/Qt/plugins/platforms/libqeglfs.so",
    ]
    kept = [
        "PySide6/Qt/plugins/platforms/libqxcb.so",
        "PySide6/Qt/plugins/platforms/libqoffscreen.so",
        "PySide6/Qt/lib/libQt6Widgets.so.6",
        "libQt6OpenGL.so.6",
        "libQt6Svg.so.6",
        "libssl.so.3",
        "PySide6/Qt/plugins/iconengines/libqsvgicon.so",
    ]
    assert all(prune.is_dropped(d) for d in dropped)
    assert not any(prune.is_dropped(k) for k in kept)


def test_only_libraries_that_only_dropped_pieces_needed_go():
    needs = {
        "gtk-plugin": ["libgtk-3.so.0", "libglib-2.0.so.0"],
        "libgtk-3.so.0": ["libpango.so.1"],
        "qtcore": ["libglib-2.0.so.0"],
        "libpango.so.1": ["libglib-2.0.so.0"],
    }
    kept = [
        ("PySide6/Qt/lib/libQt6Core.so.6", "qtcore", "BINARY"),
        ("libgtk-3.so.0", "libgtk-3.so.0", "BINARY"),
        ("libpango.so.1", "libpango.so.1", "BINARY"),
        ("libglib-2.0.so.0", "libglib-2.0.so.0", "BINARY"),
        ("libpython3.11.so.1.0", "libpython3.11.so.1.0", "BINARY"),
    ]  # needed by nothing, loaded by the bootloader
    dropped = [("PySide6/Qt/plugins/platformthemes/libqgtk3.so", "gtk-plugin", "BINARY")]
    out, removed = prune.prune_orphans(kept, dropped, lambda src: needs.get(src, []))
    assert removed == ["libgtk-3.so.0", "libpango.so.1"]
    assert [e[0] for e in out] == ["PySide6/Qt/lib/libQt6Core.so.6", "libglib-2.0.so.0", "libpython3.11.so.1.0"]


def test_staged_tree_becomes_toc_entries_with_links_kept(tmp_path):
    lib = tmp_path / "site-packages" / "lib"
    lib.mkdir(parents=True)
    (lib / "libllama-common.so.0").write_bytes(b"x")
    (lib / "libllama-common.so").symlink_to("libllama-common.so.0")
    toc = llama_bundle.toc_entries(tmp_path / "site-packages", "llama/site-packages")
    assert ("llama/site-packages/lib/libllama-common.so", "libllama-common.so.0", "SYMLINK") in toc
    assert ("llama/site-packages/lib/libllama-common.so.0", str(lib / "libllama-common.so.0"), "DATA") in toc


# -- cuda_arch --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "given, cmake",
    [
        ("8.9", "89"),
        ("9.0", "90"),
        ("8.6", "86"),
        ("7.5", "75"),
        ("10.0", "100"),
        ("12.0", "120a"),
        ("sm_86", "86"),
        ("compute_90", "90"),
        ("90", "90"),
        ("90a", "90a"),
        ("86-real", "86-real"),
        ("120", "120a"),
        ("120-real", "120a-real"),
        ("121a", "121a"),
    ],
)
def test_capability_to_cmake_name(given, cmake):
    assert cuda_arch.normalize(given) == cmake


@pytest.mark.parametrize("bad", ["9", "9.x", "ampere", "8.9.1", ""])
def test_unreadable_names(bad):
    with pytest.raises(cuda_arch.ArchError):
        cuda_arch.normalize(bad)


def test_the_gpus_present_decide(capsys):
    nvml = FakeNVML([h100(0), rtx4090(1), h100(2)])
    assert cuda_arch.main(["--nvcc", "none"], nvml=nvml) == 0
    assert capsys.readouterr().out.strip() == "89;90"


def test_no_gpu_and_no_list_builds_for_turing_to_blackwell(capsys):
    assert cuda_arch.main(["--nvcc", "none"], nvml=FakeNVML([]), smi=lambda: []) == 0
    out = capsys.readouterr()
    assert out.out.strip() == "75-virtual;80-virtual;86-real;89-real;90-virtual;120a-real;121a-real"
    assert "no NVIDIA GPU is visible" in out.err and "Turing to Blackwell" in out.err


@pytest.mark.skipif(cuda_arch.nvcc_archs(None) is None, reason="no nvcc on this machine")
def test_the_installed_nvcc_builds_the_default_list():
    cuda_arch.check_toolkit(list(cuda_arch.DEFAULT_ARCHS), cuda_arch.nvcc_archs(None))


def test_nvidia_smi_answers_when_nvml_cannot(capsys):
    """Before setup.sh, the system Python has no nvidia-ml-py; nvidia-smi still knows the GPUs."""
    smi = lambda: [("NVIDIA GeForce RTX 3090", "8.6"), ("NVIDIA H200", "9.0")]  # noqa: E731
    assert cuda_arch.main(["--nvcc", "none"], nvml=FakeNVML([]), smi=smi) == 0
    assert capsys.readouterr().out.strip() == "86;90"


def test_a_list_wins_over_the_gpus(capsys):
    assert cuda_arch.main(["8.6;8.9", "9.0", "--nvcc", "none"], nvml=FakeNVML([h100()])) == 0
    assert capsys.readouterr().out.strip() == "86;89;90"


def test_an_architecture_the_toolkit_cannot_build_is_refused():
    with pytest.raises(cuda_arch.ArchError, match="cannot build 61"):
        cuda_arch.check_toolkit(["61", "90"], {"75", "80", "90"})
    cuda_arch.check_toolkit(["90a", "86-real"], {"86", "90"})


# -- the offline CUDA build (cuda_build.py, for bench/gpu_check.py), without a GPU ----------------------


def test_the_cuda_build_uses_setup_sh_arguments():
    args = cuda_build.setup_cmake_args()
    assert "-DGGML_CUDA=on" in args and "-DLLAMA_BUILD_SERVER=ON" in args and "-DLLAMA_TOOLS_INSTALL=ON" in args
    # the same backend layout as the CPU build: CUDA is one more module beside the CPU variants
    assert "-DGGML_BACKEND_DL=ON" in args and "-DGGML_CPU_ALL_VARIANTS=ON" in args
    assert "-DCMAKE_INSTALL_RPATH=$ORIGIN/../lib" in args


# -- the CPU backend of a source install (cpu_features.py, for scripts/setup.sh) ---------------------

HASWELL = "fpu sse2 ssse3 sse4_1 sse4_2 avx f16c fma avx2 bmi1 bmi2 popcnt"
SAPPHIRE_RAPIDS = HASWELL + " avx512f avx512cd avx512vl avx512dq avx512bw avx512vbmi avx512_vnni avx512_bf16"
SAPPHIRE_RAPIDS += " avx_vnni amx_tile amx_int8 amx_bf16"


def switched_on(flags: str) -> list[str]:
    cpuinfo = f"processor\t: 0\nflags\t\t: {flags}\n\nprocessor\t: 1\nflags\t\t: {flags}\n"
    chosen = cpu_features.native_switches(cpu_features.cpu_flags(cpuinfo))
    assert chosen[:2] == ["-DGGML_NATIVE=OFF", "-DGGML_CPU_ALL_VARIANTS=OFF"]
    return [s.removeprefix("-DGGML_").removesuffix("=ON") for s in chosen if s.endswith("=ON")]


def test_a_native_build_switches_on_the_features_the_cpu_has_and_no_other():
    assert switched_on(HASWELL) == ["SSE42", "AVX", "F16C", "FMA", "AVX2", "BMI2"]  # ggml's haswell variant
    # AVX512 is one switch that needs five flags; AMX_BF16 is left off, as ggml's variants leave it
    assert "AVX512" not in switched_on(HASWELL + " avx512f avx512cd avx512vl avx512dq")
    # all of them: one more than ggml's sapphirerapids variant, which leaves out AVX_VNNI
    assert switched_on(SAPPHIRE_RAPIDS) == list(cpu_features.FEATURES)
    assert switched_on("fpu sse2") == []  # the x86-64 baseline


def test_the_portable_build_is_every_level_and_feeds_the_cuda_build():
    chosen, what = cpu_features.switches(portable=True)
    assert chosen == ["-DGGML_NATIVE=OFF", "-DGGML_CPU_ALL_VARIANTS=ON"] and "portable" in what
    assert set(cpu_features.PORTABLE) <= set(cuda_build.setup_cmake_args())


def test_the_native_switches_cover_every_feature_of_the_pinned_ggmls_x86_variants():
    """ggml/src/CMakeLists.txt of the pinned source: every feature its x86 variants use has a switch here."""
    import re

    text = pinned_llama_source("ggml/src/CMakeLists.txt")
    start, end = 'if (GGML_SYSTEM_ARCH STREQUAL "x86")', 'elseif(GGML_SYSTEM_ARCH STREQUAL "ARM")'
    x86 = text[text.index(start) : text.index(end)]
    used = {f for line in re.findall(r"ggml_add_cpu_backend_variant\((.*)\)", x86) for f in line.split()[1:]}
    assert used and used == set(cpu_features.FEATURES)


# -- the llama.cpp tools a source install builds (llama_tools.cmake, for scripts/setup.sh) --------------

SPECTUNE_RUNS = {"server", "quantize"}  # llama-server and llama-quantize
SERVER_NEEDS = {"mtmd", "ui"}  # what tools/server/CMakeLists.txt links and depends on


def skipped_tools() -> set[str]:
    import re

    text = (REPO / "packaging" / "llama_tools.cmake").read_text()
    listed = re.search(r"set\(SPECTUNE_SKIPPED_LLAMA_TOOLS\s+(.*?)\)", text, re.S)
    assert listed, "llama_tools.cmake no longer sets SPECTUNE_SKIPPED_LLAMA_TOOLS"
    return set(listed.group(1).split())


def test_the_skipped_tools_are_tools_of_the_pinned_source_and_spare_the_server():
    """A name the pinned llama.cpp does not add would skip nothing (a renamed tool would build again unseen),
    and the server, the quantizer and what the server links must never be skipped."""
    import re

    added = set(re.findall(r"add_subdirectory\(([\w-]+)\)", pinned_llama_source("tools/CMakeLists.txt")))
    assert SPECTUNE_RUNS | SERVER_NEEDS <= added
    assert skipped_tools() <= added
    assert not skipped_tools() & (SPECTUNE_RUNS | SERVER_NEEDS)


def test_setup_passes_the_tools_file_and_keys_the_wheel_by_its_contents():
    setup = (REPO / "scripts" / "setup.sh").read_text()
    assert "tools_cmake=packaging/llama_tools.cmake" in setup
    assert "-DCMAKE_PROJECT_INCLUDE=$root/$tools_cmake" in setup
    assert 'cat - "$tools_cmake" | sha256sum' in setup  # a changed list builds a new wheel


def test_the_installed_llama_has_the_tools_spectune_runs_and_not_the_skipped_ones():
    """The wheel scripts/setup.sh built and installed: the skip took effect and spared what SpecTune runs."""
    from engine.llama.install import find_install

    names = {p.name.removesuffix(".exe") for p in find_install().bin_dir.iterdir()}
    assert {"llama-server", "llama-quantize"} <= names
    assert not names & {"llama-bench", "llama-cli", "llama-perplexity", "llama-tts", "llama-imatrix"}, sorted(names)


# -- the requirements setup.sh installs beside the build (dependencies.py) ----------------------------


def test_requirements_come_from_pyproject_without_the_one_being_built(tmp_path):
    listed = dependencies.requirements(["test"], ["llama_cpp.python"])  # pip's name rules: -, _ and . alike
    assert not any(r.startswith("llama-cpp-python") for r in listed)
    assert "PySide6-Essentials==6.10.3" in listed and "ruff==0.17.6" in listed
    assert "ruff==0.17.6" not in dependencies.requirements([], [])
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text('[project]\ndependencies = ["a>=1", "B_c==2"]\n[project.optional-dependencies]\nx = ["d"]\n')
    assert dependencies.requirements(["x"], ["b.C"], pyproject) == ["a>=1", "d"]
    with pytest.raises(ValueError, match="no extra y in pyproject.toml; it has x"):
        dependencies.requirements(["y"], [], pyproject)


@pytest.mark.parametrize(
    "name, dropped",
    [
        (".git/objects/pack/x.pack", True),
        (".git", True),
        ("vendor/llama.cpp/.git", True),
        ("vendor/llama.cpp/docs/build.md", True),
        ("vendor/llama.cpp/models/ggml-vocab-llama-bpe.gguf", True),
        ("vendor/llama.cpp/models/templates/x.jinja", False),
        ("vendor/llama.cpp/ggml/src/ggml-cuda/mmq.cu", False),
        ("vendor/llama.cpp/tools/server/server.cpp", False),
        (".gitmodules", False),
        ("CMakeLists.txt", False),
    ],
)
def test_what_the_travelling_sdist_leaves_out(name, dropped):
    assert bool(cuda_build.SDIST_DROP.match(f"llama_cpp_python-0.3.36/{name}")) is dropped


def test_cublas_from_pip_wheels_when_the_toolkit_lacks_it(tmp_path, monkeypatch):
    """The layout of this workplace's CUDA image: nvcc's toolkit without cuBLAS, cuBLAS in nvidia/cu13."""
    g = cuda_build
    toolkit = tmp_path / "cuda"
    (toolkit / "lib64" / "stubs").mkdir(parents=True)
    (toolkit / "include").mkdir()
    (toolkit / "lib64" / "stubs" / "libcuda.so").write_bytes(b"")
    wheels = tmp_path / "site"
    for rel in (
        "nvidia/cu13/lib/libcublas.so.13",
        "nvidia/cu13/lib/libcublasLt.so.13",
        "nvidia/cu13/include/cublas_v2.h",
    ):
        (wheels / rel).parent.mkdir(parents=True, exist_ok=True)
        (wheels / rel).write_bytes(b"")
    monkeypatch.setenv("CUDA_HOME", str(toolkit))
    monkeypatch.setattr(sys, "path", [str(wheels)] + sys.path)
    args, lib_dirs, inc_dirs = g.cuda_link_setup(tmp_path / "shim", driver_dirs=())
    shim = tmp_path / "shim" / "lib"
    assert args == [
        f"-DCUDA_cublas_LIBRARY={shim / 'libcublas.so'}",
        f"-DCUDA_cublasLt_LIBRARY={shim / 'libcublasLt.so'}",
    ]
    assert (shim / "libcublasLt.so").resolve() == wheels / "nvidia/cu13/lib/libcublasLt.so.13"
    assert str(wheels / "nvidia/cu13/lib") in lib_dirs and inc_dirs == [str(wheels / "nvidia/cu13/include")]


def test_a_full_toolkit_needs_no_shim(tmp_path, monkeypatch):
    g = cuda_build
    toolkit = tmp_path / "cuda"
    for rel in ("lib64/libcublas.so", "lib64/libcublasLt.so", "lib64/stubs/libcuda.so", "include/cublas_v2.h"):
        (toolkit / rel).parent.mkdir(parents=True, exist_ok=True)
        (toolkit / rel).write_bytes(b"")
    monkeypatch.setenv("CUDA_HOME", str(toolkit))
    args, lib_dirs, inc_dirs = g.cuda_link_setup(tmp_path / "shim", driver_dirs=())
    assert args == [] and inc_dirs == [] and str(toolkit / "lib64") in lib_dirs


def test_the_llama_cpp_python_pin_is_written_once():
    """pyproject.toml holds the pin; the engine, the setup and build scripts read it from there."""
    import re

    import engine.llama.install as li

    pins = re.findall(r'"llama-cpp-python==([^"]+)"', (REPO / "pyproject.toml").read_text(encoding="utf-8"))
    assert len(pins) == 1 and li.pinned_version() == pins[0] == li.LLAMA_CPP_PYTHON_VERSION
    assert li.installed_version() == pins[0]  # setup.sh installed exactly the pinned release
    for script in (
        "scripts/setup.sh",
        "packaging/build_linux.sh",
        "packaging/build_windows.ps1",
        "packaging/cuda_build.py",
        "bench/gpu_check.sh",
    ):
        assert pins[0] not in (REPO / script).read_text(encoding="utf-8"), script


def test_the_cuda_runtime_pins_come_from_pyprojects_cuda_extra():
    pins = cuda_build.cuda_runtime_pins()
    assert {p.split("==")[0] for p in pins} == {"nvidia-cublas", "nvidia-cuda-runtime"}
    assert all("==" in p for p in pins)  # exact, like every pin of what SpecTune ships


def test_without_a_driver_the_build_links_a_stub_libcuda(tmp_path):
    """The stub carries libcuda.so.1 as its SONAME (what ggml-cuda then asks the loader for) and defines the
    driver functions under the names a normal compile references."""
    header = tmp_path / "include" / "cuda.h"
    header.parent.mkdir()
    names = [f"cuFake{i}" for i in range(120)]
    header.write_text(
        "typedef int CUresult;\n#define cuMemGetInfo cuMemGetInfo_v2\n"
        "CUresult cuMemGetInfo(unsigned long *free, unsigned long *total);\n"
        + "".join(f"CUresult {n}(int x);\n" for n in names)
    )
    stub = cuda_build.libcuda_stub(tmp_path / "libcuda.so", header)
    dynamic = subprocess.run(["readelf", "-d", "--dyn-syms", str(stub)], capture_output=True, text=True).stdout
    assert "Library soname: [libcuda.so.1]" in dynamic
    assert " cuMemGetInfo_v2" in dynamic and " cuFake119" in dynamic and " cuMemGetInfo\n" not in dynamic


def test_too_few_functions_is_not_cudas_header(tmp_path):
    header = tmp_path / "cuda.h"
    header.write_text("typedef int CUresult;\nCUresult cuInit(unsigned int);\n")
    with pytest.raises(SystemExit, match="found only 1 driver functions"):
        cuda_build.libcuda_stub(tmp_path / "libcuda.so", header)


def _tiny_wheel(path: Path) -> Path:
    import zipfile

    files = {
        "pkg/__init__.py": b"",
        "bin/tool": b"#!/bin/sh\n",
        "pkg-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: pkg\nVersion: 1.0\n",
        "pkg-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = [f"{n},{cuda_build._record_hash(d)},{len(d)}" for n, d in files.items()] + ["pkg-1.0.dist-info/RECORD,,"]
    with zipfile.ZipFile(path, "w") as z:
        for name, data in files.items():
            z.writestr(name, data)
        z.writestr("pkg-1.0.dist-info/RECORD", "\n".join(record) + "\n")
    return path


def test_the_cuda_wheel_is_the_cpu_wheel_plus_the_module(tmp_path):
    import zipfile

    cpu = _tiny_wheel(tmp_path / "pkg-1.0-py3-none-any.whl")
    module = tmp_path / "libggml-cuda.so"
    module.write_bytes(b"\x7fELF module bytes")
    out = cuda_build.wheel_with_module(cpu, module, tmp_path / "cuda")
    assert out.name == cpu.name and out.parent == tmp_path / "cuda"
    with zipfile.ZipFile(out) as z, zipfile.ZipFile(cpu) as zc:
        assert set(z.namelist()) == set(zc.namelist()) | {"bin/libggml-cuda.so"}
        record = z.read("pkg-1.0.dist-info/RECORD").decode().splitlines()
        # every file listed with its true hash, RECORD itself last and unhashed
        assert record[-1] == "pkg-1.0.dist-info/RECORD,,"
        for line in record[:-1]:
            name, digest, size = line.rsplit(",", 2)
            assert digest == cuda_build._record_hash(z.read(name)) and int(size) == len(z.read(name))
        assert len(record) == len(zc.read("pkg-1.0.dist-info/RECORD").decode().splitlines()) + 1
    # and pip installs it, module included
    site = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--target", str(site), str(out)],
        check=True,
    )
    assert (site / "bin" / "libggml-cuda.so").read_bytes() == module.read_bytes()
    with pytest.raises(SystemExit, match="already holds"):
        cuda_build.wheel_with_module(out, module, tmp_path / "again")
