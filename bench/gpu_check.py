"""GPU check: SpecTune's CUDA variant, built and measured on one lent GPU machine.

    bench/gpu_check.sh                   drives this file; its header says how to prepare and run
    python bench/gpu_check.py run --mode gpu|cpu --site DIR --sdist FILE --wheel FILE [--out-dir DIR]
    python bench/gpu_check.py models --mode gpu|cpu DIR

``run`` (mode gpu): compiles ggml's CUDA module from the carried sdist with scripts/setup.sh's
ggml arguments and CMAKE_CUDA_ARCHITECTURES=90 and adds it to the carried CPU wheel
(packaging/cuda_build.py, as ``setup.sh --cuda`` does), installs that into DIR (a folder named
site-packages on PYTHONPATH, where find_install() looks), builds
native/ against it, and meanwhile writes random-weight pairs with the shapes of
Llama-3.1-8B and Llama-3.2-1B (engine.models.synthetic.write_pair, f16, its small vocab;
each draft is the target's first two blocks). Then, per pair, through the engine
worker as the app uses it: plain decode tokens/s and its share of the memory
bandwidth limit (target weight bytes x tokens/s / peak bandwidth from
engine.planning.hardware), speculative tokens/s per method and K, and the lab against
llama-server on the same settings (engine.llama.server, engine.deploy.export), with NVML
readings (utilisation, power, clocks, memory) for every row. Everything is fitted
into --budget-s; what does not fit is reported as skipped.

Mode cpu is the rehearsal on a machine without a GPU: the same path with tiny
shapes, the carried CPU wheel as it is, standing in for the CUDA one.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
for folder in (REPO, REPO / "packaging"):
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))

from cuda_build import build_cuda_module, install_wheel, prepend_env, wheel_with_module  # noqa: E402

CUDA_ARCHITECTURES = "90"  # the H200 (compute capability 9.0); packaging/cuda_arch.py says why not 90a
GIB = 2**30


# -- the plan: shapes, settings, sizes -----------------------------------------------------------------


@dataclass(frozen=True)
class PairPlan:
    label: str
    n_embd: int
    n_layer: int
    n_head: int
    n_head_kv: int
    n_ff: int
    draft_layers: int
    divergence: float


@dataclass(frozen=True)
class Plan:
    pairs: tuple[PairPlan, ...]
    tokens: int
    rounds: int  # lab/server alternations per prompt
    prompts: tuple[str, ...]
    ngl: int
    threads: int  # 0: llama.cpp's default
    lab_s: float  # a lab row starts only with this much of the budget left
    server_s: float  # likewise a server comparison (start, warm-up, rounds)


# Llama-3.1-8B and Llama-3.2-1B from their config.json (hidden, layers, heads, kv heads, intermediate).
# Acceptance of these random pairs depends on depth and divergence; the values keep it in the 0.4-0.8
# band that real same-family pairs show (bench/gpu_check.py models --mode cpu prints it for tiny shapes).
GPU_PLAN = Plan(
    pairs=(
        PairPlan("8B", 4096, 32, 32, 8, 14336, draft_layers=2, divergence=0.05),
        PairPlan("1B", 2048, 16, 32, 8, 8192, draft_layers=2, divergence=0.07),
    ),
    tokens=128,
    rounds=3,
    prompts=("def the value of the data is", "import self return None for value in list"),
    ngl=99,
    threads=0,
    lab_s=15,
    server_s=45,
)
CPU_PLAN = Plan(
    pairs=(
        PairPlan("8B-tiny", 256, 32, 8, 2, 768, draft_layers=2, divergence=0.05),
        PairPlan("1B-tiny", 128, 16, 4, 2, 384, draft_layers=2, divergence=0.07),
    ),
    tokens=24,
    rounds=1,
    prompts=("def the value of the data is",),
    ngl=0,
    # one thread: llama.cpp's threads spin while they wait, which on a small shared machine stalls everyone
    threads=1,
    lab_s=2,
    server_s=5,
)
PLANS = {"gpu": GPU_PLAN, "cpu": CPU_PLAN}


def tasks():
    """(setting, against the server?) in the order they run, most telling first, so that a build that
    eats the budget costs the least important rows."""
    from engine.core.settings import SpecSettings

    plain, k4 = SpecSettings("none"), SpecSettings("draft-simple", draft_n_max=4)
    return [
        (plain, False),
        (k4, False),
        (plain, True),
        (k4, True),
        (SpecSettings("draft-simple", draft_n_max=2), False),
        (SpecSettings("draft-simple", draft_n_max=8), False),
        (SpecSettings("ngram-simple", ngram_size_n=3, ngram_size_m=8), False),
        (SpecSettings("ngram-mod"), False),
    ]


def label(spec) -> str:
    if not spec.types:
        return "plain (no speculation)"
    if "draft-simple" in spec.types:
        return f"{spec.spec_type} K={spec.draft_n_max}"
    return spec.spec_type


# -- models ---------------------------------------------------------------------------------------


def write_models(mode: str, out: Path) -> None:
    from engine.models.synthetic import ModelShape, PairSpec, write_pair

    for p in PLANS[mode].pairs:
        t0 = time.monotonic()
        shape = ModelShape(n_embd=p.n_embd, n_layer=p.n_layer, n_head=p.n_head, n_head_kv=p.n_head_kv, n_ff=p.n_ff)
        target, draft = write_pair(
            out / p.label,
            PairSpec(
                shape=shape,
                draft_layers=p.draft_layers,
                divergence=p.divergence,
                dtype="f16",
                name=f"gpu-check-{p.label}",
            ),
        )
        print(
            f"{p.label}: {target.stat().st_size / GIB:.2f} + {draft.stat().st_size / GIB:.2f} GiB in "
            f"{time.monotonic() - t0:.0f} s",
            flush=True,
        )


# -- NVML readings ---------------------------------------------------------------------------------


class NvmlSampler:
    """Reads GPU 0 every ``interval`` seconds; samples are filed under the phase set at that moment."""

    def __init__(self, interval: float = 0.25):
        self.interval = interval
        self.phase = "idle"
        self.samples: dict[str, list[dict]] = {}
        self.error: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        try:
            import pynvml

            pynvml.nvmlInit()
            self._nvml = pynvml
            self._handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        except Exception as exc:  # no library, no driver, no GPU: the table says so
            self._nvml = None
            self.error = str(exc) or type(exc).__name__

    def _read(self) -> dict:
        n, h = self._nvml, self._handle
        util = n.nvmlDeviceGetUtilizationRates(h)
        return {
            "gpu_util": util.gpu,
            "mem_util": util.memory,
            "mem_used_gib": n.nvmlDeviceGetMemoryInfo(h).used / GIB,
            "power_w": n.nvmlDeviceGetPowerUsage(h) / 1000.0,
            "sm_mhz": n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_SM),
            "mem_mhz": n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_MEM),
            "temp_c": n.nvmlDeviceGetTemperature(h, n.NVML_TEMPERATURE_GPU),
        }

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.samples.setdefault(self.phase, []).append(self._read())
            except Exception as exc:
                self.error = str(exc)
                return

    def start(self) -> NvmlSampler:
        if self._nvml is not None:
            self._thread = threading.Thread(target=self._loop, name="nvml", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def summary(self, phase: str) -> dict | None:
        rows = self.samples.get(phase)
        if not rows:
            return None
        return {
            "gpu_util": statistics.mean(r["gpu_util"] for r in rows),
            "power_w": max(r["power_w"] for r in rows),
            "sm_mhz": statistics.mean(r["sm_mhz"] for r in rows),
            "mem_used_gib": max(r["mem_used_gib"] for r in rows),
            "temp_c": max(r["temp_c"] for r in rows),
            "n": len(rows),
        }


# -- measuring ------------------------------------------------------------------------------------


@dataclass
class Row:
    pair: str
    setting: str
    tokens_per_s: float | None = None
    acceptance: float | None = None
    mean_len: float | None = None
    bandwidth_share: float | None = None
    server_tps: float | None = None
    lab_over_server: float | None = None
    counts_match: bool | None = None
    nvml: dict | None = None
    note: str = ""


@dataclass
class Report:
    lines: list[str] = field(default_factory=list)
    rows: list[Row] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)

    def say(self, text: str = "") -> None:
        print(text, flush=True)
        self.lines.append(text)


def bench_pair(
    pp: PairPlan, models: Path, plan: Plan, peak_bw: float | None, sampler: NvmlSampler, deadline: float, report: Report
) -> None:
    from engine.core.settings import LoadSettings, SamplingSettings
    from engine.runtime.client import EngineClient

    target, draft = models / pp.label / "target.gguf", models / pp.label / "draft.gguf"
    weights = target.stat().st_size
    load = LoadSettings(target, draft, ctx=2048, ngl=plan.ngl, ngl_draft=plan.ngl, threads=plan.threads)
    sampling = SamplingSettings(temp=0.0)
    rows: dict[str, Row] = {}

    env = dict(os.environ, PYTHONFAULTHANDLER="1")  # a crash prints the Python frames to the worker's stderr
    with EngineClient(env=env, stderr_lines=80) as client:
        client.start()
        sampler.phase = f"{pp.label} load"
        loaded = client.load(load)
        placed: dict[str, int] = {}
        for item in loaded.get("memory", []):
            if item.get("model") == "target":
                placed[item["buffer_type"]] = placed.get(item["buffer_type"], 0) + item["model_bytes"]
        report.say(
            f"# {pp.label}: target {weights / GIB:.2f} GiB ({pp.n_layer} layers), draft "
            f"{draft.stat().st_size / GIB:.2f} GiB ({pp.draft_layers} layers); loaded in "
            f"{loaded.get('load_s', 0):.1f} s; target weights on "
            + (", ".join(f"{k} {v / GIB:.2f} GiB" for k, v in placed.items()) or "?")
        )
        for spec, with_server in tasks():
            name = label(spec)
            row = rows.get(name)
            if row is None:
                row = rows[name] = Row(pp.label, name)
                report.rows.append(row)
            if time.monotonic() + (plan.server_s if with_server else plan.lab_s) > deadline:
                row.note = ("server " if with_server else "") + "skipped: time budget"
                continue
            sampler.phase = f"{pp.label} {name}{' server' if with_server else ''}"
            try:
                if with_server:
                    _against_server(client, load, spec, sampling, plan, row)
                else:
                    _in_lab(client, spec, sampling, plan, row)
                    row.nvml = sampler.summary(sampler.phase)
                    if not spec.types and peak_bw:
                        row.bandwidth_share = weights * row.tokens_per_s / peak_bw
            except Exception as exc:  # this row fails; the others still run unless the worker is gone
                row.note = f"FAILED{' (server)' if with_server else ''}: {exc}"[:300]
                report.failures.append(f"{pp.label} {name}: {type(exc).__name__}: {exc}")
                if client.state in ("crashed", "stopped"):
                    for line in client.stderr_tail.splitlines()[-40:]:
                        report.say(f"#   worker: {line[:300]}")
                    break


def _in_lab(client, spec, sampling, plan: Plan, row: Row) -> None:
    from engine.measure.generate import generate

    baseline = not spec.types
    for p in plan.prompts:  # warm-up: first use of weights, graphs and caches
        generate(client, p, 8, spec, sampling, baseline=baseline)
    runs = [generate(client, p, plan.tokens, spec, sampling, baseline=baseline) for p in plan.prompts]
    drafted = sum(r["drafted"] for r in runs)
    accepted = sum(r["accepted"] for r in runs)
    steps = sum(r["steps"] for r in runs)
    row.tokens_per_s = statistics.median(r["tokens_per_s"] for r in runs)
    row.acceptance = accepted / drafted if drafted else None
    row.mean_len = 1 + accepted / steps if steps and drafted else None


def _against_server(client, load, spec, sampling, plan: Plan, row: Row) -> None:
    """llama-server and the lab on the same settings, alternating, so drift hits both alike. With no client
    (the lab's worker died) llama-server alone: the GPU's numbers still come, acceptance from the server."""
    from engine.deploy.export import llama_server_argv
    from engine.llama.install import server_path
    from engine.llama.server import LlamaServer, server_summary
    from engine.measure.generate import generate

    argv = llama_server_argv(load, spec, sampling, server_path(), extra=["--fit", "off"])
    baseline = not spec.types
    served, lab_tps, same = [], [], True
    with LlamaServer(argv, startup_timeout=300) as srv:
        for p in plan.prompts:
            srv.complete(p, 8)
        for _ in range(plan.rounds):
            for p in plan.prompts:
                s = server_summary(srv.complete(p, plan.tokens))
                served.append(s)
                if client is None:
                    continue
                lab = generate(client, p, plan.tokens, spec, sampling, baseline=baseline)
                lab_tps.append(lab["tokens_per_s"])
                same &= (s["drafted"], s["accepted"]) == (lab["drafted"], lab["accepted"])
    row.server_tps = statistics.median(s["tokens_per_s"] for s in served)
    if client is None:
        drafted = sum(s["drafted"] or 0 for s in served)
        row.acceptance = sum(s["accepted"] or 0 for s in served) / drafted if drafted else None
        return
    row.lab_over_server = statistics.median(lab_tps) / row.server_tps if row.server_tps else None
    row.counts_match = same


ORDERS = ("specrt-first", "modules-first")


def diagnose(pair_dir: Path, ngl: int, order: str) -> None:
    """The lab's path step by step in this process, each step announced before it runs, llama.cpp's log
    on: after a crash the last line printed says which step died (run under -X faulthandler for the Python
    frames, under gdb where there is one for the native ones). The engine worker keeps its stderr short.

    order "specrt-first" is the engine's (engine.runtime.binding.load_library) and goes on to load and run
    the pair; "modules-first" is the order that died in dlopen(libspecrt) on the H200 on 2026-12-04: the
    backend modules, then llama.cpp's libraries one by one, and libspecrt, and no model."""
    import ctypes

    from engine.core.settings import LoadSettings, SamplingSettings, SpecSettings
    from engine.llama.backends import load_backends
    from engine.llama.install import find_install
    from engine.runtime.binding import Engine, build_info, devices, load_library

    def step(text: str) -> None:
        print(f"[diagnose] {text}", flush=True)

    if order == "modules-first":
        step("load_backends()")
        step(f"devices: {[d.name for d in load_backends().devices]}")
        for name in ("libllama.so.0", "libllama-common.so.0"):
            step(f"dlopen {name}")
            ctypes.CDLL(str(find_install().lib_dir / name))
        step("load_library()")
        load_library()
        step(f"devices: {devices()}")
        step("closed")
        return
    from engine.runtime.native_build import ensure_built

    step("dlopen libspecrt, no backend module yet")
    ctypes.CDLL(str(ensure_built()))
    step("load_library(): the backend modules")
    load_library()
    step(f"backends: {load_backends().to_dict()}")
    step(f"build_info: {build_info()}")
    step(f"devices: {devices()}")
    load = LoadSettings(
        pair_dir / "target.gguf", pair_dir / "draft.gguf", ctx=2048, ngl=ngl, ngl_draft=ngl, verbose=True
    )
    step(f"Engine(load) ngl={ngl}")
    with Engine(load) as eng:
        step(f"loaded; memory {eng.memory()}")
        eng.set_sampling(SamplingSettings(temp=0.0))
        for spec in (SpecSettings("none"), SpecSettings("draft-simple", draft_n_max=4)):
            step(f"set_spec({label(spec)})")
            eng.set_spec(spec)
            step("begin()")
            eng.begin("def the value of the data is", 32, baseline=not spec.types)
            n = 0
            while (cycle := eng.step()) is not None:
                if n < 3:
                    step(f"cycle {cycle.index}: {cycle.emitted} out, {cycle.drafted} drafted, {cycle.cycle_ms:.2f} ms")
                n += 1
            step(f"{label(spec)}: {n} cycles")
    step("closed")


# what of a diagnose child's output the report keeps when it fails (the whole goes to $OUT): the steps,
# the loader's "calling init" lines (LD_DEBUG=files), Python's and gdb's words on the crash
_TELLING = re.compile(r"\[diagnose\]|calling init|Fatal|File \"|Segmentation|signal|^#\d+ |Error|error")


def run_diagnose(
    models: Path, label_: str, ngl: int, order: str, report: Report, out_dir: str | None, timeout: float
) -> bool:
    """diagnose() in a child (under gdb when the machine has it; the loader's LD_DEBUG=files on for the
    modules-first order, which says which library's initialiser ran last); its output goes to the report.
    True: it ended cleanly."""
    import shutil

    argv = [sys.executable, "-X", "faulthandler", str(Path(__file__).resolve()), "diagnose"]
    argv += [str(models / label_), str(ngl), order]
    gdb = shutil.which("gdb")
    if gdb:
        bt = ["-ex", "run", "-ex", "thread apply all bt 30"]
        argv = [gdb, "-q", "-batch", "-iex", "set auto-load python-scripts off", *bt, "--args", *argv]
    env = dict(os.environ)
    if order == "modules-first":
        env["LD_DEBUG"] = "files"
    try:
        done = subprocess.run(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
            timeout=timeout,
            env=env,
        )
        text, rc = done.stdout, done.returncode
    except subprocess.TimeoutExpired as exc:
        partial = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else exc.stdout or ""
        text, rc = f"{partial}\n(timed out after {timeout:.0f} s)", None
    clean = rc == 0 and "[diagnose] closed" in text and "SIGSEGV" not in text
    how = f"{order}{' under gdb' if gdb else ''}"
    report.say(f"# diagnose {label_} ngl={ngl} {how}: {'clean' if clean else f'FAILED (exit {rc})'}")
    if out_dir:
        Path(out_dir, f"diagnose-{label_}-{order}.log").write_text(text)
    if not clean:
        keep = [ln for ln in text.splitlines() if _TELLING.search(ln)]
        for line in keep[-50:]:
            report.say(f"#   {line[:300]}")
    return clean


def server_pair(
    pp: PairPlan, models: Path, plan: Plan, peak_bw: float | None, sampler: NvmlSampler, deadline: float, report: Report
) -> None:
    """The server rows of a pair whose lab crashed; the bandwidth share of its plain row is the server's."""
    from engine.core.settings import LoadSettings, SamplingSettings

    target, draft = models / pp.label / "target.gguf", models / pp.label / "draft.gguf"
    load = LoadSettings(target, draft, ctx=2048, ngl=plan.ngl, ngl_draft=plan.ngl, threads=plan.threads)
    for spec, with_server in tasks():
        if not with_server:
            continue
        row = Row(pp.label, label(spec).replace(" (no speculation)", "") + " (server only)")
        report.rows.append(row)
        if time.monotonic() + plan.server_s > deadline:
            row.note = "skipped: time budget"
            continue
        sampler.phase = f"{pp.label} {row.setting}"
        try:
            _against_server(None, load, spec, SamplingSettings(temp=0.0), plan, row)
            row.nvml = sampler.summary(sampler.phase)
            if not spec.types and peak_bw and row.server_tps:
                row.bandwidth_share = target.stat().st_size * row.server_tps / peak_bw
        except Exception as exc:
            row.note = f"FAILED: {exc}"[:300]
            report.failures.append(f"{pp.label} {row.setting}: {type(exc).__name__}: {exc}")


# -- the report -----------------------------------------------------------------------------------


def _fmt(value, spec: str, missing: str = "-") -> str:
    """format(value, spec), or ``missing`` right-aligned to the same width."""
    if value is None:
        width = re.match(r"[<>=^]?(\d*)", spec).group(1)
        return missing.rjust(int(width)) if width else missing
    return format(value, spec)


def table(report: Report) -> None:
    plain = {r.pair: r.tokens_per_s for r in report.rows if r.setting.startswith("plain") and r.tokens_per_s}
    head = (
        f"{'pair':<8} {'setting':<26} {'tok/s':>8} {'x plain':>7} {'accept':>6} {'len':>5} {'BW %':>5} "
        f"{'server':>8} {'lab/srv':>7} {'counts':>6} {'GPU %':>5} {'W max':>6} {'SM MHz':>6} {'GiB':>6}"
    )
    report.say(head)
    report.say("-" * len(head))
    for r in report.rows:
        base = plain.get(r.pair)
        n = r.nvml or {}
        counts = None if r.counts_match is None else ("same" if r.counts_match else "DIFFER")
        report.say(
            f"{r.pair:<8} {r.setting:<26} {_fmt(r.tokens_per_s, '8.1f')} "
            f"{_fmt(r.tokens_per_s / base if base and r.tokens_per_s else None, '7.2f')} "
            f"{_fmt(r.acceptance, '6.3f')} {_fmt(r.mean_len, '5.2f')} "
            f"{_fmt(100 * r.bandwidth_share if r.bandwidth_share else None, '5.1f')} "
            f"{_fmt(r.server_tps, '8.1f')} {_fmt(r.lab_over_server, '7.3f')} {_fmt(counts, '>6')} "
            f"{_fmt(n.get('gpu_util'), '5.0f')} {_fmt(n.get('power_w'), '6.0f')} {_fmt(n.get('sm_mhz'), '6.0f')} "
            f"{_fmt(n.get('mem_used_gib'), '6.1f')}" + (f"  {r.note}" if r.note else "")
        )
    report.say()
    report.say(
        "tok/s: median over prompts of the worker's tokens/s (tokens after the first over the time after the "
        "prompt, llama-server's definition); x plain: against the plain row of the same pair; accept: "
        "accepted / drafted; len: 1 + accepted / steps (bonus token included); BW %: target weight bytes "
        "x plain tok/s / peak memory bandwidth; server: llama-server tok/s on the same settings, alternating "
        "with the lab; lab/srv: ratio of medians; counts: drafted/accepted identical to the server's; "
        "GPU %, W max, SM MHz, GiB: NVML during the row (mean, max, mean, max)."
    )


# -- run ------------------------------------------------------------------------------------------


def run(a: argparse.Namespace) -> int:
    t_start = time.monotonic()
    deadline = t_start + a.budget_s
    plan = PLANS[a.mode]
    report = Report()
    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    log = work / "build.log"
    site = Path(a.site)
    stamp = time.strftime("%Y-%m-%d-%H%M") + ("" if a.mode == "gpu" else "-cpu-dry-run")
    os.environ["SPECTUNE_SDIST"] = str(Path(a.sdist).resolve())
    os.environ.setdefault("SPECTUNE_CACHE_DIR", str(work / "cache"))

    from engine.planning.hardware import probe

    hw = probe()
    gpu = hw.gpus[0] if hw.gpus else None
    peak_bw = gpu.peak_memory_bandwidth_bytes_per_s if gpu else None
    report.say(f"# SpecTune GPU check ({a.mode}) {time.strftime('%Y-%m-%d %H:%M')}  {hw.message}")
    if gpu:
        report.say(
            f"# GPU 0: {gpu.name}, compute capability {gpu.compute_capability}, "
            f"{(gpu.memory_total_bytes or 0) / GIB:.0f} GiB, peak bandwidth "
            f"{_fmt(peak_bw and peak_bw / 1e12, '.2f', '?')} TB/s (NVML bus width x max memory clock x 2)"
        )
    if a.mode == "gpu" and not gpu:
        report.say("gpu_check: mode gpu but no GPU is visible; use --cpu-dry-run on a machine without one")
        return 1

    models = work / "models"
    models_log = work / "models.log"
    writer = subprocess.Popen(
        [sys.executable, str(Path(__file__).resolve()), "models", "--mode", a.mode, str(models)],
        stdout=models_log.open("w"),
        stderr=subprocess.STDOUT,
    )
    try:
        if a.mode == "gpu":
            # the CPU wheel built here and carried, plus ggml's CUDA module compiled there (scripts/setup.sh
            # --cuda makes the same wheel)
            module, seconds, info = build_cuda_module(Path(a.sdist), work, log, CUDA_ARCHITECTURES, os.cpu_count() or 4)
            wheel = wheel_with_module(Path(a.wheel), module, work / "cuda-wheel")
            prepend_env(os.environ, "LD_LIBRARY_PATH", info["loader_dirs"])
            report.say(f"# CUDA module built in {seconds:.0f} s: {' '.join(info['cmake_args'])}")
        else:
            wheel = Path(a.wheel)
            report.say(f"# rehearsal: the carried CPU wheel {wheel.name} stands in for the CUDA one")
        install_wheel(wheel, site, log)
        from engine.llama.install import find_install
        from engine.runtime.native_build import ensure_built

        install = find_install()
        if install.prefix != site:
            raise SystemExit(
                f"gpu_check: find_install() chose {install.prefix}, not the wheel just installed in {site}"
            )
        if a.mode == "gpu" and not install.is_cuda:
            raise SystemExit(f"gpu_check: the wheel in {site} has no ggml-cuda library")
        t0 = time.monotonic()
        specrt = ensure_built(verbose=True)
        report.say(f"# native/ built against it in {time.monotonic() - t0:.0f} s: {specrt}")
        left = max(1.0, deadline - time.monotonic())
        try:
            status = writer.wait(timeout=left)
        except subprocess.TimeoutExpired:
            raise SystemExit(
                f"gpu_check: the models were not written within the budget:\n{models_log.read_text()[-3000:]}"
            ) from None
        if status != 0:
            raise SystemExit(f"gpu_check: writing the models failed:\n{models_log.read_text()[-3000:]}")
        for line in models_log.read_text().splitlines():
            report.say(f"# models {line}")
    finally:
        if writer.poll() is None:
            writer.kill()

    sampler = NvmlSampler().start()
    if sampler.error:
        report.say(f"# NVML: not read ({sampler.error})")
    try:
        for pp in plan.pairs:
            if time.monotonic() > deadline:
                report.rows.append(Row(pp.label, "-", note="skipped: time budget"))
                continue
            if a.diagnose and pp is plan.pairs[0]:  # one is enough to say where a crash that hits every pair is
                for order in ORDERS:
                    left = deadline - time.monotonic()
                    run_diagnose(models, pp.label, plan.ngl, order, report, a.out_dir, max(10.0, min(120.0, left)))
            try:
                bench_pair(pp, models, plan, peak_bw, sampler, deadline, report)
            except Exception as exc:  # one pair's failure leaves the other's numbers in the report
                report.failures.append(f"{pp.label}: {type(exc).__name__}: {exc}")
                report.rows.append(Row(pp.label, "-", note=f"FAILED: {exc}"[:200]))
                for line in str(exc).splitlines()[1:]:
                    report.say(f"#   worker: {line[:300]}")
                server_pair(pp, models, plan, peak_bw, sampler, deadline, report)
    finally:
        sampler.stop()
    report.say()
    table(report)
    report.say(f"total {time.monotonic() - t_start:.0f} s (budget {a.budget_s:.0f} s)")
    for failure in report.failures:
        report.say(f"FAILED {failure}")

    text = "\n".join(report.lines) + "\n"
    results = REPO / "bench" / "results" / f"gpu_check-{stamp}.txt"
    results.parent.mkdir(exist_ok=True)
    results.write_text(text)
    print(f"saved {results}")
    if a.out_dir:
        out = Path(a.out_dir)
        out.mkdir(parents=True, exist_ok=True)
        (out / results.name).write_text(text)
        rows = [r.__dict__ for r in report.rows]
        (out / f"gpu_check-{stamp}.json").write_text(json.dumps({"rows": rows, "failures": report.failures}, indent=1))
        if log.exists():
            (out / "build-tail.log").write_text(log.read_text(errors="replace")[-200_000:])
    return 1 if report.failures else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--mode", choices=sorted(PLANS), required=True)
    r.add_argument(
        "--site",
        required=True,
        help="the folder the wheel is installed into (ends in site-packages, and is on PYTHONPATH)",
    )
    r.add_argument("--sdist", required=True, help="the (trimmed) llama-cpp-python sdist")
    r.add_argument("--wheel", help="the CPU wheel: extended with the CUDA module (gpu), or as it is (cpu)")
    r.add_argument("--work", default="/tmp/gpu_check-work")
    r.add_argument("--budget-s", type=float, default=540.0)
    r.add_argument("--out-dir", help="also write the report, raw rows and build log here ($OUT)")
    r.add_argument(
        "--diagnose",
        action="store_true",
        help="before each pair, the lab's path step by step in a child (gdb when present), its output in the report",
    )
    m = sub.add_parser("models")
    m.add_argument("--mode", choices=sorted(PLANS), required=True)
    m.add_argument("out_dir", type=Path)
    d = sub.add_parser("diagnose")
    d.add_argument("pair_dir", type=Path)
    d.add_argument("ngl", type=int)
    d.add_argument("order", choices=ORDERS)
    a = ap.parse_args(argv)
    if a.cmd == "diagnose":
        diagnose(a.pair_dir, a.ngl, a.order)
        return 0
    if a.cmd == "models":
        write_models(a.mode, a.out_dir)
        return 0
    if not a.wheel:
        ap.error("run needs --wheel (the CPU wheel of scripts/setup.sh; gpu_check.sh --prepare carries it)")
    return run(a)


if __name__ == "__main__":
    raise SystemExit(main())
