"""A quick check of which speculative setting pays on this machine, measured on the loaded pair.

The Lab runs it on first start with the demo pair (and on demand) so that the live run starts from a
setting measured here rather than assumed: a draft that pays on a GPU can lose on two CPU cores, where
verifying K+1 tokens costs several times one token. A few settings and no speculation each run the same
prompt, in rounds whose order reverses every other round (A B C D, D C B A), so drift weighs on all alike.
Each round takes the next prompt of the set the live run then goes through, at the length the live run
generates (the Lab's max tokens): a check on one 64-token prompt once said x0.79 where the live run on the
whole set, right after it, showed x1.5 (the demo pair loops in long answers, and ngram-mod drafts loops).
Each setting's ratio to no speculation comes from the same round, and the median of a setting's rounds is
its measured speedup, with the spread of its rounds as the interval (engine.core.paired). A setting pays
only where that interval lies above x1.00; one whose interval holds x1.00 is "not shown to pay". Short by
design (seconds on the demo pair, not a tune): it picks the starting point; a tune finds the best setting.

This module holds the schedule, the verdict and its sentence; the runs go through whatever drives the
engine (the Lab page, asynchronously, or a blocking EngineClient), which says what happens next.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from engine.core.paired import PairedRatio, abba, median_interval
from engine.core.settings import SpecSettings
from engine.measure.candidates import QUICK

BASELINE = SpecSettings("none")
CANDIDATES = QUICK  # engine.measure.candidates: the same settings `spectune demo` measures
# three rounds: the interval of two ratios is their spread with a coverage of one half; three give three
# quarters at a few seconds more
ROUNDS = 3
# what each run generates unless the caller says: the Lab's default max tokens, so that `spectune demo` checks
# the length the app's demo measures
MAX_TOKENS = 256


@dataclass(frozen=True)
class Outcome:
    spec: SpecSettings
    speedup: float  # median over rounds of tokens/s against no speculation in the same round
    by_round: tuple[float, ...]

    @property
    def ratio(self) -> PairedRatio:
        """The median of the rounds with its interval (the rounds' spread, with few of them)."""
        return median_interval(self.by_round)

    @property
    def pays(self) -> bool | None:
        """True where the whole interval lies above x1.00, False where it lies below, None where it holds
        x1.00 (not shown to pay, nor to lose)."""
        r = self.ratio
        return True if r.above_one else False if r.below_one else None

    def label(self) -> str:
        return self.spec.label()


def schedule(candidates: tuple[SpecSettings, ...] = CANDIDATES, rounds: int = ROUNDS) -> list[tuple[int, SpecSettings]]:
    """(round, setting) in the order to run them; no speculation is one of the arms of every round."""
    arms = [BASELINE, *candidates]
    return [(r, spec) for r in range(rounds) for spec in abba(arms, r)]


def round_prompt(prompts: list[Any], round_index: int) -> Any:
    """The prompt of a round: the set's prompts in turn, so that the rounds cover what the live run goes through."""
    return prompts[round_index % len(prompts)]


def candidates_for(unavailable: Mapping[str, str]) -> tuple[SpecSettings, ...]:
    """The candidates a pair can run, given the methods it cannot (engine.models.draft_heads.unavailable): no
    draft model, or a draft head, leaves the n-gram ones."""
    return tuple(s for s in CANDIDATES if not any(t in unavailable for t in s.types))


@dataclass
class QuickCheckRun:
    """One quick check under way, for whatever drives the engine one run at a time: its schedule, the
    tokens/s measured so far, and what the caller asked to happen once it is done."""

    plan: list[tuple[int, SpecSettings]]
    prompts: list[Any]  # what the runs generate from (engine.core.chat.Prompt), one a round in turn
    sampling: dict
    max_tokens: int = MAX_TOKENS
    then_start: bool = False
    done: list[tuple[int, SpecSettings, float]] = field(default_factory=list)

    @classmethod
    def for_pair(
        cls, unavailable: Mapping[str, str], prompts: list[Any], sampling: dict, max_tokens: int, then_start: bool
    ) -> QuickCheckRun:
        return cls(schedule(candidates_for(unavailable)), list(prompts), sampling, max_tokens, then_start)

    @property
    def next_run(self) -> tuple[int, SpecSettings]:
        """(round, setting) of the run to start now."""
        return self.plan[len(self.done)]

    @property
    def prompt(self) -> Any:
        """The prompt of the run to start now: its round's."""
        return round_prompt(self.prompts, self.next_run[0])

    def record(self, tokens_per_s: float) -> bool:
        """The run just started measured this; True while runs remain."""
        r, spec = self.next_run
        self.done.append((r, spec, tokens_per_s))
        return len(self.done) < len(self.plan)

    def outcomes(self) -> list[Outcome]:
        return verdict(self.done)


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
    """What was measured, in a sentence or two, best first: whether it pays here, with its interval. The
    caller says what happens next (a live run starting with the best, or how to start one)."""
    if not outcomes:
        return "The quick check measured nothing."
    best, others = outcomes[0], outcomes[1:]
    rest = "; others: " + ", ".join(f"{o.label()} x{o.speedup:.2f}" for o in others) if others else ""
    r = best.ratio
    spread = f"x{r.low:.2f} to x{r.high:.2f}, {r.confidence:.0%} interval over {r.n} rounds"
    measured = f"x{r.median:.2f} against no speculation ({spread}{rest})"
    if best.pays:
        return f"On this machine {best.label()} pays best: {measured}, measured just now."
    if best.speedup > 1.0:
        return (
            f"{best.label()} measured best, {measured}: not shown to pay on this machine, since its rounds "
            "reach x1.00. A tune measures long enough to tell."
        )
    return f"No setting beat no speculation on this machine just now: best {best.label()}, {measured}."
