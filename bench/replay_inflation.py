"""How much replaying a prompt inflates an n-gram method's figures, on the real pair (issue 51).

The Lab, the tuner and the quick check run a small prompt set over and over at temperature 0. Some
n-gram methods keep what one request taught them for the next (engine.core.settings
LEARNS_ACROSS_REQUESTS): a prompt run again is then drafted from its own earlier answer, which no new
request of a user's would be. Since issue 51 every measured generation starts from the speculators a
freshly started llama-server has ("fresh"); this bench measures what the old way ("replayed": the
prompt set run a second time on the same speculators) reported instead.

For each method and each prompt of the set, side by side in one run:
- fresh: the prompt on forgotten speculators (what SpecTune reports now);
- replayed: the same prompt again without forgetting, right after a run of it, as the Lab's loop over a
  small prompt set did.
The arms alternate prompt by prompt (ABBA): where the replayed arm goes first, an unmeasured fresh run
of the prompt teaches it. Drafted and accepted counts at temperature 0 are exact, so acceptance and
tokens per step need no interval; the speed is each prompt's replayed / fresh tokens/s, median and
quartiles.

    .venv/bin/python bench/replay_inflation.py [--tokens 128] [--prompts 4] [--save]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.paired import abba, append_result, median_and_quartiles  # noqa: E402
from engine.core.settings import LoadSettings, SamplingSettings, SpecSettings  # noqa: E402
from engine.core.stats import RunStats  # noqa: E402
from engine.measure.generate import generate  # noqa: E402
from engine.measure.validate import load_prompts  # noqa: E402
from engine.runtime.client import EngineClient  # noqa: E402
from testmodels.real import cached_model  # noqa: E402

REAL_PAIR = ("qwen2.5-coder-1.5b", "qwen2.5-coder-0.5b")
GREEDY = SamplingSettings(temp=0.0)
METHODS = (
    SpecSettings("ngram-simple"),  # learns nothing across requests: its two arms must agree exactly
    SpecSettings("ngram-mod"),
    SpecSettings("ngram-map-k"),
    SpecSettings("ngram-mod,draft-simple", draft_n_max=3),
    SpecSettings("draft-simple", draft_n_max=3),  # the control: a draft model carries nothing over either
)


def _row(summaries: list[dict]) -> tuple[int, int, int, float]:
    s = RunStats.of_summaries(summaries)
    return s.drafted, s.accepted, s.steps, s.tokens_per_s


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--workload", default="code-completion")
    ap.add_argument("--prompts", type=int, default=4, help="the workload's first N prompts")
    ap.add_argument("--save", action="store_true", help="append the report to bench/results/replay_inflation.txt")
    a = ap.parse_args()
    target, draft = (cached_model(k) for k in REAL_PAIR)
    prompts = load_prompts(a.workload)[: a.prompts]
    lines = [
        f"# replay_inflation {time.strftime('%Y-%m-%d %H:%M')}: {target.name} + {draft.name}, "
        f"workload {a.workload} ({len(prompts)} prompts), {a.tokens} tokens, temperature 0",
        f"{'method':<24} {'arm':<9} {'drafted':>8} {'accepted':>8} {'acceptance':>10} {'mean length':>11} {'tok/s':>7}",
    ]
    print(lines[0], flush=True)
    failed = False
    with EngineClient() as client:
        client.start()
        client.load(LoadSettings(target, draft, ctx=4096))
        for spec in METHODS:
            fresh: list[dict] = []
            replayed: list[dict] = []
            for i, p in enumerate(prompts):
                for arm in abba(("fresh", "replayed"), i):
                    if arm == "fresh":
                        fresh.append(generate(client, p, a.tokens, spec, GREEDY))
                        continue
                    if len(fresh) == len(replayed):  # nothing of this prompt ran yet: teach it
                        generate(client, p, a.tokens, spec, GREEDY)
                    replayed.append(generate(client, p, a.tokens, spec, GREEDY, fresh=False))
            ratios = [r["tokens_per_s"] / f["tokens_per_s"] for f, r in zip(fresh, replayed) if f["tokens_per_s"]]
            med, q1, q3 = median_and_quartiles(ratios)
            for arm, runs in (("fresh", fresh), ("replayed", replayed)):
                d, acc, steps, tps = _row(runs)
                lines.append(
                    f"{spec.spec_type + (f' K={spec.draft_n_max}' if 'draft-' in spec.spec_type else ''):<24} "
                    f"{arm:<9} {d:>8} {acc:>8} {acc / d if d else 0:>10.3f} {1 + acc / steps if steps else 1:>11.2f} "
                    f"{tps:>7.1f}"
                )
            lines.append(f"{'':<24} replayed / fresh tokens/s: median {med:.3f} [{q1:.3f}, {q3:.3f}]")
            # what must hold: a method that carries nothing over is not changed by replaying
            if not spec.learns_across_requests and _row(fresh)[:3] != _row(replayed)[:3]:
                lines.append(f"{'':<24} FAIL: {spec.spec_type} carries nothing across requests, yet its counts moved")
                failed = True
            print("\n".join(lines[-3:]), flush=True)
    if a.save:
        append_result("replay_inflation.txt", lines)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
