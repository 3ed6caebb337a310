"""Add what a lent GPU measured to the published dataset, as rows every fit leaves out.

    .venv/bin/python bench/gpu_device_rows.py OUT/gpu_check-<stamp>.json [--data tests/data/gpu/device_runs.json]

bench/gpu_check.sh --out-dir writes a JSON of its rows beside its report: the card NVML named, each model's size
and parameters, and each setting's tokens/s. Its plain rows (no speculation) become llama-bench-like rows of
tests/data/gpu/device_runs.json: the GPU, the model (the Llama 3.1 8B and 3.2 1B shapes bench/gpu_models.py
writes, F16 and Q4_K_M), the tokens/s (the lab's, else llama-server's) and the report as the source.
bench/gpu_prediction.py predicts them with the fit on the published rows and prints their errors apart; no fit
ever reads them (issue 49: a GPU run is data that judges the model, not data that trains it). A row already in
the file (same source, model and setting) is not added twice.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DATA = REPO / "tests" / "data" / "gpu" / "device_runs.json"


def device_rows(run: dict) -> list[dict]:
    """The plain rows of a gpu_check JSON in the dataset's form; ValueError when the run names no GPU."""
    gpu = run.get("gpu")
    if not gpu:
        raise ValueError("this run names no GPU (a --cpu-dry-run, or NVML could not read it): nothing to add")
    out = []
    for row in run.get("rows", []):
        meta = run.get("models", {}).get(row.get("model"), {})
        tps = row.get("tokens_per_s") or row.get("server_tps")
        if not str(row.get("setting", "")).startswith("plain") or not tps or "size_gib" not in meta:
            continue
        out.append(
            {
                "gpu": gpu,
                "gpu_count": 1,
                "model": f"SpecTune random weights, {row['model']}",
                "architecture": meta["architecture"],
                "params_b": round(meta["params_b"], 3),
                "size_gib": round(meta["size_gib"], 3),
                "quant": meta["quant"],
                "test": "tg (SpecTune's lab, or llama-server where the lab did not run)",
                "tokens_per_s": round(float(tps), 2),
                "flash_attn": None,
                "ngl": 99,
                "build": "llama.cpp 0c1e570 (llama-cpp-python 0.3.36)",
                "date": None,
                "source": run.get("results") or "bench/gpu_check.sh",
                "caveats": "measured by SpecTune's bench/gpu_check.sh on a lent device: judged, never fitted",
                "setting": row["setting"],
            }
        )
    return out


def add(run_file: Path, data: Path = DATA) -> list[dict]:
    """Append the run's new plain rows to the data file; the rows added."""
    rows = device_rows(json.loads(run_file.read_text(encoding="utf-8")))
    doc = json.loads(data.read_text(encoding="utf-8")) if data.exists() else {"description": __doc__, "rows": []}
    have = {(r["source"], r["model"], r.get("setting")) for r in doc["rows"]}
    new = [r for r in rows if (r["source"], r["model"], r.get("setting")) not in have]
    doc["rows"].extend(new)
    data.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    return new


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run", type=Path, help="the gpu_check-<stamp>.json bench/gpu_check.sh wrote into $OUT")
    ap.add_argument("--data", type=Path, default=DATA)
    a = ap.parse_args()
    try:
        new = add(a.run, a.data)
    except (OSError, ValueError) as exc:
        print(f"gpu_device_rows: {exc}", file=sys.stderr)
        return 2
    print(f"added {len(new)} rows to {a.data}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
