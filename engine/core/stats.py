"""Counting what a run did: RunStats is the one counter, for a generation in the worker, the Lab's
live session, a prompt set summed (combine_summaries), the tuner's candidates, the demo and validation.
Terms, defined once:

- drafted: tokens the speculators proposed; accepted: of those, the ones the
  target kept. A cycle with no draft counts for neither.
- acceptance_rate = accepted / drafted.
- steps: verify steps that carried a draft (llama-server's n_draft_verif_steps).
- mean_accepted_length = 1 + accepted / steps: tokens gained per verify step,
  the bonus token included.
- accepted_by_position[i]: how many steps accepted the draft token at position i
  (a prefix rule: position i is accepted only if 0..i-1 were). Divided by steps
  it is the per-position acceptance llama-server prints.
- accepted_length_histogram[n]: steps that accepted exactly n draft tokens.
- tokens_per_s: generated tokens after the first / wall time of the cycles
  after the prompt cycle (the prompt is reported apart, as prompt_ms).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypedDict


class CycleTimes(TypedDict):
    """Where a cycle's time went, in ms (a run's summary: where all its cycles' time went): drafting, the
    target's verify pass, decoding, the rest of the cycle, the cycle as the engine timed it, and as the
    worker's clock saw it."""

    draft_ms: float
    verify_ms: float
    decode_ms: float
    other_ms: float
    cycle_ms: float
    wall_ms: float


class RunSummary(CycleTimes):
    """A generation's counters as RunStats.summary gives them (the worker's done event carries one), each term
    as the module's doc defines it."""

    tokens_generated: int
    tokens_per_s: float
    prompt_tokens: int
    prompt_ms: float
    drafted: int
    accepted: int
    acceptance_rate: float
    steps: int
    cycles: int
    mean_accepted_length: float
    accepted_by_position: list[int]
    acceptance_by_position: list[float]
    accepted_length_histogram: list[int]
    outside_decode_share: float
    text: str


@dataclass
class RunStats:
    tokens_generated: int = 0
    prompt_tokens: int = 0
    prompt_ms: float = 0.0
    drafted: int = 0
    accepted: int = 0
    steps: int = 0
    cycles: int = 0
    accepted_by_position: list[int] = field(default_factory=list)
    drafted_by_position: list[int] = field(default_factory=list)
    accepted_length_histogram: list[int] = field(default_factory=list)
    draft_ms: float = 0.0
    verify_ms: float = 0.0
    decode_ms: float = 0.0
    other_ms: float = 0.0
    cycle_ms: float = 0.0
    wall_ms: float = 0.0  # generation cycles as timed by the caller, overheads included
    text: str = ""
    generations: int = 1  # >1 only for sums over several generations (combine_summaries)

    def add(
        self,
        *,
        is_prompt: bool,
        n_prompt: int,
        drafted: int,
        accepted: int,
        emitted: int,
        draft_ms: float,
        verify_ms: float,
        decode_ms: float,
        other_ms: float,
        cycle_ms: float,
        wall_ms: float,
        text: str,
    ) -> None:
        self.tokens_generated += emitted
        self.text += text
        if is_prompt:
            self.prompt_tokens = n_prompt
            self.prompt_ms += wall_ms
            return
        if not 0 <= accepted <= drafted:
            raise ValueError(f"accepted ({accepted}) must be between 0 and drafted ({drafted})")
        self.cycles += 1
        self.draft_ms += draft_ms
        self.verify_ms += verify_ms
        self.decode_ms += decode_ms
        self.other_ms += other_ms
        self.cycle_ms += cycle_ms
        self.wall_ms += wall_ms
        if drafted == 0:
            return
        self.steps += 1
        self.drafted += drafted
        self.accepted += accepted
        _grow(self.drafted_by_position, drafted)
        _grow(self.accepted_by_position, drafted)
        _grow(self.accepted_length_histogram, drafted + 1)
        for i in range(drafted):
            self.drafted_by_position[i] += 1
        for i in range(accepted):
            self.accepted_by_position[i] += 1
        self.accepted_length_histogram[accepted] += 1

    def add_event(self, ev: Mapping[str, Any], keep_text: bool = True) -> None:
        """One ``cycle`` event of the worker's stream. keep_text=False for a session that runs for hours
        and shows its text elsewhere."""
        self.add(
            is_prompt=bool(ev.get("prompt")),
            n_prompt=int(ev.get("n_prompt", 0)),
            drafted=int(ev.get("drafted", 0)),
            accepted=int(ev.get("accepted", 0)),
            emitted=int(ev.get("emitted", 0)),
            draft_ms=float(ev.get("draft_ms", 0.0)),
            verify_ms=float(ev.get("verify_ms", 0.0)),
            decode_ms=float(ev.get("decode_ms", 0.0)),
            other_ms=float(ev.get("other_ms", 0.0)),
            cycle_ms=float(ev.get("cycle_ms", 0.0)),
            wall_ms=float(ev.get("wall_ms") or ev.get("cycle_ms") or 0.0),
            text=ev.get("text", "") if keep_text else "",
        )

    def add_summary(self, s: Mapping[str, Any]) -> None:
        """A whole generation, from its summary: counts and times add up (the rates are recomputed).
        Start a sum from RunStats(generations=0): each summary added counts one generation."""
        self.generations += 1
        for key in _SUMMED:
            setattr(self, key, getattr(self, key) + s[key])
        for key in _SUMMED_LISTS:
            values = getattr(self, key)
            _grow(values, len(s[key]))
            for i, v in enumerate(s[key]):
                values[i] += v

    @classmethod
    def of_summaries(cls, summaries: Sequence[Mapping[str, Any]]) -> RunStats:
        """Several generations added up; tokens_per_s counts each generation's first token with its prompt."""
        total = cls(generations=0)
        for s in summaries:
            total.add_summary(s)
        return total

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0

    @property
    def mean_accepted_length(self) -> float:
        return 1.0 + self.accepted / self.steps if self.steps else 1.0

    @property
    def tokens_per_s(self) -> float:
        gen = self.tokens_generated - self.generations  # each first token belongs to its prompt cycle
        return gen * 1000.0 / self.wall_ms if self.wall_ms > 0 and gen > 0 else 0.0

    @property
    def outside_decode_share(self) -> float:
        """Share of cycle time spent neither drafting nor verifying (the runtime's own overhead)."""
        return self.other_ms / self.cycle_ms if self.cycle_ms > 0 else 0.0

    def summary(self) -> RunSummary:
        return {
            "tokens_generated": self.tokens_generated,
            "tokens_per_s": round(self.tokens_per_s, 3),
            "prompt_tokens": self.prompt_tokens,
            "prompt_ms": round(self.prompt_ms, 3),
            "drafted": self.drafted,
            "accepted": self.accepted,
            "acceptance_rate": round(self.acceptance_rate, 6),
            "steps": self.steps,
            "cycles": self.cycles,
            "mean_accepted_length": round(self.mean_accepted_length, 6),
            "accepted_by_position": list(self.accepted_by_position),
            "acceptance_by_position": [
                round(a / self.steps, 6) if self.steps else 0.0 for a in self.accepted_by_position
            ],
            "accepted_length_histogram": list(self.accepted_length_histogram),
            "draft_ms": round(self.draft_ms, 3),
            "verify_ms": round(self.verify_ms, 3),
            "decode_ms": round(self.decode_ms, 3),
            "other_ms": round(self.other_ms, 3),
            "cycle_ms": round(self.cycle_ms, 3),
            "wall_ms": round(self.wall_ms, 3),
            "outside_decode_share": round(self.outside_decode_share, 6),
            "text": self.text,
        }


def _grow(values: list[int], n: int) -> None:
    if len(values) < n:
        values.extend([0] * (n - len(values)))


# Counters that add up across generations; the rates are recomputed from the sums.
_SUMMED = (
    "tokens_generated",
    "prompt_tokens",
    "prompt_ms",
    "drafted",
    "accepted",
    "steps",
    "cycles",
    "draft_ms",
    "verify_ms",
    "decode_ms",
    "other_ms",
    "cycle_ms",
    "wall_ms",
)
_SUMMED_LISTS = ("accepted_by_position", "accepted_length_histogram")


def combine_summaries(summaries: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """One summary for several generations (a workload set): counts and times add up; rates are
    ratios of the sums, so a long answer weighs more than a short one, as in one long run."""
    if not summaries:
        raise ValueError("no summaries to combine")
    total = RunStats.of_summaries(summaries)
    out: dict[str, Any] = dict(total.summary())
    del out["text"]
    out["generations"] = total.generations
    return out
