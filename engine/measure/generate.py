"""One generation through the engine worker, from its stream of events to its summary.

The run command, the tuner, the demo and validation all drive the worker this way.
"""

from __future__ import annotations

from collections.abc import Callable

from engine.core.settings import SamplingSettings, SpecSettings, to_dict
from engine.runtime.client import EngineClient, EngineError


def generate(
    client: EngineClient,
    prompt: str,
    max_tokens: int,
    spec: SpecSettings,
    sampling: SamplingSettings,
    baseline: bool = False,
    on_event: Callable[[dict], None] | None = None,
) -> dict:
    """One generation through the worker; returns its summary."""
    for ev in client.generate(prompt, max_tokens, baseline=baseline, spec=to_dict(spec), sampling=to_dict(sampling)):
        if on_event is not None:
            on_event(ev)
        if ev["event"] == "done":
            return ev["summary"]
        if ev["event"] == "cancelled":
            raise EngineError("cancelled", "the generation was cancelled")
    raise EngineError("internal", "the generation ended without a summary")
