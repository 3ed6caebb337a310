"""A tune's result as it is kept: what engine.measure.tuner.TuneResult.to_dict writes into the history, and
what reads it back (the speed model's measured costs, engine.measure.calibration; the CLI's table; the Tune
page). One TypedDict for both sides, so a key renamed on one side fails mypy on the other."""

from __future__ import annotations

from typing import Any, TypedDict


class RatioRecord(TypedDict):
    """A paired ratio (engine.core.paired.PairedRatio.to_dict): the median and its interval."""

    median: float
    low: float
    high: float
    confidence: float
    n: int


class TuneRow(TypedDict):
    """One candidate setting of a tune: what the cost model predicted and what the rounds measured."""

    setting: str  # its label, "draft-simple K=4"
    spec: dict[str, Any]  # its SpecSettings, as engine.core.settings.to_dict writes them
    predicted_tps: float | None
    measured_tps: float | None  # None: never measured (ranked out before the rounds)
    prompts: int
    error: float | None  # predicted over measured, less 1


class TuneRecord(TypedDict):
    baseline_tps: float
    best: TuneRow
    # the best's tokens/s over the baseline's in the search that chose it; it reads high (the verdict is the claim)
    search_ratio: float | None
    beats_baseline: bool
    verdict: RatioRecord | None  # the best against no speculation, paired prompt by prompt
    verdict_text: str
    raise_k: str
    budget_note: str
    acceptance_by_position: list[float]
    # the target's forward ms by batch size (None: llama-server's engine); read back from JSON, the sizes are text
    verify_ms: dict[int, float] | None
    draft_ms: dict[int, float] | None
    predicted_by_k: dict[int, float]
    candidates: list[TuneRow]
    elapsed_s: float
    runs: int
