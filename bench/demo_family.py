"""The numbers in resources/models/README.md: the demo family on every workload set.

    .venv/bin/python bench/demo_family.py [--quant f16] [--max-tokens 128] [--threads 1] [--save FILE]

For every shipped workload set and a few settings (draft-simple K=2/4/8, ngram-mod,
ngram-mod + draft-simple; temperature 0, and 0.8 for K=4) it runs
``spectune run --demo --workload SET --baseline --json`` (the command a user would
type) and prints acceptance, tokens/s, the baseline measured right after each
prompt on the same loaded models, and their ratio. Every row comes from this one
invocation on this machine; nothing is copied from an earlier run.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from engine.core.workloads import shipped_names  # noqa: E402

NGRAM_MOD = ["--ngram-mod-n-match", "8", "--ngram-mod-n-min", "2", "--ngram-mod-n-max", "16"]
SETTINGS = {
    "draft-simple K=2": ["--spec-type", "draft-simple", "--draft-n-max", "2"],
    "draft-simple K=4": ["--spec-type", "draft-simple", "--draft-n-max", "4"],
    "draft-simple K=8": ["--spec-type", "draft-simple", "--draft-n-max", "8"],
    "draft-simple K=4 temp 0.8": ["--spec-type", "draft-simple", "--draft-n-max", "4", "--temp", "0.8", "--seed", "42"],
    "ngram-mod": ["--spec-type", "ngram-mod", *NGRAM_MOD],
    "ngram-mod,draft-simple K=4": ["--spec-type", "ngram-mod,draft-simple", "--draft-n-max", "4", *NGRAM_MOD],
}


def run_set(workload: str, args: list[str], a: argparse.Namespace) -> dict:
    cmd = [
        sys.executable,
        "-m",
        "engine.cli",
        "run",
        "--demo",
        a.quant,
        "--workload",
        workload,
        "--baseline",
        "--json",
        "--max-tokens",
        str(a.max_tokens),
        "--ctx",
        "1024",
        "--threads",
        str(a.threads),
        *args,
    ]
    if a.no_repack:
        cmd.append("--no-repack")
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    if r.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{r.stderr[-2000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quant", default="f16", choices=("f16", "q8_0"))
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--threads", type=int, default=1, help="1 keeps the numbers steady on a busy machine")
    p.add_argument("--no-repack", action="store_true")
    p.add_argument("--sets", help="comma list (default: every shipped set)")
    p.add_argument("--settings", help="comma list of setting names (default: all)")
    p.add_argument("--save", type=Path, help="also write the table and the raw summaries here")
    a = p.parse_args()
    sets = a.sets.split(",") if a.sets else shipped_names()
    settings = {k: v for k, v in SETTINGS.items() if not a.settings or k in a.settings.split(",")}
    lines = [
        f"demo family ({a.quant}), {a.max_tokens} tokens per prompt, threads {a.threads}, "
        f"{platform.processor() or platform.machine()}, {time.strftime('%Y-%m-%d %H:%M')}",
        f"{'set':<16} {'setting':<28} {'accept':>7} {'acc/tok':>7} {'tok/s':>8} {'base':>8} {'speedup':>8}",
    ]
    print("\n".join(lines), flush=True)
    raw = {}
    for workload in sets:
        for name, args in settings.items():
            s = run_set(workload, args, a)
            raw[f"{workload} | {name}"] = {k: v for k, v in s.items() if k not in ("prompts", "text")}
            # accepted draft tokens per generated token: how much of the text speculation supplied
            per_token = s["accepted"] / max(1, s["tokens_generated"])
            line = (
                f"{workload:<16} {name:<28} {s['acceptance_rate']:7.3f} {per_token:7.3f} "
                f"{s['tokens_per_s']:8.1f} {s['baseline_tokens_per_s']:8.1f} {s['speedup']:8.3f}"
            )
            lines.append(line)
            print(line, flush=True)
    if a.save:
        a.save.write_text("\n".join(lines) + "\n\n" + json.dumps(raw, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
