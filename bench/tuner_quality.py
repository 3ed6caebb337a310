"""How good and how quick is the auto-tuner, against the exhaustive grid?

    .venv/bin/python bench/tuner_quality.py [--sets code-completion,creative] [--prompts 4] [--max-tokens 96]

For every workload set, on the demo pair, in one engine worker:
  grid     every setting of the grid (draft-simple K=1..12 at p-min 0 and 0.5, the n-gram methods and a
           combination) once on the set's first N prompts; its top --top settings go on.
  tuner    the auto-tuner on the same prompts (its time against the grid's: goal <= 0.30).
  re-run   the grid's top settings and the tuner's pick (once, if it is one of them) in --repeats
           rounds, the order reversed every other round (A B C, C B A), each setting run from a fresh
           speculator: a one-token generation without speculation comes before every arm, so no
           n-gram pool starts warm from the arm before it.
The reference is the grid setting with the highest median tokens/s in the re-runs, other than the
pick. Each prompt of each round gives a paired ratio, pick / reference, measured minutes apart at
most; the median and its 90% interval (engine.core.paired) are reported. Goal: the pick at least
0.95 of the reference; it is missed when the whole interval lies below 0.95 (exit status 1). A
pick that beats every grid setting shows a ratio above 1.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engine.core.paired import abba, median_interval  # noqa: E402
from engine.core.settings import LoadSettings, SamplingSettings, SpecSettings  # noqa: E402
from engine.core.workloads import load_workload, shipped_names  # noqa: E402
from engine.measure.generate import generate  # noqa: E402
from engine.measure.tuner import Tuner  # noqa: E402
from engine.runtime.client import EngineClient  # noqa: E402


def grid(k_max: int) -> list[SpecSettings]:
    specs = [
        SpecSettings("draft-simple", draft_n_max=k, draft_p_min=p) for k in range(1, k_max + 1) for p in (0.0, 0.5)
    ]
    specs += [
        SpecSettings("ngram-simple", ngram_size_n=3, ngram_size_m=8),
        SpecSettings("ngram-mod", ngram_mod_n_match=8, ngram_mod_n_min=2, ngram_mod_n_max=16),
        SpecSettings("ngram-simple,draft-simple", draft_n_max=4, ngram_size_n=3, ngram_size_m=8),
    ]
    return specs


GOAL_RATIO, GOAL_SHARE = 0.95, 0.30


def per_prompt(client, spec, prompts, max_tokens, sampling) -> list[float]:
    """Tokens/s of each prompt (tokens after the first over the generation's wall time)."""
    out = []
    for p in prompts:
        s = generate(client, p, max_tokens, spec, sampling)
        out.append((s["tokens_generated"] - 1) * 1000.0 / s["wall_ms"] if s["wall_ms"] else 0.0)
    return out


def measure(client, spec, prompts, max_tokens, sampling) -> float:
    rates = per_prompt(client, spec, prompts, max_tokens, sampling)
    return statistics.fmean(rates) if rates else 0.0


def fresh(client, prompt, sampling) -> None:
    """One token without speculation: the next arm's speculators are built anew (specrt rebuilds them when
    the settings change), so every arm starts from the same, empty, n-gram pool."""
    generate(client, prompt, 1, SpecSettings("none"), sampling)


def label(s: SpecSettings) -> str:
    return (
        s.spec_type
        + (f" K={s.draft_n_max}" if "draft-simple" in s.types else "")
        + (f" p={s.draft_p_min:g}" if s.draft_p_min else "")
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sets", default=",".join(shipped_names()))
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=96)
    ap.add_argument("--k-max", type=int, default=12)
    ap.add_argument("--quant", default="f16", choices=("f16", "q8_0"))
    ap.add_argument("--threads", type=int, default=1, help="engine CPU threads (1 keeps a 2-core machine steady)")
    ap.add_argument("--repeats", type=int, default=4, help="alternating rounds of the re-run")
    ap.add_argument("--top", type=int, default=3, help="grid settings that go on to the re-run")
    ap.add_argument("--save", type=Path, help="also write the table to this file")
    a = ap.parse_args()
    lines: list[str] = []

    def out(line: str) -> None:
        lines.append(line)
        print(line, flush=True)

    from engine.models.demo_models import demo_pair

    target, draft = demo_pair(a.quant)
    load = LoadSettings(target, draft, ctx=4096, threads=a.threads)
    sampling = SamplingSettings(temp=0.0)
    out(
        f"pair: {target.name} + {draft.name}; {a.prompts} prompts x {a.max_tokens} tokens per set, temperature 0, "
        f"threads {a.threads}, {time.strftime('%Y-%m-%d %H:%M')}"
    )
    out(
        f"{'set':<18} {'grid reference':>24} {'tok/s':>10} {'tuner pick':>24} {'tok/s':>8} {'ratio':>6} "
        f"{'[interval]':>16} {'time share':>10}"
    )
    failed = False
    with EngineClient() as client:
        client.start()
        client.load(load)
        for name in a.sets.split(","):
            prompts = [p.text for p in load_workload(name).prompts][: a.prompts]
            t0 = time.monotonic()
            scores = []
            for spec in grid(a.k_max):
                fresh(client, prompts[0], sampling)
                scores.append((measure(client, spec, prompts, a.max_tokens, sampling), spec))
            grid_s = time.monotonic() - t0
            top = [spec for _, spec in sorted(scores, key=lambda x: -x[0])[: a.top]]
            t0 = time.monotonic()
            result = Tuner(
                client, load, prompts, a.max_tokens, sampling, budget_s=1e9, k_max=a.k_max, progress=lambda m: None
            ).run()
            tune_s = time.monotonic() - t0
            pick = result.best.spec
            arms = top + ([pick] if pick not in top else [])
            rates: dict[int, list[list[float]]] = {i: [] for i in range(len(arms))}  # arm -> rounds -> prompts
            for r in range(a.repeats):
                for i in abba(range(len(arms)), r):
                    fresh(client, prompts[0], sampling)
                    rates[i].append(per_prompt(client, arms[i], prompts, a.max_tokens, sampling))
            pick_i = arms.index(pick)
            medians = {i: statistics.median(x for rnd in rates[i] for x in rnd) for i in rates}
            ref_i = max((i for i in rates if i != pick_i), key=lambda i: medians[i])
            ratios = [p / b for pr, br in zip(rates[pick_i], rates[ref_i]) for p, b in zip(pr, br) if b > 0]
            paired = median_interval(ratios)
            share = tune_s / grid_s
            missed = paired.high < GOAL_RATIO or share > GOAL_SHARE
            failed |= missed
            best_of_all = max(medians, key=lambda i: medians[i]) == pick_i
            out(
                f"{name:<18} {label(arms[ref_i]):>24} {medians[ref_i]:10.1f} {label(pick):>24} "
                f"{medians[pick_i]:8.1f} {paired.median:6.3f} [{paired.low:.3f}, {paired.high:.3f}] "
                f"{share:10.3f}"
                + ("  (the pick is the fastest re-run)" if best_of_all else "")
                + ("  MISSED" if missed else "")
            )
    out(
        f"ratio: the tuner's pick / the fastest other setting of the grid's top {a.top}, median of "
        f"{a.repeats} rounds x {a.prompts} prompts of paired ratios with its "
        f"{int(100 * 0.9)}% interval (goal >= {GOAL_RATIO}, missed when the interval lies wholly below); "
        f"time share: tuner time / grid time (goal <= {GOAL_SHARE})"
    )
    if a.save:
        a.save.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
