"""GPU check: SpecTune's CUDA variant measured on one lent GPU machine, in one call.

    bench/gpu_check.sh                   drives this file; its header says how to prepare and run
    python bench/gpu_check.py run --mode gpu|cpu --site DIR --work DIR [--budget-s S] [--out-dir DIR] [--diagnose]
    python bench/gpu_check.py slim SITE  (gpu_check.sh --prepare: the carried tree made smaller)

``run`` finds the CUDA variant already installed in --site (unpacked from what gpu_check.sh --prepare
built here; libspecrt from SPECTUNE_SPECRT), writes the pairs with bench/gpu_models.py (all at once, in
seconds), and for each model (Llama-3.1-8B's and Llama-3.2-1B's shapes, F16 and Q4_K_M) measures every
setting of SETTINGS twice over: through SpecTune's engine worker as the app uses it (the lab) and through
llama-server started with the exported flags, prompt by prompt in alternating order (A B B A), comparing
the drafted and accepted counts of each generation. A row gives the lab's and the server's median tokens/s,
their paired ratio, the acceptance, plain decode's share of peak memory bandwidth (weight bytes x tok/s /
NVML's peak), the speed model's prediction for the row (engine.planning.speed.speed_model: plain tok/s, and for
draft-simple the speedup at the acceptance the row measured), and NVML's readings. Rows are fitted into
--budget-s, most telling first; what does not fit is reported as skipped, and a lab that dies leaves its
model's rows to llama-server alone.

Mode cpu is the rehearsal on a machine without a GPU: the same carried tree and path, tiny shapes.
"""

from __future__ import annotations

import argparse
import hashlib
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
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

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
    quants: tuple[str, ...]
    tokens: int
    rounds: int  # lab/server alternations per prompt
    prompts: tuple[str, ...]
    ngl: int
    threads: int  # 0: llama.cpp's default
    row_s: float  # a row starts only with this much of the budget left
    writers: int  # models written at once


# Llama-3.1-8B and Llama-3.2-1B from their config.json (hidden, layers, heads, kv heads, intermediate).
# Acceptance of these random pairs depends on depth and divergence; the values keep it in the 0.4-0.8
# band that real same-family pairs show.
GPU_PLAN = Plan(
    pairs=(
        PairPlan("8B", 4096, 32, 32, 8, 14336, draft_layers=2, divergence=0.05),
        PairPlan("1B", 2048, 16, 32, 8, 8192, draft_layers=2, divergence=0.07),
    ),
    quants=("f16", "q4_k_m"),
    tokens=128,
    rounds=2,
    prompts=("def the value of the data is", "import self return None for value in list"),
    ngl=99,
    threads=0,
    row_s=12,
    writers=4,
)
CPU_PLAN = Plan(
    pairs=(
        PairPlan("8B-tiny", 256, 32, 8, 2, 768, draft_layers=2, divergence=0.05),
        PairPlan("1B-tiny", 256, 16, 4, 2, 512, draft_layers=2, divergence=0.07),
    ),
    quants=("f16", "q4_k_m"),
    tokens=24,
    rounds=1,
    prompts=("def the value of the data is",),
    ngl=0,
    # one thread: llama.cpp's threads spin while they wait, which on a small shared machine stalls everyone
    threads=1,
    row_s=3,
    writers=2,
)
PLANS = {"gpu": GPU_PLAN, "cpu": CPU_PLAN}


def settings():
    """The settings of every model's rows, in the order they run (plain first: the others are read against it)."""
    from engine.core.settings import SpecSettings

    return [
        SpecSettings("none"),
        SpecSettings("draft-simple", draft_n_max=4),
        SpecSettings("draft-simple", draft_n_max=2),
        SpecSettings("draft-simple", draft_n_max=8),
        SpecSettings("ngram-mod"),
    ]


def label(spec) -> str:
    if not spec.types:
        return "plain (no speculation)"
    if "draft-simple" in spec.types:
        return f"{spec.spec_type} K={spec.draft_n_max}"
    return spec.spec_type


# -- models ---------------------------------------------------------------------------------------


def model_label(pp: PairPlan, quant: str) -> str:
    return f"{pp.label} {quant.upper()}"


def model_dir(models: Path, pp: PairPlan, quant: str) -> Path:
    return models / f"{pp.label}-{quant}"


def start_writers(mode: str, models: Path) -> _Writers:
    """bench/gpu_models.py for every (pair, quant), at most plan.writers at once (the rest start as those end)."""
    plan = PLANS[mode]
    jobs = []
    for pp in plan.pairs:
        for quant in plan.quants:
            argv = [
                sys.executable,
                str(REPO / "bench" / "gpu_models.py"),
                str(model_dir(models, pp, quant)),
                f"--n-embd={pp.n_embd}",
                f"--n-layer={pp.n_layer}",
                f"--n-head={pp.n_head}",
                f"--n-head-kv={pp.n_head_kv}",
                f"--n-ff={pp.n_ff}",
                f"--quant={quant}",
                f"--draft-layers={pp.draft_layers}",
                f"--divergence={pp.divergence}",
            ]
            jobs.append((model_label(pp, quant), argv))
    return _Writers(jobs, plan.writers)


class _Writers:
    def __init__(self, jobs: list[tuple[str, list[str]]], at_once: int):
        self.waiting, self.at_once = list(jobs), at_once
        self.running: dict[str, tuple[subprocess.Popen, float]] = {}
        self.done: dict[str, str] = {}
        self._fill()

    def _fill(self) -> None:
        while self.waiting and len(self.running) < self.at_once:
            name, argv = self.waiting.pop(0)
            proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            self.running[name] = (proc, time.monotonic())

    def wait(self, name: str, deadline: float) -> str:
        """Wait for one model; returns its line for the report (raises SystemExit when a writer failed)."""
        while name not in self.done:
            for other, (proc, t0) in list(self.running.items()):
                if proc.poll() is not None:
                    out = proc.stdout.read() if proc.stdout else ""
                    del self.running[other]
                    if proc.returncode != 0:
                        raise SystemExit(f"gpu_check: writing {other} failed:\n{out[-3000:]}")
                    self.done[other] = f"{other}: written in {time.monotonic() - t0:.0f} s"
            self._fill()
            if name not in self.done:
                if time.monotonic() > deadline:
                    raise SystemExit(f"gpu_check: {name} was not written within the budget")
                time.sleep(0.1)
        return self.done[name]

    def kill(self) -> None:
        for proc, _ in self.running.values():
            proc.kill()


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
    model: str
    setting: str
    tokens_per_s: float | None = None  # the lab's median
    server_tps: float | None = None  # llama-server's median
    lab_over_server: float | None = None  # median of the paired ratios
    counts_match: bool | None = None  # every generation drafted and accepted the same in both
    acceptance: float | None = None
    mean_len: float | None = None
    bandwidth_share: float | None = None
    predicted_tps: float | None = None
    nvml: dict | None = None
    note: str = ""

    @property
    def tps(self) -> float | None:
        """The row's speed: the lab's, or llama-server's where the lab did not run."""
        return self.tokens_per_s if self.tokens_per_s is not None else self.server_tps


@dataclass
class Report:
    lines: list[str] = field(default_factory=list)
    rows: list[Row] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)

    def say(self, text: str = "") -> None:
        print(text, flush=True)
        self.lines.append(text)


@dataclass
class Model:
    label: str
    target: Path
    draft: Path
    device: object | None = None  # engine.planning.speed.device_speed.DeviceSpeed of this GPU; None: no prediction
    costs: tuple | None = None  # the target's and the draft's ModelCost, each header read once


def predict_model(model: Model, device, report: Report) -> None:
    """Read the pair's headers once for the speed model's predictions on this GPU (its roofline: no tune of
    the pair exists)."""
    from engine.models.gguf_inspect import inspect_gguf
    from engine.planning.speed.model_cost import model_cost

    if device is None:
        return
    try:
        model.costs = (
            model_cost(inspect_gguf(model.target, keep=False)),
            model_cost(inspect_gguf(model.draft, keep=False)),
        )
        model.device = device
    except Exception as exc:  # a row without its prediction still has its measurement
        report.say(f"# {model.label}: no prediction ({type(exc).__name__}: {exc})")


def _predicted(model: Model, spec, acceptance: float | None, plain_tps: float | None) -> float | None:
    """Predicted tok/s of a row: plain's from the roofline; draft-simple's at the acceptance the row measured
    (so the cost side is judged), times the measured plain (so the plain row's miss is not counted twice)."""
    from engine.planning.speed.speed_model import predict

    if model.costs is None:
        return None
    if not spec.types:
        return predict(*model.costs, model.device).plain_tokens_per_s
    if spec.types != ["draft-simple"] or acceptance is None or plain_tps is None:
        return None
    at = predict(*model.costs, model.device, acceptance=acceptance)
    return at.speedup_by_k.get(spec.draft_n_max, 0.0) * plain_tps


def target_meta(target: Path, quant: str) -> dict:
    """A target's size and parameters as llama-bench would print them, for the dataset (llama: the 8B and 1B
    shapes are Llama 3.1 8B's and 3.2 1B's)."""
    from engine.models.gguf_inspect import inspect_gguf

    try:
        info = inspect_gguf(target, keep=False)
    except Exception as exc:  # a row without its size is left out of the dataset, not of the check
        return {"error": f"{type(exc).__name__}: {exc}"}
    params = sum(t.n_elements for t in info.tensors)
    size = info.tensor_bytes / GIB
    return {"architecture": "llama", "quant": quant.upper(), "size_gib": size, "params_b": params / 1e9}


def bench_model(model: Model, plan: Plan, peak_bw: float | None, sampler, deadline: float, report: Report) -> None:
    """Every setting's row for one model: the lab (one worker, loaded once) and llama-server (started per
    setting) in alternating order. A lab that cannot start or dies leaves the rows to llama-server."""
    from engine.core.settings import LoadSettings, SamplingSettings
    from engine.runtime.client import EngineClient

    weights = model.target.stat().st_size
    load = LoadSettings(model.target, model.draft, ctx=2048, ngl=plan.ngl, ngl_draft=plan.ngl, threads=plan.threads)
    sampling = SamplingSettings(temp=0.0)
    client: EngineClient | None = EngineClient(engine="native", stderr_lines=80)
    try:
        client.start()
        sampler.phase = f"{model.label} load"
        loaded = client.load(load)
        placed: dict[str, int] = {}
        for item in loaded.get("memory", []):
            if item.get("model") == "target":
                placed[item["buffer_type"]] = placed.get(item["buffer_type"], 0) + item["model_bytes"]
        report.say(
            f"# {model.label}: target {weights / GIB:.2f} GiB, draft {model.draft.stat().st_size / GIB:.2f} GiB; "
            f"lab loaded in {loaded.get('load_s', 0):.1f} s; target weights on "
            + (", ".join(f"{k} {v / GIB:.2f} GiB" for k, v in placed.items()) or "?")
        )
    except Exception as exc:
        report.failures.append(f"{model.label} lab: {type(exc).__name__}: {exc}")
        report.say(f"# {model.label}: the lab did not start ({exc}); llama-server alone")
        for line in client.stderr_tail.splitlines()[-30:]:
            report.say(f"#   worker: {line[:300]}")
        client.close()
        client = None
    plain: float | None = None
    try:
        for spec in settings():
            row = Row(model.label, label(spec))
            report.rows.append(row)
            if time.monotonic() + plan.row_s > deadline:
                row.note = "skipped: time budget"
                continue
            sampler.phase = f"{model.label} {row.setting}"
            try:
                _lab_and_server(client, load, spec, sampling, plan, row)
            except Exception as exc:  # this row fails; the others still run
                row.note = f"FAILED: {exc}"[:300]
                report.failures.append(f"{model.label} {row.setting}: {type(exc).__name__}: {exc}")
                if client is not None and client.state in ("crashed", "stopped"):
                    for line in client.stderr_tail.splitlines()[-40:]:
                        report.say(f"#   worker: {line[:300]}")
                    client = None
            row.nvml = sampler.summary(sampler.phase)
            if not spec.types:
                plain = row.tps
                if peak_bw and plain:
                    row.bandwidth_share = weights * plain / peak_bw
            row.predicted_tps = _predicted(model, spec, row.acceptance, plain)
    finally:
        if client is not None:
            client.close()


def _lab_and_server(client, load, spec, sampling, plan: Plan, row: Row) -> None:
    """One setting on llama-server and in the lab, each prompt on both in alternating order; with no client
    (the lab is down) llama-server alone."""
    from engine.core.paired import abba
    from engine.deploy.export import llama_server_argv
    from engine.llama.install import server_path
    from engine.llama.server import LlamaServer, server_summary
    from engine.measure.generate import generate

    argv = llama_server_argv(load, spec, sampling, server_path(), extra=["--fit", "off"])
    baseline = not spec.types
    lab, served, ratios, same = [], [], [], True
    with LlamaServer(argv, startup_timeout=300) as srv:  # started by the with, stopped after it
        for p in plan.prompts:  # warm-up: first use of weights, graphs and caches, on both
            srv.complete(p, 8)
            if client is not None:
                generate(client, p, 8, spec, sampling, baseline=baseline)
        for r in range(plan.rounds):
            for i, p in enumerate(plan.prompts):
                got = {}
                for side in abba(("lab", "server") if client is not None else ("server",), r * len(plan.prompts) + i):
                    if side == "server":
                        got[side] = server_summary(srv.complete(p, plan.tokens))
                        served.append(got[side])
                    else:
                        got[side] = generate(client, p, plan.tokens, spec, sampling, baseline=baseline)
                        lab.append(got[side])
                if "lab" in got:
                    s, l_ = got["server"], got["lab"]
                    same &= (s["drafted"], s["accepted"]) == (l_["drafted"], l_["accepted"])
                    ratios.append(l_["tokens_per_s"] / s["tokens_per_s"] if s["tokens_per_s"] else 0.0)
    row.server_tps = statistics.median(s["tokens_per_s"] for s in served)
    source = lab or served
    drafted = sum(x["drafted"] for x in source)
    accepted = sum(x["accepted"] for x in source)
    row.acceptance = accepted / drafted if drafted else None
    if lab:
        row.tokens_per_s = statistics.median(x["tokens_per_s"] for x in lab)
        row.lab_over_server = statistics.median(ratios)
        row.counts_match = same
        steps = sum(x["steps"] for x in lab)
        row.mean_len = 1 + accepted / steps if steps and drafted else None


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
    pair_dir: Path, label_: str, ngl: int, order: str, report: Report, out_dir: str | None, timeout: float
) -> bool:
    """diagnose() in a child (under gdb when the machine has it; the loader's LD_DEBUG=files on for the
    modules-first order, which says which library's initialiser ran last); its output goes to the report.
    True: it ended cleanly."""
    import shutil

    argv = [sys.executable, "-X", "faulthandler", str(Path(__file__).resolve()), "diagnose"]
    argv += [str(pair_dir), str(ngl), order]
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
        Path(out_dir, f"diagnose-{label_.replace(' ', '-')}-{order}.log").write_text(text)
    if not clean:
        keep = [ln for ln in text.splitlines() if _TELLING.search(ln)]
        for line in keep[-50:]:
            report.say(f"#   {line[:300]}")
    return clean


# -- the report -----------------------------------------------------------------------------------


def _fmt(value, spec: str, missing: str = "-") -> str:
    """format(value, spec), or ``missing`` right-aligned to the same width."""
    if value is None:
        width = re.match(r"[<>=^]?(\d*)", spec).group(1)
        return missing.rjust(int(width)) if width else missing
    return format(value, spec)


def table(report: Report) -> None:
    plain = {r.model: r.tps for r in report.rows if r.setting.startswith("plain") and r.tps}
    head = (
        f"{'model':<14} {'setting':<22} {'tok/s':>8} {'x plain':>7} {'server':>8} {'lab/srv':>7} {'counts':>6} "
        f"{'accept':>6} {'len':>5} {'BW %':>5} {'pred':>8} {'err %':>6} {'GPU %':>5} {'W max':>6} {'SM MHz':>6} "
        f"{'GiB':>6}"
    )
    report.say(head)
    report.say("-" * len(head))
    for r in report.rows:
        base = plain.get(r.model)
        n = r.nvml or {}
        counts = None if r.counts_match is None else ("same" if r.counts_match else "DIFFER")
        err = 100 * (r.predicted_tps / r.tps - 1) if r.predicted_tps and r.tps else None
        report.say(
            f"{r.model:<14} {r.setting:<22} {_fmt(r.tokens_per_s, '8.1f')} "
            f"{_fmt(r.tps / base if base and r.tps else None, '7.2f')} {_fmt(r.server_tps, '8.1f')} "
            f"{_fmt(r.lab_over_server, '7.3f')} {_fmt(counts, '>6')} {_fmt(r.acceptance, '6.3f')} "
            f"{_fmt(r.mean_len, '5.2f')} {_fmt(100 * r.bandwidth_share if r.bandwidth_share else None, '5.1f')} "
            f"{_fmt(r.predicted_tps, '8.1f')} {_fmt(err, '+6.1f')} "
            f"{_fmt(n.get('gpu_util'), '5.0f')} {_fmt(n.get('power_w'), '6.0f')} {_fmt(n.get('sm_mhz'), '6.0f')} "
            f"{_fmt(n.get('mem_used_gib'), '6.1f')}" + (f"  {r.note}" if r.note else "")
        )
    report.say()
    report.say(
        "tok/s: the lab's median over generations (tokens after the first over the time after the prompt, "
        "llama-server's definition); x plain: against the plain row of the same model (the server's where the "
        "lab did not run); server: llama-server's median on the same setting, alternating with the lab; "
        "lab/srv: median of the paired ratios; counts: drafted/accepted identical in every generation; accept: "
        "accepted / drafted; len: 1 + accepted / steps; BW %: target weight bytes x plain tok/s / peak memory "
        "bandwidth; pred: the speed model's tok/s (plain: its roofline for this GPU; draft-simple: its speedup at "
        "the row's measured acceptance x the measured plain), err %: pred against the measured; GPU %, W max, "
        "SM MHz, GiB: NVML during the row (mean, max, mean, max)."
    )


# -- run ------------------------------------------------------------------------------------------


def run(a: argparse.Namespace) -> int:
    t_start = time.monotonic()
    deadline = t_start + a.budget_s
    plan = PLANS[a.mode]
    report = Report()
    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    site = Path(a.site)
    stamp = time.strftime("%Y-%m-%d-%H%M") + ("" if a.mode == "gpu" else "-cpu-dry-run")
    models = work / "models"
    # the models first: they are written while the rest starts
    writers = start_writers(a.mode, models)  # a writer's output goes into the report when it fails
    try:
        return _run(a, plan, report, site, models, writers, stamp, t_start, deadline)
    finally:
        writers.kill()


def _run(a, plan: Plan, report: Report, site: Path, models: Path, writers, stamp: str, t_start: float, deadline):
    from engine.llama.install import find_install
    from engine.planning.hardware import probe
    from engine.planning.speed.device_speed import gpu_device

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
    install = find_install()
    if install.prefix != site:
        raise SystemExit(f"gpu_check: find_install() chose {install.prefix}, not the tree unpacked in {site}")
    if a.mode == "gpu" and not install.is_cuda:
        raise SystemExit(f"gpu_check: the tree in {site} has no ggml-cuda library")
    report.say(f"# llama.cpp from {site}; libspecrt {os.environ.get('SPECTUNE_SPECRT', '(built here)')}")
    device = gpu_device(hw) if gpu else None
    sampler = NvmlSampler().start()
    models_meta: dict[str, dict] = {}  # each model's size and parameters, for the dataset
    if sampler.error:
        report.say(f"# NVML: not read ({sampler.error})")
    try:
        if a.diagnose:
            # on the smallest model, written first, while the large ones are still being written: one is
            # enough to say where a crash that hits every model is
            pp, quant = plan.pairs[-1], plan.quants[-1]
            name = model_label(pp, quant)
            report.say(f"# models {writers.wait(name, deadline)}")
            for o in ORDERS:
                left = deadline - time.monotonic()
                run_diagnose(
                    model_dir(models, pp, quant), name, plan.ngl, o, report, a.out_dir, max(10.0, min(60.0, left))
                )
        order = [(pp, q) for q in plan.quants for pp in plan.pairs]  # F16 of both first: the bandwidth rows
        for pp, quant in order:
            name = model_label(pp, quant)
            if time.monotonic() + plan.row_s > deadline:
                report.rows.append(Row(name, "-", note="skipped: time budget"))
                continue
            line = writers.wait(name, deadline)
            if not (a.diagnose and (pp, quant) == (plan.pairs[-1], plan.quants[-1])):
                report.say(f"# models {line}")
            folder = model_dir(models, pp, quant)
            model = Model(name, folder / "target.gguf", folder / "draft.gguf")
            predict_model(model, device, report)
            models_meta[name] = target_meta(model.target, quant)
            try:
                bench_model(model, plan, peak_bw, sampler, deadline, report)
            except Exception as exc:  # one model's failure leaves the others' numbers in the report
                report.failures.append(f"{name}: {type(exc).__name__}: {exc}")
                report.rows.append(Row(name, "-", note=f"FAILED: {exc}"[:200]))
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
        header = {
            # what bench/gpu_device_rows.py needs to add the plain rows to tests/data/gpu (judged, never fitted)
            "gpu": gpu.name if gpu else None,
            "compute_capability": gpu.compute_capability if gpu else None,
            "peak_bandwidth_gb_s": peak_bw / 1e9 if peak_bw else None,
            "results": f"bench/results/{results.name}",
            "models": models_meta,
        }
        (out / f"gpu_check-{stamp}.json").write_text(
            json.dumps({**header, "rows": rows, "failures": report.failures}, indent=1)
        )
    return 1 if report.failures else 0


# -- the carried tree, made smaller (gpu_check.sh --prepare) ------------------------------------------

# the CPU modules an H100 or H200 host may want: Intel Xeon (Sapphire / Emerald Rapids: sapphirerapids; older:
# icelake, skylakex), AMD EPYC (Genoa and later: zen4; older: haswell), and the fallback
KEEP_CPU_VARIANTS = ("x64", "haswell", "skylakex", "icelake", "sapphirerapids", "zen4")


def slim(site: Path) -> None:
    """Drop the CPU variants no GPU host needs, and make every library file that is a byte-for-byte copy of
    another (the wheel holds libX.so, libX.so.0 and libX.so.0.N.M, in lib/ and llama_cpp/lib/) a link to it."""
    before = sum(p.stat().st_size for p in site.rglob("*") if p.is_file() and not p.is_symlink())
    for module in (site / "bin").glob("libggml-cpu-*.so"):
        if module.stem.removeprefix("libggml-cpu-") not in KEEP_CPU_VARIANTS:
            module.unlink()
    first: dict[str, Path] = {}
    for path in sorted(site.rglob("*.so*"), key=lambda p: (len(p.parts), len(p.name), str(p))):
        if path.is_symlink() or not path.is_file():
            continue
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        if digest in first:
            path.unlink()
            path.symlink_to(os.path.relpath(first[digest], path.parent))
        else:
            first[digest] = path
    after = sum(p.stat().st_size for p in site.rglob("*") if p.is_file() and not p.is_symlink())
    print(f"slim: {before / 2**20:.0f} MiB -> {after / 2**20:.0f} MiB in {site}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--mode", choices=sorted(PLANS), required=True)
    r.add_argument(
        "--site",
        required=True,
        help="the folder the carried tree was unpacked into (ends in site-packages, and is on PYTHONPATH)",
    )
    r.add_argument("--work", default="/tmp/gpu_check/work")
    r.add_argument("--budget-s", type=float, default=290.0)
    r.add_argument("--out-dir", help="also write the report and raw rows here ($OUT)")
    r.add_argument(
        "--diagnose",
        action="store_true",
        help="before the first model, the lab's path step by step in a child (gdb when present), in the report",
    )
    sl = sub.add_parser("slim")
    sl.add_argument("site", type=Path)
    d = sub.add_parser("diagnose")
    d.add_argument("pair_dir", type=Path)
    d.add_argument("ngl", type=int)
    d.add_argument("order", choices=ORDERS)
    a = ap.parse_args(argv)
    if a.cmd == "diagnose":
        diagnose(a.pair_dir, a.ngl, a.order)
        return 0
    if a.cmd == "slim":
        slim(a.site)
        return 0
    return run(a)


if __name__ == "__main__":
    raise SystemExit(main())
