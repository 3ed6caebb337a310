"""Measuring this machine's CPU for the speed model: llama.cpp's own forward passes, a few minutes, once.

A model of a real one's proportions (PROBE_SHAPE: 0.37B parameters, 730 MB as F16) and its one-layer
draft (engine.models.synthetic) are loaded in an engine worker; the worker times forward passes of 1 to
16 tokens (PROBE_BATCHES) and, on the F16 pair, one token deep in the context (PROBE_LONG_PAST: the
attention's own rate); short plain generations time a whole step. A thin pair of as many layers
(PROBE_THIN_SHAPE, 256 wide) tells a layer's fixed cost from the bandwidth, and two small models that
differ in their vocabulary alone (PROBE_ROWS_VOCABS) a matrix row's. The same models quantized by
llama-quantize to each of Q8_0, Q5_0, Q4_K and Q6_K alone (--pure) are timed the same way, since
llama.cpp's CPU kernels for those weights run at other speeds than its F16 ones and than each other.
engine.planning.speed.device_speed.solve_cpu_speed turns the timings into a DeviceSpeed, which is cached per
processor, core count and llama.cpp build. Every probe model is locked in RAM while timed
(LoadSettings.lock_in_ram): a system that pages out mapped files left idle for a while (this project's
VM does, a minute after) would otherwise time page faults as the machine's speed. The models are
written to a scratch folder in the user cache; each quantized copy is deleted once timed, the F16 pair
last (about 1.4 GB at most).
"""

from __future__ import annotations

import shutil
import statistics
import threading
from collections.abc import Callable
from pathlib import Path

from engine.core.paths import cache_dir
from engine.core.settings import LoadSettings, SamplingSettings, SpecSettings
from engine.llama.quantize import quantize
from engine.measure.generate import generate
from engine.models.gguf_inspect import inspect_gguf
from engine.models.synthetic import PairSpec, write_pair
from engine.planning.hardware import HardwareReport
from engine.planning.speed.device_speed import (
    PROBE_BATCHES,
    PROBE_DRAFT_LAYERS,
    PROBE_LONG_PAST,
    PROBE_LONG_ROUNDS,
    PROBE_N_PAST,
    PROBE_QUANTS,
    PROBE_ROWS_ROUNDS,
    PROBE_ROWS_SHAPE,
    PROBE_ROWS_VOCABS,
    PROBE_SHAPE,
    PROBE_THIN_SHAPE,
    PROBE_VERSION,
    PROBE_VOCAB,
    DeviceSpeed,
    ProbePair,
    ProbeTimes,
    cached_cpu_speed,
    cpu_key,
    local_device,
    save_cpu_speed,
    solve_cpu_speed,
)
from engine.planning.speed.model_cost import ModelCost, model_cost
from engine.runtime.client import EngineClient

PROBE_PROMPT = "the value of the data is"
PROBE_TOKENS = 48
# each timing is taken this many times and the fastest kept: another program's burst of work only ever
# slows a pass down, so the fastest of a few is the machine's own speed
REPEATS = 3


class ProbeCancelled(Exception):
    """The probe was asked to stop (the app closing) before it finished; nothing was cached."""


def probe_cpu_speed(
    progress: Callable[[str], None] = lambda _: None,
    reps: int = 5,
    cache: Path | None = None,
    cancel: threading.Event | None = None,
    models: Path | None = None,
) -> DeviceSpeed:
    """Measure llama.cpp's CPU forward passes, or read this machine and build's cached measurement
    (cache: the folder it is kept in; default the user cache). cancel: set to stop between steps
    (ProbeCancelled). models: a folder to write the probe's models to and keep, so that a second probe
    starts at once (a benchmark probing again and again); default a scratch folder, emptied after."""

    steps = [0, 0]  # done, in all (known once the folder is looked at)

    def step(message: str) -> None:
        if cancel is not None and cancel.is_set():
            raise ProbeCancelled("the CPU probe was stopped before it finished")
        steps[0] += 1
        progress(f"step {steps[0]} of {steps[1]}: {message}")

    with EngineClient() as client:
        hello = client.start()
        build = str(hello.get("llama", ""))
        key = cpu_key(build)
        cached = cached_cpu_speed(key, cache)
        if cached is not None:
            return cached
    scratch = models is None
    # a kept folder holds each probe version's models apart: another version may write other shapes
    folder = models / f"v{PROBE_VERSION}" if models is not None else cache_dir() / "cpu-probe"
    if scratch:
        shutil.rmtree(folder, ignore_errors=True)  # an earlier probe's models, or one stopped half-way
    try:
        target, draft = folder / "F16" / "target.gguf", folder / "F16" / "draft.gguf"
        steps[1] = _step_count(folder, target, draft)
        if not (target.is_file() and draft.is_file()):
            step(f"writing a {PROBE_SHAPE.n_layer}-layer F16 model (730 MB) to time llama.cpp's CPU forward pass")
            spec = PairSpec(shape=PROBE_SHAPE, draft_layers=PROBE_DRAFT_LAYERS, dtype="f16", n_vocab=PROBE_VOCAB)
            write_pair(folder / "F16", spec)
        step("timing F16 forward passes of 1 to 16 tokens")
        timed = {"F16": _time_pair(target, draft, reps, long=True)}
        thin_target, thin_draft = folder / "thin" / "target.gguf", folder / "thin" / "draft.gguf"
        if not (thin_target.is_file() and thin_draft.is_file()):
            write_pair(
                folder / "thin", PairSpec(shape=PROBE_THIN_SHAPE, draft_layers=1, dtype="f16", n_vocab=PROBE_VOCAB)
            )
        step("timing a thin model of as many layers: what a layer costs beyond its bytes")
        thin = _time_pair(thin_target, thin_draft, reps)
        step("timing short plain generations: what a token takes beyond its forward pass")
        beyond = _beyond_the_pass(draft, reps)
        vocabs = _rows_models(folder / "rows")
        step("timing two vocabularies' output layers: what a matrix row costs beyond its bytes")
        rows = {"F16": _time_rows(*vocabs, reps)}
        for cls, ftype in PROBE_QUANTS.items():
            files = [folder / f"{cls}-pure" / p.name for p in (target, draft)]
            quantized = [folder / f"{cls}-pure" / f"rows-{p.name}" for p in vocabs]
            if not all(f.is_file() for f in (*files, *quantized)):
                step(f"quantizing the model to {cls}, whose kernels differ from F16's")
                files[0].parent.mkdir(parents=True, exist_ok=True)
                for src, dst in zip((target, draft, *vocabs), (*files, *quantized)):
                    quantize(src, dst, ftype, pure=True)
            step(f"timing {cls} forward passes")
            timed[cls] = _time_pair(files[0], files[1], reps)
            rows[cls] = _time_rows(quantized[0], quantized[1], reps)
            if scratch:
                shutil.rmtree(files[0].parent, ignore_errors=True)
    finally:
        if scratch:
            shutil.rmtree(folder, ignore_errors=True)
    speed = solve_cpu_speed(timed, beyond, thin, rows)
    save_cpu_speed(key, speed, cache)
    return speed


def _step_count(folder: Path, target: Path, draft: Path) -> int:
    """How many steps probe_cpu_speed will report: four timings, one per quantization class, and a write for
    each model set a kept folder does not hold yet (what the page's progress counts)."""
    writes = int(not (target.is_file() and draft.is_file()))
    for cls in PROBE_QUANTS:
        kept = folder / f"{cls}-pure"
        names = (target.name, draft.name, *(f"rows-{n}.gguf" for n in PROBE_ROWS_VOCABS))
        writes += not all((kept / n).is_file() for n in names)
    return 4 + len(PROBE_QUANTS) + writes


def measured_device(
    report: HardwareReport, cpu_only: bool = False, progress: Callable[[str], None] = lambda _: None
) -> DeviceSpeed:
    """device_speed.local_device, with this CPU probed now (a few minutes, once) where that would assume it
    from its core count: what the command line predicts for."""
    device = local_device(report, cpu_only=cpu_only)
    return probe_cpu_speed(progress=progress) if device.assumed else device


def _time_pair(target: Path, draft: Path, reps: int, long: bool = False) -> tuple[ModelCost, ModelCost, ProbeTimes]:
    """A probe pair's costs and timings, in an engine worker of its own (see _fastest_passes); long: the
    target's one-token pass at PROBE_LONG_PAST too."""
    with EngineClient() as client:
        client.start()
        client.load(LoadSettings(target, draft, ctx=2 * PROBE_LONG_PAST, lock_in_ram=True))
        times = _fastest_passes(client, reps, long)
    return model_cost(inspect_gguf(target)), model_cost(inspect_gguf(draft)), times


def _rows_models(folder: Path) -> tuple[Path, Path]:
    """The two F16 models of PROBE_ROWS_SHAPE that differ in their vocabulary alone (PROBE_ROWS_VOCABS),
    written once into folder (their drafts are not needed)."""
    paths = tuple(folder / f"{n}.gguf" for n in PROBE_ROWS_VOCABS)
    for n, path in zip(PROBE_ROWS_VOCABS, paths):
        if not path.is_file():
            spec = PairSpec(shape=PROBE_ROWS_SHAPE, draft_layers=1, dtype="f16", n_vocab=n)
            written, unused = write_pair(folder / f"v{n}", spec)
            written.replace(path)
            shutil.rmtree(unused.parent, ignore_errors=True)
    return paths[0], paths[1]


def _time_rows(large: Path, small: Path, reps: int) -> ProbePair:
    """Two models that differ only in their vocabulary, as a probe pair (ProbeTimes: the larger one's one-token
    pass and the smaller one's): each in a worker of its own, both loaded at once, their passes timed side by
    side PROBE_ROWS_ROUNDS times in alternating order. The larger pass is the smaller one's fastest plus the
    median difference, so that a slow spell slows both sides of a difference alike."""
    with EngineClient() as one, EngineClient() as other:
        for client, path in ((one, large), (other, small)):
            client.start()
            client.load(LoadSettings(path, None, ctx=256, lock_in_ram=True))
        diffs, fastest = [], float("inf")
        for r in range(PROBE_ROWS_ROUNDS):
            order = (one, other) if r % 2 == 0 else (other, one)
            t = {id(c): c.measure("target", [1], n_past=PROBE_N_PAST, reps=reps)[1] for c in order}
            diffs.append(t[id(one)] - t[id(other)])
            fastest = min(fastest, t[id(other)])
    costs = [model_cost(inspect_gguf(p)) for p in (large, small)]
    return costs[0], costs[1], ProbeTimes({1: fastest + statistics.median(diffs)}, fastest)


def _beyond_the_pass(model: Path, reps: int) -> float:
    """What a token of plain generation takes beyond its one-token forward pass (sampling over the
    vocabulary, the loop), the median over REPEATS rounds, each pairing a generation with a pass timed
    just before it (a slow spell of the machine then does not pass for a cost). Timed on the probe's
    draft, whose pass takes a few ms: the noise of a pass scales with its length, and on the 16-layer
    target it buried a cost of a fraction of a ms (one probe solved it to 3.9 ms)."""
    beyond: list[float] = []
    with EngineClient() as client:
        client.start()
        client.load(LoadSettings(model, model, ctx=2048, lock_in_ram=True))
        for _ in range(REPEATS):
            one = client.measure("target", [1], n_past=PROBE_N_PAST, reps=reps)[1]
            run = generate(client, PROBE_PROMPT, PROBE_TOKENS, SpecSettings("none"), SamplingSettings(), baseline=True)
            if run["tokens_per_s"]:
                beyond.append(1000.0 / run["tokens_per_s"] - one)
    return max(statistics.median(beyond), 0.0) if beyond else 0.0


def _fastest_passes(client: EngineClient, reps: int, long: bool = False) -> ProbeTimes:
    """The target's passes of 1 and PROBE_BATCHES tokens and the draft's of 1, each the fastest of REPEATS
    rounds; long: the target's one-token pass at PROBE_LONG_PAST too, as the fastest short pass plus the
    median of PROBE_LONG_ROUNDS paired differences (_deep_pass_extra)."""
    ms: dict[int, float] = {}
    ms_small = float("inf")
    for _ in range(REPEATS):
        passes = client.measure("target", [1, *PROBE_BATCHES], n_past=PROBE_N_PAST, reps=reps)
        for n, t in passes.items():
            ms[n] = min(ms.get(n, float("inf")), t)
        ms_small = min(ms_small, client.measure("draft", [1], n_past=PROBE_N_PAST, reps=reps)[1])
    return ProbeTimes(ms, ms_small, ms[1] + _deep_pass_extra(client, reps) if long else None)


def _deep_pass_extra(client: EngineClient, reps: int) -> float:
    """What the target's one-token pass at PROBE_LONG_PAST takes beyond one at PROBE_N_PAST: each round
    times the two back to back, the order reversed every other round, and the median difference is kept.
    A slow spell then slows both sides of a difference, where the fastest of each, taken apart, paired
    one spell's pass with another's."""
    extra: list[float] = []
    for r in range(PROBE_LONG_ROUNDS):
        order = (PROBE_N_PAST, PROBE_LONG_PAST) if r % 2 == 0 else (PROBE_LONG_PAST, PROBE_N_PAST)
        t = {n_past: client.measure("target", [1], n_past=n_past, reps=reps)[1] for n_past in order}
        extra.append(t[PROBE_LONG_PAST] - t[PROBE_N_PAST])
    return statistics.median(extra)
