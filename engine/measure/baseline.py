"""A baseline (the pair's speed without speculation) and what it measured, so that no figure is shown against a
baseline of another pair or other settings (issue 51: the Lab once divided a real pair's speed by the demo's).

A baseline belongs to the pair's files (path, size and modification time: a file replaced on disk is another
model), the load settings (context, GPU layers, threads, repacking, placement: anything that changes speed) and
the sampling. Any change and the Lab drops it and says to measure again.

A speedup has a ceiling a run can check by itself: a speculative step costs at least a pass of the target, which
costs at least what a plain token does, and keeps its accepted tokens plus the bonus token, so a run cannot beat
no speculation by more than its mean accepted length (tokens per step). A figure past that ceiling (with a little
room for the per-token costs a step pays once) means the baseline was measured in other conditions (a busy
machine): it is shown as "out of date", not as a number.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from engine.core.settings import LoadSettings, to_dict

# the room above mean accepted length x 1 a speedup may have before it is taken for a stale baseline: a plain
# token pays sampling and bookkeeping once per token, a speculative step once per step
SPEEDUP_SLACK = 1.15


def file_identity(path: Path | str | None) -> tuple[str, int, int] | None:
    """(path, size, modification time in ns), or None for no file; a missing file is (path, -1, -1)."""
    if path is None:
        return None
    p = Path(path)
    try:
        st = p.stat()
    except OSError:
        return (str(p), -1, -1)
    return (str(p.resolve()), st.st_size, st.st_mtime_ns)


def baseline_key(load: LoadSettings, sampling: dict) -> tuple:
    """What a baseline measured: the files, every load setting and the sampling, as one comparable value."""
    settings = tuple(sorted((k, str(v)) for k, v in to_dict(load).items()))
    return (file_identity(load.target), file_identity(load.draft), settings, tuple(sorted(sampling.items())))


@dataclass(frozen=True)
class Baseline:
    tokens_per_s: float
    key: tuple
    tokens: int
    measured_at: str  # "10:42"
    prompts: int = 1  # the generations it took, one per prompt of the set the run rotates through

    @classmethod
    def measured(
        cls, tokens_per_s: float, tokens: int, load: LoadSettings, sampling: dict, prompts: int = 1
    ) -> Baseline:
        return cls(tokens_per_s, baseline_key(load, sampling), tokens, time.strftime("%H:%M"), prompts)

    def matches(self, load: LoadSettings | None, sampling: dict) -> bool:
        return load is not None and self.key == baseline_key(load, sampling)

    def describe(self) -> str:
        of = f" of {self.prompts} prompts" if self.prompts > 1 else ""
        return f"{self.tokens_per_s:.1f} tok/s at {self.measured_at} over {self.tokens} tokens{of}"


def speedup_ceiling(mean_accepted_length: float) -> float:
    """The largest speedup a run with this mean accepted length (tokens per step) can show (module docstring)."""
    return max(mean_accepted_length, 1.0) * SPEEDUP_SLACK


def plausible_speedup(speedup: float, mean_accepted_length: float) -> bool:
    return 0.0 < speedup <= speedup_ceiling(mean_accepted_length)
