"""Why a live run is as fast as it is: the measured parts of a speculative step against a plain token.

A speculative step keeps 1 + (accepted) tokens and costs the draft's passes, the target's verify of
the drafted tokens plus one, and the rest (sampling, bookkeeping). Against plain decoding (the
measured baseline, one token per target pass):

    speedup = tokens per step / (step time / plain token time)

so it pays when acceptance keeps more tokens per step than the step costs in plain tokens. On a GPU
verifying K + 1 tokens costs about what one does; on a CPU with few cores it costs several times
as much (compute-bound), which is the usual reason speculation loses there.

On a hybrid model (Qwen3.5) a partly rejected draft cannot be trimmed from the recurrent state: the
step restores it and verifies the accepted tokens again (a replay), one more target pass that also
keeps one more token. The replayed steps' verify time holds both passes, so the verify line is fitted
on the other steps, and the what-if adds a replay to every partly accepted draft.

The sentence's parts add up to the whole: drafting, verifying and the rest of a step, each as the mean of the
measured steps in plain tokens (issue 51: the parts once named did not sum to the step). K-bounded methods
(draft-simple, draft-mtp, eagle3, ...) are described by K; an n-gram method drafts as many tokens as its match
finds, so its sentence gives the tokens it drafted a step and its own knobs, and no K what-if; a combination
names each method.

The parts are counted since the last knob change (engine.measure.live: the current setting), and the
same parts answer "what would another K give": verify time against batch size is fitted to a line
through the steps' own sizes (and the baseline's one token), draft time per token is measured, and
the acceptance by position is the current one (engine.planning.speed.cost_model.expected_tokens).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from engine.measure.live import Snapshot
from engine.planning.constants import K_MAX
from engine.planning.speed.cost_model import CostCurve, PairCosts, conditional_acceptance
from engine.planning.speed.prediction_band import MEASURED

MIN_STEPS = 8  # fewer speculative steps than this say too little to explain anything
COMPUTE_BOUND_RATIO = 1.5  # verifying K + 1 tokens at more than this times one: compute-bound


@dataclass(frozen=True)
class Why:
    k: int  # the draft length set now (steps may have drafted fewer)
    steps: int
    acceptance: float  # accepted / drafted
    tokens_per_step: float  # the bonus token included
    plain_ms: float  # one token without speculation (the baseline)
    draft_share: float  # one drafted token, as a share of a plain token
    verify_ratio: float  # verifying k + 1 tokens, over a plain token
    step_ratio: float  # the whole step, over a plain token
    explained_speedup: float  # tokens_per_step / step_ratio
    replay_share: float  # steps whose draft was verified again (hybrid models); 0 elsewhere
    measured_speedup: float | None  # tokens/s of the current setting over the baseline
    best_k: int | None  # what the measured parts predict is best; None: no K pays
    best_speedup: float
    # the step's parts in plain tokens, means over the steps: they sum to step_ratio
    draft_part: float = 0.0
    verify_part: float = 0.0
    rest_part: float = 0.0
    drafted_per_step: float = 0.0
    method: str = "draft-simple"  # the running spec type(s), "ngram-mod,draft-simple" for a combination

    @property
    def pays(self) -> bool:
        return self.explained_speedup > 1.0

    @property
    def k_bounded(self) -> bool:
        """A method whose drafts K bounds, alone (an n-gram drafts what its match finds; a combination mixes)."""
        return "," not in self.method and not self.method.startswith("ngram")

    def _parts(self) -> str:
        return (
            f"drafting {self.draft_part:.2f}, verifying {self.verify_part:.2f} "
            f"(on average {self.drafted_per_step + 1:.1f} tokens), the rest {self.rest_part:.2f}"
        )

    def sentence(self) -> str:
        """What a user reads beside the charts."""
        k, vr = self.k, self.verify_ratio
        head = "Speculation pays here" if self.pays else "Speculation does not pay here"
        measured = f", measured x{self.measured_speedup:.2f}" if self.measured_speedup else ""
        if not self.k_bounded:
            kind = "the combination " + " + ".join(self.method.split(",")) if "," in self.method else self.method
            text = (
                f"{head}: each step keeps {self.tokens_per_step:.2f} tokens ({kind} drafted "
                f"{self.drafted_per_step:.1f} a step, acceptance {self.acceptance:.2f}) and costs "
                f"{self.step_ratio:.2f} plain tokens: {self._parts()}. That makes x{self.explained_speedup:.2f}"
                f"{measured}."
            )
            if not self.pays and "draft-simple" in self.method.split(","):
                # the draft model is already in the combination: what can change is its share of the cost
                text += (
                    " The draft model drafts where the n-gram finds nothing: try the n-gram alone, or draft-simple "
                    "alone with a smaller K."
                )
            elif not self.pays:
                text += (
                    " An n-gram drafts only where the text repeats itself: its match length and n-gram sizes, not K, "
                    "decide how often; try draft-simple with a draft model."
                )
            return text
        parts = (
            f"each step keeps {self.tokens_per_step:.2f} tokens (acceptance {self.acceptance:.2f} at K={k}) and costs "
            f"{self.step_ratio:.2f} plain tokens: {self._parts()}; verifying {k + 1} tokens costs {vr:.2f}x one"
        )
        if vr > COMPUTE_BOUND_RATIO:
            parts += " (compute-bound: on a GPU this is near 1x)"
        if self.replay_share > 0:
            parts += (
                f"; {self.replay_share:.0%} of steps verify their accepted tokens again (a hybrid model's "
                "state cannot drop a rejected draft), a second target pass each"
            )
        text = f"{head}: {parts}. That makes x{self.explained_speedup:.2f}{measured}."
        # a what-if from measured parts: its band is the calibrated prediction's (engine.planning.speed.prediction_band)
        band = MEASURED.speedup
        if self.best_k is None:
            text += " With these costs no K pays: run without speculation, or try an n-gram method."
        elif self.best_k != k and self.best_speedup > self.explained_speedup * 1.02:
            doubt = ", which may not pay" if self.best_speedup - 1.0 <= band else ""
            text += f" With these costs K={self.best_k} would give about x{self.best_speedup:.2f} (±{band:.2f}){doubt}."
        return text


def explain(snapshot: Snapshot, current_tokens_per_s: float | None = None, method: str = "draft-simple") -> Why | None:
    """The parts of the current setting's steps, or None when there is no baseline or too few steps. method: the
    running spec type(s) as the Lab sent them ("ngram-mod", "ngram-mod,draft-simple")."""
    if not snapshot.baseline_tps:
        return None
    s = snapshot.series
    rows = np.ones(len(s["t"]), bool)
    since = [m.t for m in snapshot.markers if m.label == snapshot.current_since]
    if snapshot.current_since is not None and since:
        rows &= s["t"] >= since[-1]
    drafted, accepted = s["drafted"][rows], s["accepted"][rows]
    spec = drafted > 0
    if spec.sum() < MIN_STEPS:
        return None
    plain_ms = 1000.0 / snapshot.baseline_tps
    draft_ms, verify_ms, other_ms = s["draft_ms"][rows], s["verify_ms"][rows], s["other_ms"][rows]
    replayed = s["replayed"][rows] > 0 if "replayed" in s else np.zeros(len(drafted), bool)
    steps = int(rows.sum())
    k = int(s["k"][rows][-1]) or int(drafted.max())  # the setting now; steps may draft fewer (p-min)
    tokens_per_step = 1.0 + float(accepted.sum() + replayed.sum()) / steps  # a replay keeps one more token
    step_ms = float((draft_ms + verify_ms + other_ms).sum()) / steps
    draft_token_ms = float(draft_ms.sum()) / float(drafted.sum())
    rest_ms = float(other_ms.sum()) / steps
    single = ~replayed if (~replayed).sum() >= 2 else np.ones(len(drafted), bool)
    line = _verify_line(drafted[single] + 1, verify_ms[single], plain_ms - rest_ms)
    verify_k = float(np.polyval(line, k + 1))
    explained = tokens_per_step / (step_ms / plain_ms)
    cond = conditional_acceptance(snapshot.current_accepted_by_position, snapshot.current_drafted_by_position)
    # the what-if is the cost model's own step (engine.planning.speed.cost_model.PairCosts) on the measured
    # parts: the fitted verify line, the measured draft token, the rest once a step; on a hybrid target every
    # partly accepted draft replays
    costs = PairCosts(
        verify=CostCurve((1, 2), (float(np.polyval(line, 1)), float(np.polyval(line, 2)))),
        draft=CostCurve.flat(draft_token_ms),
        replays=bool(replayed.any()),
        overhead_ms=rest_ms,
    )
    what_if = {kk: plain_ms * costs.predict_tps(cond, kk, feed_draft=False) / 1000.0 for kk in range(1, K_MAX + 1)}
    best = max(what_if, key=lambda kk: what_if[kk])
    return Why(
        k=k,
        steps=steps,
        acceptance=float(accepted.sum()) / float(drafted.sum()),
        tokens_per_step=tokens_per_step,
        plain_ms=plain_ms,
        draft_share=draft_token_ms / plain_ms,
        verify_ratio=verify_k / plain_ms,
        step_ratio=step_ms / plain_ms,
        explained_speedup=explained,
        replay_share=float(replayed.sum()) / steps,
        measured_speedup=current_tokens_per_s / snapshot.baseline_tps if current_tokens_per_s else None,
        best_k=best if what_if[best] > 1.0 else None,
        best_speedup=what_if[best],
        draft_part=float(draft_ms.sum()) / steps / plain_ms,
        verify_part=float(verify_ms.sum()) / steps / plain_ms,
        rest_part=rest_ms / plain_ms,
        drafted_per_step=float(drafted.sum()) / steps,
        method=method,
    )


def _verify_line(batch: np.ndarray, verify_ms: np.ndarray, one_token_ms: float) -> np.ndarray:
    """Verify ms against batch size, a line (slope, intercept). The baseline's one token anchors it,
    weighted like the most common batch size, so steps that all drafted K still give a slope."""
    sizes, counts = np.unique(batch, return_counts=True)
    xs = np.concatenate([batch, [1.0]])
    ys = np.concatenate([verify_ms, [max(one_token_ms, 1e-3)]])
    weights = np.concatenate([np.ones(len(batch)), [float(counts.max())]])
    if len(sizes) == 1 and sizes[0] == 1:
        return np.array([0.0, float(np.average(ys, weights=weights))])
    return np.polyfit(xs, ys, 1, w=np.sqrt(weights))
