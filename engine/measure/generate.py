"""Generations through the engine worker, from their stream of events to their summaries.

``generate`` runs one prompt (the run command, the tuner, the demo and validation all drive the
worker this way); ``run_prompts`` and ``summarise`` run a prompt set with optional baselines and add
it up, as ``spectune run`` reports it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from engine.core.chat import Prompt
from engine.core.settings import SamplingSettings, SpecSettings, to_dict
from engine.core.stats import RunSummary, combine_summaries
from engine.runtime.client import EngineClient, EngineError
from engine.runtime.events import Event


def generate(
    client: EngineClient,
    prompt: Prompt,
    max_tokens: int,
    spec: SpecSettings,
    sampling: SamplingSettings,
    baseline: bool = False,
    on_event: Callable[[Event], None] | None = None,
    fresh: bool = True,
) -> RunSummary:
    """One generation through the worker; returns its summary. fresh (the default): its speculators
    start as a freshly started llama-server's, so a prompt measured again is not drafted from its own
    earlier answer; False keeps what earlier generations taught them (validation mirrors one server)."""
    events = client.generate(
        prompt, max_tokens, baseline=baseline, spec=to_dict(spec), sampling=to_dict(sampling), fresh=fresh
    )
    for ev in events:
        if on_event is not None:
            on_event(ev)
        if ev["event"] == "done":
            return ev["summary"]
        if ev["event"] == "cancelled":
            raise EngineError("cancelled", "the generation was cancelled")
    raise EngineError("internal", "the generation ended without a summary")


@dataclass
class PromptRun:
    """One prompt of a set: its summary, and its no-speculation baseline when one was asked for."""

    id: str
    summary: RunSummary
    baseline: RunSummary | None = None


def run_prompts(
    client: EngineClient,
    prompts: list[tuple[str, Prompt]],
    max_tokens: int,
    spec: SpecSettings,
    sampling: SamplingSettings,
    *,
    baseline: bool = False,
    on_event: Callable[[Event], None] | None = None,
    on_prompt: Callable[[PromptRun], None] | None = None,
) -> list[PromptRun]:
    """Every (id, prompt) pair in turn on the loaded pair, each with its baseline right after it (same
    warm state for both). on_prompt sees each prompt's result as soon as it is in."""
    runs = []
    for prompt_id, text in prompts:
        summary = generate(client, text, max_tokens, spec, sampling, on_event=on_event)
        base = generate(client, text, max_tokens, spec, sampling, baseline=True) if baseline else None
        runs.append(PromptRun(prompt_id, summary, base))
        if on_prompt is not None:
            on_prompt(runs[-1])
    return runs


def summarise(runs: list[PromptRun], workload: str | None = None) -> dict[str, Any]:
    """One summary: the single prompt's, or (a workload set) the runs added up with one row per prompt.
    With baselines, the speedup and whether greedy text came out the same without speculation."""
    summary: dict[str, Any]
    if workload is None:
        summary = dict(runs[0].summary)
    else:
        summary = combine_summaries([r.summary for r in runs])
        summary["workload"] = workload
        summary["prompts"] = [{"id": r.id, **{k: v for k, v in r.summary.items() if k in _PROMPT_ROW}} for r in runs]
    bases = [r.baseline for r in runs if r.baseline is not None]
    if bases and len(bases) == len(runs):
        base = bases[0] if workload is None else combine_summaries(bases)
        summary["baseline_tokens_per_s"] = base["tokens_per_s"]
        summary["speedup"] = round(summary["tokens_per_s"] / base["tokens_per_s"], 4) if base["tokens_per_s"] else 0
        summary["baseline_text_matches"] = all(r.baseline["text"] == r.summary["text"] for r in runs if r.baseline)
    return summary


# what a workload summary keeps of each prompt
_PROMPT_ROW = ("tokens_generated", "tokens_per_s", "drafted", "accepted", "acceptance_rate", "text")
