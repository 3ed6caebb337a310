"""Measuring this machine's CPU for the speed model: llama.cpp's own forward passes, a few seconds, once.

A small F16 model and its one-layer draft (engine.models.synthetic) are loaded in an engine worker;
the worker times forward passes of 1 and PROBE_BATCH tokens, and a short plain generation times a
whole step. engine.planning.device_speed.solve_cpu_speed turns the timings into a DeviceSpeed, which
is cached per processor, core count and llama.cpp build.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from engine.core.paths import cache_dir
from engine.core.settings import LoadSettings, SamplingSettings, SpecSettings
from engine.measure.generate import generate
from engine.models.gguf_inspect import inspect_gguf
from engine.models.synthetic import PairSpec, write_pair
from engine.planning.device_speed import (
    PROBE_BATCH,
    PROBE_SHAPE,
    cached_cpu_speed,
    cpu_key,
    save_cpu_speed,
    solve_cpu_speed,
)
from engine.planning.speed_model import DeviceSpeed, model_cost
from engine.runtime.client import EngineClient

PROBE_PROMPT = "the value of the data is"
PROBE_TOKENS = 48


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
        progress("timing forward passes of 1 and 16 tokens")
        ms = client.measure("target", [1, PROBE_BATCH], n_past=16, reps=reps)
        ms_small = client.measure("draft", [1], n_past=16, reps=reps)[1]
        progress("timing a short plain generation")
        plain = generate(client, PROBE_PROMPT, PROBE_TOKENS, SpecSettings("none"), SamplingSettings(), baseline=True)
    ms_per_token = 1000.0 / plain["tokens_per_s"] if plain["tokens_per_s"] else ms[1]
    speed = solve_cpu_speed(cost, small, ms[1], ms_small, ms[PROBE_BATCH], ms_per_token)
    save_cpu_speed(key, speed, cache)
    return speed
