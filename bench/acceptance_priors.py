"""The acceptance priors from a real same-family pair: each shipped workload set, in raw and chat mode.

    .venv/bin/python bench/acceptance_priors.py [--prompts 4] [--tokens 64] [--write]

The real Qwen2.5-Coder 1.5B Instruct Q4_K_M target with the 0.5B Instruct as its draft (engine.models.
real_models, fetched by scripts/test.sh) runs draft-simple at K=4, greedy, p-min 0, on the first prompts
of every set: as raw text, and as chat conversations rendered with the target's own template (how an
instruct model is used, and the app's default for one). For each set and mode it prints the acceptance
rate (accepted / drafted) and the per-position chance that gives that rate at K=4 under the speed model's
geometric assumption, the number a prediction takes as its prior.

--write stores the table in resources/catalog/acceptance_priors.json, with the pair, the date and the
settings beside it, where engine.planning.speed.speed_model reads its priors. Acceptance is a property of the
pair and the text, not of the machine, so these hold on any device.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engine.core.paths import RESOURCES_DIR  # noqa: E402
from engine.core.settings import LoadSettings, SamplingSettings, SpecSettings  # noqa: E402
from engine.core.stats import RunStats  # noqa: E402
from engine.core.workloads import list_workloads  # noqa: E402
from engine.measure.generate import generate  # noqa: E402
from engine.runtime.client import EngineClient  # noqa: E402
from testmodels.real import REAL_PAIR, cached_model, model  # noqa: E402

K = 4
OUT = RESOURCES_DIR / "catalog" / "acceptance_priors.json"


def per_position_chance(rate: float, k: int = K) -> float:
    """The p whose geometric acceptance (p + p^2 + ... + p^k) / k equals the measured rate (bisection)."""
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if sum(mid**i for i in range(1, k + 1)) / k < rate:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompts", type=int, default=4, help="prompts per set (the first ones)")
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--write", action="store_true", help=f"store the table in {OUT.relative_to(RESOURCES_DIR.parent)}")
    a = ap.parse_args()
    target, draft = (cached_model(k) for k in REAL_PAIR)
    spec, sampling = SpecSettings("draft-simple", draft_n_max=K), SamplingSettings(temp=0.0)
    print(f"# acceptance_priors  {time.strftime('%Y-%m-%d %H:%M')}  K={K}, greedy, p-min 0")
    print(f"# {a.prompts} prompts x {a.tokens} tokens per set and mode; {target.name} drafted by {draft.name}")
    table: dict[str, dict[str, float]] = {}
    with EngineClient() as client:
        client.start()
        client.load(LoadSettings(target, draft, ctx=4096))
        print(f"{'set':<18} {'mode':<5} {'drafted':>8} {'accepted':>9} {'rate':>6} {'p':>6}")
        for w in list_workloads():
            name = w.name
            row: dict[str, float] = {}
            for mode in ("raw", "chat"):
                prompts = w.to_run(chat=mode == "chat")[: a.prompts]
                runs = [generate(client, p, a.tokens, spec, sampling) for p in prompts]
                total = RunStats.of_summaries(runs)
                rate = total.acceptance_rate
                p = per_position_chance(rate)
                row[mode] = round(p, 3)
                row[f"{mode}_rate"] = round(rate, 4)
                print(f"{name:<18} {mode:<5} {total.drafted:>8} {total.accepted:>9} {rate:>6.3f} {p:>6.3f}", flush=True)
            table[name] = row
    if a.write:
        doc = {
            "source": (
                f"bench/acceptance_priors.py, {time.strftime('%Y-%m-%d')}: {model(REAL_PAIR[0]).description}, drafted "
                f"by {model(REAL_PAIR[1]).description}; draft-simple K={K}, greedy, p-min 0, the first "
                f"{a.prompts} prompts of each set, {a.tokens} tokens each"
            ),
            "k": K,
            "sets": table,
        }
        OUT.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
        print(f"# written to {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
