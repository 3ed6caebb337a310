"""Predicting speculative tokens/s from measured costs.

Inputs, all measured on the loaded pair:
- verify(n): ms for the target to process a batch of n tokens with logits at
  every position (n = 1 is plain decoding; n = K + 1 verifies a K-token draft);
- draft(n): the same for the draft model (n = 1 per drafted token; n = K + 1
  when the draft model is fed the verified batch);
- conditional acceptance a_i: the chance the target keeps draft position i
  given it kept positions 0..i-1, from the lab's by-position counts.

Per verify step with draft length K:
    E[tokens] = 1 + sum_{i=1..K} prod_{j<i} a_j        (the bonus token included)
    T(K)      = K * draft(1) + draft(K + 1) + verify(K + 1)
    tokens/s  = 1000 * E[tokens] / T(K)
With a flat verify curve, a constant a_j = alpha, no draft feed and
draft(1) = c * verify(1), the speedup over 1000 / verify(1) is
(1 - alpha^(K+1)) / ((1 - alpha) (K c + 1)), Leviathan et al.'s formula;
the measured curve is what makes large K lose on real hardware.

A hybrid target (Qwen3.5) cannot drop a rejected draft's tail from its recurrent state: a step that
keeps a < K drafted tokens restores the state and verifies [last, a kept, the target's own] again,
a second pass of a + 2 tokens (fed to the draft model too) that keeps one more token
(``replays``):
    E[tokens] += P(a < K)
    T(K)      += sum_{a<K} P(exactly a) * (verify(a + 2) + draft(a + 2))
To restore it, llama.cpp (llama-server's spec checkpoints, and this engine as it does) copies the target's
recurrent state out of the device before every verify that carries a draft, and back after a partial keep;
a hybrid draft model's state is copied out before drafting and back after, every step, and back again after
a partial keep (``checkpoints``: ms per copy of each model's state):
    T(K)      += save_target + save_draft + load_draft + P(a < K) * (load_target + load_draft)
On a GPU the copies cross to host memory one tensor at a time and cost more than a verify pass: 22 ms for a
Qwen3.6 35B-A3B's 62.8 MiB on an RTX 3090 (engine.planning.speed.gpu_speed.STATE_COPY_MS_PER_MIB), where a
token takes 8 ms. MTP and other drafts that share the target's context keep state snapshots on the device
instead and copy nothing.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from engine.planning.constants import K_MAX


@dataclass(frozen=True)
class CostCurve:
    """ms for a forward pass of n tokens, interpolated linearly between measured sizes."""

    sizes: tuple[int, ...]
    ms: tuple[float, ...]

    def __post_init__(self) -> None:
        if len(self.sizes) != len(self.ms) or not self.sizes:
            raise ValueError("a cost curve needs as many times as sizes, and at least one")
        if list(self.sizes) != sorted(set(self.sizes)) or self.sizes[0] < 1:
            raise ValueError("sizes must be increasing and >= 1")

    def at(self, n: float) -> float:
        xs, ys = np.asarray(self.sizes, float), np.asarray(self.ms, float)
        if n <= xs[-1] or len(xs) == 1:
            return float(np.interp(n, xs, ys))
        slope = (ys[-1] - ys[-2]) / (xs[-1] - xs[-2])  # beyond the last size: the last slope
        return float(ys[-1] + slope * (n - xs[-1]))

    @classmethod
    def flat(cls, ms: float) -> CostCurve:
        return cls((1,), (ms,))


def conditional_acceptance(accepted_by_position: Iterable[float], drafted: Iterable[float] | int) -> list[float]:
    """a_i, the chance position i is kept given position i - 1 was, from per-position counts: each position's
    rate among the steps that drafted it, over the rate of the position before. ``drafted`` is the steps that
    drafted each position, or one count for drafts that were all K long (the tuner's probes, a bench's runs).
    Stops at the first position nothing drafted."""
    accepted = list(accepted_by_position)
    per_position = [drafted] * len(accepted) if isinstance(drafted, int) else list(drafted)
    out, before = [], 1.0
    for a, d in zip(accepted, per_position):
        if d <= 0:
            break
        rate = float(a) / float(d)
        out.append(min(1.0, rate / before) if before > 0 else 0.0)
        before = rate
    return out


def expected_tokens(cond: list[float], k: int) -> float:
    """Expected tokens per verify step for a K-token draft (the bonus token included).
    Positions past the measured ones reuse the last measured chance."""
    total, keep = 1.0, 1.0
    for i in range(k):
        a = cond[i] if i < len(cond) else (cond[-1] if cond else 0.0)
        keep *= a
        total += keep
    return total


def accepted_exactly(cond: list[float], k: int) -> list[float]:
    """P(exactly a of k drafted tokens are kept), a = 0..k, from the conditional chances (positions past the
    measured ones reuse the last measured chance, as expected_tokens does)."""
    out, reach = [], 1.0
    for i in range(k):
        keep = cond[i] if i < len(cond) else (cond[-1] if cond else 0.0)
        out.append(reach * (1.0 - keep))
        reach *= keep
    return out + [reach]


@dataclass(frozen=True)
class StateCopies:
    """ms for one copy (out or back) of each hybrid model's recurrent state; 0 for a model with none."""

    target_ms: float = 0.0
    draft_ms: float = 0.0

    def step_ms(self, partial: float, target_restores: bool) -> float:
        """A step's copies: the draft's out and back around drafting; where the target restores (a hybrid target
        verifying a separate draft), its state out before the verify and, at the chance ``partial`` of a partial
        keep, both back."""
        ms = 2.0 * self.draft_ms
        if target_restores:
            ms += self.target_ms + partial * (self.target_ms + self.draft_ms)
        return ms


@dataclass
class PairCosts:
    verify: CostCurve
    draft: CostCurve | None = None
    notes: dict = field(default_factory=dict)
    replays: bool = False  # a hybrid target: a partly kept draft is verified again (see the module's doc)
    # the rest of a speculative step, once a step: sampling and bookkeeping (the why line measures it; 0 elsewhere)
    overhead_ms: float = 0.0
    checkpoints: StateCopies | None = None  # a hybrid model's state copies (see the module's doc)

    @property
    def baseline_tps(self) -> float:
        return 1000.0 / self.verify.at(1)

    def step_ms(self, k: int, feed_draft: bool = True) -> float:
        if k == 0:
            return self.verify.at(1)
        drafting = 0.0
        if self.draft is not None:
            drafting = k * self.draft.at(1) + (self.draft.at(k + 1) if feed_draft else 0.0)
        return drafting + self.verify.at(k + 1) + self.overhead_ms

    def predict_tps(self, cond: list[float], k: int, feed_draft: bool = True) -> float:
        tokens, ms = expected_tokens(cond, k), self.step_ms(k, feed_draft)
        kept = accepted_exactly(cond, k)[:k]  # the chance of keeping exactly a < K drafted tokens
        partial = sum(kept)
        if self.replays and k > 0:
            for a, p in enumerate(kept):
                feed = self.draft.at(a + 2) if feed_draft and self.draft is not None else 0.0
                ms += p * (self.verify.at(a + 2) + feed)
                tokens += p
        if self.checkpoints is not None and k > 0:
            ms += self.checkpoints.step_ms(partial, self.replays)
        return 1000.0 * tokens / ms

    def best_k(self, cond: list[float], k_max: int = K_MAX) -> tuple[int, float]:
        scores = [(self.predict_tps(cond, k), k) for k in range(1, k_max + 1)]
        tps, k = max(scores)
        return k, tps


def leviathan_speedup(alpha: float, k: int, c: float) -> float:
    """Leviathan et al. (2023), expected walltime improvement for constant acceptance alpha."""
    if alpha >= 1.0:
        return (k + 1) / (k * c + 1)
    return (1 - alpha ** (k + 1)) / ((1 - alpha) * (k * c + 1))
