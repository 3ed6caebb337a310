"""How well the speed model follows a one-token pass as the context fills, here (issue 28).

    .venv/bin/python bench/long_context.py [--rounds 3] [--save]

The CPU probe (engine.measure.device_probe) times its own model at context position 16 and again deep in
the context (PROBE_LONG_PAST), which gives the attention's own rate (DeviceSpeed.attention_flops_per_s):
llama.cpp's CPU kernels attend position by position and head by head, far slower than reading the cache.
This bench checks that rate on models the probe never saw: the real hub models (testmodels.real,
fetched by scripts/test.sh) and two generated ones of the prediction bench (its cache: run
bench/prediction_error.py once first, or they are skipped).

For each model, in one engine worker: one-token and four-token passes at positions 16, 512 and 1500, the
positions taking turns in A B C / C B A order over the rounds (each pass the median of a few), each
position's figure the median over rounds. Reported: what the pass grows by from position 16, measured,
predicted with the attention's rate, and predicted without it (the cache's bytes alone, as probes up to v6
priced a one-token pass).

Goal, fixed before the first run: the predicted growth from 16 to 1500 within a factor 1.5 of the measured
one, on the median over the models and passes; the exit status is 1 when it is missed. The prediction's
level at position 16 (the bandwidth) is prediction_error.py's to judge; this bench judges the slope only.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.paired import abba, append_result  # noqa: E402
from engine.core.paths import cache_dir  # noqa: E402
from engine.core.settings import LoadSettings  # noqa: E402
from engine.measure.device_probe import probe_cpu_speed  # noqa: E402
from engine.models.gguf_inspect import inspect_gguf  # noqa: E402
from engine.planning.speed.device_speed import PROBE_N_PAST  # noqa: E402
from engine.planning.speed.model_cost import model_cost
from engine.runtime.client import EngineClient  # noqa: E402
from testmodels.real import RealModelError, cached_model  # noqa: E402

PASTS = (PROBE_N_PAST, 512, 1500)
BATCHES = (1, 4)
GOAL_FACTOR = 1.5
REAL = (
    ("real Qwen2.5-Coder 1.5B Q4_K_M", "qwen2.5-coder-1.5b"),
    ("real Qwen2.5-Coder 0.5B", "qwen2.5-coder-0.5b"),
    ("real Gemma-3 270M", "gemma-3-270m"),
)
GENERATED = (("0.35B Q4_K_M", "0.35B/Q4_K_M/target.gguf"), ("1.4B Q8_0", "1.4B/Q8_0/target.gguf"))


def models(log) -> list[tuple[str, Path]]:
    out = []
    for name, key in REAL:
        try:
            out.append((name, cached_model(key)))
        except RealModelError as e:
            log(f"# {name}: skipped ({e})")
    for name, rel in GENERATED:
        path = cache_dir() / "bench-models" / rel
        if path.is_file():
            out.append((name, path))
        else:
            log(f"# {name}: skipped (not in the prediction bench's cache; run bench/prediction_error.py once)")
    return out


def measure(path: Path, rounds: int) -> dict[int, dict[int, float]]:
    """ms of a pass by position and batch size, the positions alternating over the rounds."""
    got: dict[int, dict[int, list[float]]] = {n: {b: [] for b in BATCHES} for n in PASTS}
    with EngineClient() as client:
        client.start()
        client.load(LoadSettings(path, None, ctx=2048))
        for r in range(rounds):
            for n in abba(list(PASTS), r):
                for b, ms in client.measure("target", abba(list(BATCHES), r), n_past=n, reps=3).items():
                    got[n][b].append(ms)
    return {n: {b: statistics.median(v) for b, v in by_b.items()} for n, by_b in got.items()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--save", action="store_true", help="append the report to bench/results/long_context-cpu.txt")
    a = ap.parse_args()
    lines: list[str] = []

    def out(line: str) -> None:
        print(line, flush=True)
        lines.append(line)

    out(f"# long_context  {time.strftime('%Y-%m-%d %H:%M')}  {platform.machine()}")
    with tempfile.TemporaryDirectory(prefix="spectune-probe-") as scratch:
        device = probe_cpu_speed(cache=Path(scratch), models=cache_dir() / "bench-models" / "cpu-probe")
    blind = dataclasses.replace(device, attention_flops_per_s=0.0)
    out(
        f"# probe: F16 {device.bandwidth_bytes_per_s / 1e9:.1f} GB/s,"
        f" attention {device.attention_flops_per_s / 1e9:.1f} GFLOPs ({device.source})"
    )
    out(f"# {a.rounds} rounds; positions {', '.join(map(str, PASTS))} in alternating order; growth from {PASTS[0]}")
    header = f"{'model':<32} {'pass':>4} " + "  ".join(f"{f'@{n}: meas':>10} {'pred':>6} {'w/o':>6}" for n in PASTS[1:])
    out(header)
    ratios: list[float] = []
    blind_ratios: list[float] = []
    for name, path in models(out):
        cost = model_cost(inspect_gguf(path))
        ms = measure(path, a.rounds)
        for b in BATCHES:
            cells = []
            for n in PASTS[1:]:
                grew = ms[n][b] - ms[PASTS[0]][b]
                pred = device.forward_ms(cost, b, n) - device.forward_ms(cost, b, PASTS[0])
                pred_blind = blind.forward_ms(cost, b, n) - blind.forward_ms(cost, b, PASTS[0])
                cells.append(f"{grew:>+10.2f} {pred:>+6.2f} {pred_blind:>+6.2f}")
                if n == PASTS[-1] and grew > 0:
                    ratios.append(pred / grew)
                    blind_ratios.append(pred_blind / grew)
            out(f"{name:<32} {'B=' + str(b):>4} " + "  ".join(cells))
    out("# ms a pass grows by from position 16: measured, predicted with the attention's rate, and without it")
    missed = True
    if ratios:
        med = statistics.median(ratios)
        spread = statistics.median(abs(math.log(r)) for r in ratios if r > 0)
        missed = spread > math.log(GOAL_FACTOR)
        out(
            f"growth to {PASTS[-1]}, predicted / measured: median x{med:.2f}, median factor off"
            f" x{math.exp(spread):.2f}, goal <= x{GOAL_FACTOR:.2f}: {'MISSED' if missed else 'ok'}"
        )
        out(f"without the attention's rate: median x{statistics.median(blind_ratios):.2f}")
    if a.save:
        append_result("long_context-cpu.txt", lines)
    return 1 if missed else 0


if __name__ == "__main__":
    raise SystemExit(main())
