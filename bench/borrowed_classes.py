"""How far off a weight type the CPU probe does not time is, when it is charged at its nearest measured class.

    .venv/bin/python bench/borrowed_classes.py [--types Q4_0,Q5_1,Q5_K,Q3_K,IQ4_XS]

The probe's F16 model (engine.planning.speed.device_speed.PROBE_SHAPE) is quantized by llama-quantize to each type
alone (--pure), and its one-token and five-token passes are timed in one engine worker, next to the probe
that the same run takes just before (its own scratch cache). The prediction charges each type at the rates
model_cost.BORROWED_CLASSES names; the error of each is printed, and the largest is the bound
engine.planning.speed.prediction_band widens a prior by where a model holds such types. The types alternate in
order over two rounds (A B C / C B A), the fastest of each kept.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.paired import abba  # noqa: E402
from engine.core.paths import cache_dir  # noqa: E402
from engine.core.settings import LoadSettings  # noqa: E402
from engine.llama.quantize import quantize  # noqa: E402
from engine.measure.device_probe import probe_cpu_speed  # noqa: E402
from engine.models.gguf_inspect import inspect_gguf  # noqa: E402
from engine.planning.speed.device_speed import PROBE_VERSION  # noqa: E402
from engine.planning.speed.model_cost import model_cost, weight_class
from engine.runtime.client import EngineClient  # noqa: E402

BATCHES = (1, 5)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--types", default="Q4_0,Q5_1,Q5_K,Q3_K,IQ4_XS")
    ap.add_argument("--rounds", type=int, default=2)
    a = ap.parse_args()
    models = cache_dir() / "bench-models" / "cpu-probe"
    with tempfile.TemporaryDirectory(prefix="spectune-probe-") as scratch:
        device = probe_cpu_speed(cache=Path(scratch), models=models)
    f16 = models / f"v{PROBE_VERSION}" / "F16" / "target.gguf"
    files = {}
    for t in a.types.split(","):
        out = models / f"v{PROBE_VERSION}" / f"{t}-pure" / "target.gguf"
        if not out.is_file():
            out.parent.mkdir(parents=True, exist_ok=True)
            quantize(f16, out, t, pure=True)
        files[t] = out
    best: dict[str, dict[int, float]] = {}
    for r in range(a.rounds):
        for t in abba(list(files), r):
            with EngineClient() as client:
                client.start()
                client.load(LoadSettings(files[t], None, ctx=2048))
                got = client.measure("target", list(BATCHES), n_past=16, reps=5)
            best[t] = {b: min(best.get(t, {}).get(b, float("inf")), got[b]) for b in BATCHES}
    print(f"# borrowed_classes  {time.strftime('%Y-%m-%d %H:%M')}  probe: {device.source}")
    print(f"{'type':<8} {'charged as':<10} " + "  ".join(f"{'B=' + str(b):>22}" for b in BATCHES))
    worst = 0.0
    for t, path in files.items():
        cost = model_cost(inspect_gguf(path))
        row = f"{t:<8} {weight_class(t):<10} "
        for b in BATCHES:
            pred = device.forward_ms(cost, b, 16)
            err = pred / best[t][b] - 1
            worst = max(worst, abs(err))
            row += f"  {best[t][b]:>7.1f} ms pred {pred:>6.1f} {100 * err:>+5.0f}%"
        print(row)
    print(f"largest |error| {100 * worst:.0f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
