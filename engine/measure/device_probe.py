"""Measuring this machine's CPU for the speed model: llama.cpp's own forward passes, a few seconds, once.

A small F16 model and its one-layer draft (engine.models.synthetic) are loaded in an engine worker;
the worker times forward passes of 1 to 16 tokens (PROBE_BATCHES), and short plain generations time a
whole step. The same pair quantized by llama-quantize to Q8_0 and to Q4_K_M is timed the same way,
since llama.cpp's CPU kernels for those weights run at other speeds than its F16 ones.
engine.planning.device_speed.solve_cpu_speed and solve_class_rates turn the timings into a
DeviceSpeed, which is cached per processor, core count and llama.cpp build.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from pathlib import Path

from engine.core.paths import cache_dir
from engine.core.settings import LoadSettings, SamplingSettings, SpecSettings
from engine.llama.quantize import quantize
from engine.measure.generate import generate
from engine.models.gguf_inspect import inspect_gguf
from engine.models.synthetic import PairSpec, write_pair
from engine.planning.device_speed import (
    PROBE_BATCHES,
    PROBE_QUANTS,
    PROBE_SHAPE,
    ProbeTimes,
    cached_cpu_speed,
    cpu_key,
    save_cpu_speed,
    solve_cpu_speed,
)
from engine.planning.speed_model import DeviceSpeed, ModelCost, model_cost
from engine.runtime.client import EngineClient

PROBE_PROMPT = "the value of the data is"
PROBE_TOKENS = 48
# each timing is taken this many times and the fastest kept: another program's burst of work only ever
# slows a pass down, so the fastest of a few is the machine's own speed
REPEATS = 3


def probe_cpu_speed(
    progress: Callable[[str], None] = lambda _: None, reps: int = 5, cache: Path | None = None
) -> DeviceSpeed:
    """Measure llama.cpp's CPU forward passes, or read this machine and build's cached measurement
    (cache: the folder it is kept in; default the user cache)."""
    with EngineClient() as client:
        hello = client.start()
        build = str(hello.get("llama", ""))
        key = cpu_key(build)
        cached = cached_cpu_speed(key, cache)
        if cached is not None:
            return cached
        progress("writing a small F16 model to time llama.cpp's CPU forward pass")
        folder = cache_dir() / "cpu-probe"
        target, draft = write_pair(folder, PairSpec(shape=PROBE_SHAPE, draft_layers=1, dtype="f16"))
        cost, small = model_cost(inspect_gguf(target)), model_cost(inspect_gguf(draft))
        progress("loading it")
        client.load(LoadSettings(target, draft, ctx=2048))
        progress("timing forward passes of 1 to 16 tokens and short plain generations")
        times, beyond = _fastest_passes(client, reps, generation=True)
        timed = {"F16": (cost, small, times)}
    for cls, ftype in PROBE_QUANTS.items():
        progress(f"timing {ftype} weights, whose kernels differ from F16's")
        timed[cls] = _time_class(folder, target, draft, ftype, reps)
    speed = solve_cpu_speed(timed, timed["F16"][2].one + beyond)
    save_cpu_speed(key, speed, cache)
    return speed


def _time_class(
    folder: Path, target: Path, draft: Path, ftype: str, reps: int
) -> tuple[ModelCost, ModelCost, ProbeTimes]:
    """The probe pair quantized to ftype (once, kept beside it), its costs, loaded and timed like the F16 one."""
    files = []
    for src in (target, draft):
        out = folder / f"{src.stem}-{ftype}.gguf"
        if not out.is_file():
            quantize(src, out, ftype)
        files.append(out)
    with EngineClient() as client:
        client.start()
        client.load(LoadSettings(files[0], files[1], ctx=2048))
        times, _ = _fastest_passes(client, reps)
    return model_cost(inspect_gguf(files[0])), model_cost(inspect_gguf(files[1])), times


def _fastest_passes(client: EngineClient, reps: int, generation: bool = False) -> tuple[ProbeTimes, float]:
    """The target's passes of 1 and PROBE_BATCHES tokens and the draft's of 1, each the fastest of REPEATS
    rounds; with generation, each round also runs a short plain generation, and the second value is the
    median over the rounds of what a generated token took beyond that round's one-token pass (sampling,
    the loop): paired in time, so a slow spell of the machine does not pass for a cost (else 0)."""
    ms: dict[int, float] = {}
    ms_small = float("inf")
    beyond: list[float] = []
    for _ in range(REPEATS):
        passes = client.measure("target", [1, *PROBE_BATCHES], n_past=16, reps=reps)
        for n, t in passes.items():
            ms[n] = min(ms.get(n, float("inf")), t)
        ms_small = min(ms_small, client.measure("draft", [1], n_past=16, reps=reps)[1])
        if generation:
            run = generate(client, PROBE_PROMPT, PROBE_TOKENS, SpecSettings("none"), SamplingSettings(), baseline=True)
            if run["tokens_per_s"]:
                beyond.append(max(1000.0 / run["tokens_per_s"] - passes[1], 0.0))
    return ProbeTimes(ms, ms_small), statistics.median(beyond) if beyond else 0.0
