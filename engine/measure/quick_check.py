"""A quick check of which speculative setting pays on this machine, measured on the loaded pair.

The Lab runs it on first start with the demo pair (and on demand) so that the live run starts from a
setting measured here rather than assumed: a draft that pays on a GPU can lose on two CPU cores, where
verifying K+1 tokens costs several times one token. A few settings and no speculation each run the same
prompt, in rounds whose order reverses every other round (A B C D, D C B A), so drift weighs on all
alike; each setting's ratio to no speculation comes from the same round, and the median of a setting's
rounds is its measured speedup. Short by design (seconds, not a tune): it picks the starting point; the
Tune page finds the best setting.

This module holds the schedule and the verdict; the runs go through whatever drives the engine (the Lab
page, asynchronously, or a blocking EngineClient).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from engine.core.paired import abba
from engine.core.settings import SpecSettings

BASELINE = SpecSettings("none")
# what can pay with a small draft model on a small machine: short drafts, n-gram lookups that cost
# next to nothing, and the two together (engine.measure.demo measures the same kinds)
CANDIDATES = (
    SpecSettings("draft-simple", draft_n_max=2),
    SpecSettings("draft-simple", draft_n_max=4),
    SpecSettings("ngram-mod", ngram_mod_n_match=8, ngram_mod_n_min=2, ngram_mod_n_max=16),
    SpecSettings("ngram-mod,draft-simple", draft_n_max=2, ngram_mod_n_match=8, ngram_mod_n_min=2, ngram_mod_n_max=16),
)
ROUNDS = 2
MAX_TOKENS = 64


@dataclass(frozen=True)
class Outcome:
    spec: SpecSettings
    speedup: float  # median over rounds of tokens/s against no speculation in the same round
    by_round: tuple[float, ...]

    def label(self) -> str:
        k = f" K={self.spec.draft_n_max}" if "draft-simple" in self.spec.types else ""
        return f"{self.spec.spec_type}{k}"


def schedule(candidates: tuple[SpecSettings, ...] = CANDIDATES, rounds: int = ROUNDS) -> list[tuple[int, SpecSettings]]:
    """(round, setting) in the order to run them; no speculation is one of the arms of every round."""
    arms = [BASELINE, *candidates]
    return [(r, spec) for r in range(rounds) for spec in abba(arms, r)]


def verdict(results: list[tuple[int, SpecSettings, float]]) -> list[Outcome]:
    """The settings by measured speedup, best first, from (round, setting, tokens/s) of every run; a
    round without its baseline (stopped early) does not count."""
    baseline = {r: tps for r, spec, tps in results if spec == BASELINE and tps > 0}
    ratios: dict[SpecSettings, list[float]] = {}
    for r, spec, tps in results:
        if spec != BASELINE and r in baseline:
            ratios.setdefault(spec, []).append(tps / baseline[r])
    out = [Outcome(spec, statistics.median(rs), tuple(rs)) for spec, rs in ratios.items()]
    return sorted(out, key=lambda o: -o.speedup)


def summary(outcomes: list[Outcome]) -> str:
    """One sentence for the Lab: what starts, and what the others measured."""
    if not outcomes:
        return "the quick check measured nothing"
    best, others = outcomes[0], outcomes[1:]
    rest = ", ".join(f"{o.label()} x{o.speedup:.2f}" for o in others)
    if best.speedup <= 1.0:
        return (
            f"No setting beat no speculation on this machine just now (best: {best.label()} x{best.speedup:.2f}; "
            f"{rest}). The live run starts with {best.label()} so you can watch why; the Lab's line above the "
            "charts says where the time goes."
        )
    return (
        f"On this machine {best.label()} pays best: x{best.speedup:.2f} against no speculation, measured just now "
        f"(median of {len(best.by_round)} rounds; {rest}). The live run starts with it."
    )
