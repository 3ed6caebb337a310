"""Auto-tune: the cost model proposes, real runs decide.

1. Measure the target's verify curve and the draft's forward time (engine
   worker ``measure``), the no-speculation baseline, and acceptance by position
   with one probe run of draft-simple at a large K.
2. Rank every candidate: draft-simple for each K (predicted by engine.planning.speed.cost_model),
   plus the n-gram methods and their combination with draft-simple (measured
   once on the first prompt, as their draft lengths do not follow a K). A pair whose
   drafter is a head (an EAGLE-3 or DFlash draft file, the target's own MTP head) has no
   draft model to time: its method is measured at a few K instead, and draft-simple,
   which it cannot run (engine.models.draft_heads), is left out.
3. Successive halving over the workload's prompts: the best half by measured
   tokens/s goes on to twice as many prompts, until two are left, the budget is
   spent, or the leader is ahead by a clear margin. Two still within that margin
   run every prompt again, head to head, alternating.
4. The verdict: the best and no speculation run the same prompts in pairs, one right
   after the other and the order alternating (engine.core.paired), and the median of
   the paired ratios gets an interval. Only an interval above 1 says "beats no
   speculation"; one that holds 1 says no setting beats it here.
The result is a table (predicted, measured, error) and the best setting with its
measured speedup over the baseline on the prompts the best ran, and the verdict.
Seeded: the prompt order and the tie-breaks are reproducible.

Stopping early: ``should_stop`` (a callable) is asked before every engine
request; once it says yes the tuner raises ``TuneCancelled``. A caller that
wants a running generation to end at once also sends the engine a cancel; the
tuner then turns the engine's "cancelled" into ``TuneCancelled`` as well.
"""

from __future__ import annotations

import random
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from engine.core.chat import Prompt
from engine.core.paired import PairedRatio, abba, median_interval
from engine.core.settings import LoadSettings, SamplingSettings, SpecSettings, to_dict
from engine.core.stats import RunStats, RunSummary
from engine.core.tune_record import TuneRecord, TuneRow
from engine.measure.candidates import NGRAM_SIMPLE, NGRAMS, draft_simple, tuner_extras, with_draft
from engine.measure.forward_times import forward_times
from engine.measure.generate import generate
from engine.models.draft_heads import HEAD_METHODS, pair_verdicts
from engine.planning.constants import K_MAX, VERIFY_BATCH_SIZES
from engine.planning.speed.cost_model import CostCurve, PairCosts, conditional_acceptance
from engine.runtime.client import EngineClient, EngineError

PROBE_K = 8
CLEAR_MARGIN = 1.15  # stop early when the leader beats the runner-up by this factor
VERDICT_PROMPTS = 8  # paired prompts for the verdict (all of them when the set is smaller)
HEAD_KS = (2, 3, 4)  # the K measured for a draft head's method (no draft model to predict it from)
# draft-simple's K measured where no K can be predicted (an engine that cannot time passes: llama-server)
MEASURED_KS = (2, 3, 4, 6, 8)


def baseline_scale(one_token_ms: float, baseline_tokens_per_s: float | None) -> float:
    """The factor that brings measured forward times to the baseline seen in real runs: the passes are timed on
    synthetic tokens, and a generated token costs what the baseline's did (1 when there is no baseline)."""
    return (1000.0 / baseline_tokens_per_s) / one_token_ms if baseline_tokens_per_s else 1.0


class TuneCancelled(Exception):
    """The caller asked the tuner to stop (``should_stop``); no result."""


@dataclass
class Candidate:
    spec: SpecSettings
    predicted_tps: float | None = None
    measured: list[float] = field(default_factory=list)  # tokens/s per prompt evaluated
    totals: RunStats = field(default_factory=lambda: RunStats(generations=0))  # the prompts evaluated, summed
    prompts_run: list[Prompt] = field(default_factory=list)  # the baseline is measured on the same ones

    @property
    def label(self) -> str:
        return self.spec.label()

    @property
    def measured_tps(self) -> float:
        return self.totals.tokens_per_s


@dataclass
class TuneResult:
    baseline_tps: float
    costs: PairCosts | None  # None: the engine cannot time passes (llama-server); K was measured, not predicted
    acceptance_by_position: list[float]
    candidates: list[Candidate]
    best: Candidate
    elapsed_s: float
    runs: int
    # the cost model's draft-simple prediction for every K from 1 to k_max (the candidates keep only the top few)
    predicted_by_k: dict[int, float] = field(default_factory=dict)
    # the best against no speculation, paired prompt by prompt (None: not checked)
    verdict: PairedRatio | None = None
    budget_note: str = ""  # Tuner.budget_note: why and by about how much the tune ran past its budget

    @property
    def beats_baseline(self) -> bool:
        """Whether the best is shown faster than no speculation: the paired interval lies above 1 (without
        a verdict, the rounds' totals). False: run the pair without speculation."""
        if self.verdict is not None:
            return self.verdict.above_one
        return self.best.measured_tps > self.baseline_tps

    def verdict_text(self) -> str:
        """The claim the tune makes, with its interval."""
        v = self.verdict
        if v is None:
            return f"{self.best.label}: not checked against no speculation"
        if v.above_one:
            return f"{self.best.label} beats no speculation here: {v.describe()}"
        how = "is slower" if v.below_one else "is not shown faster (the interval holds x1.00)"
        return (
            f"no setting beats no speculation here: the best, {self.best.label}, {how}: {v.describe()}. "
            "Run this pair without speculation."
        )

    def raise_k_hint(self) -> str:
        """A sentence when the best K is the largest this tune considered and the curve still rises there
        (issue 51: a tune's best sat at K=12 of 12 with nothing said); else ""."""
        spec = self.best.spec
        if not any(t.startswith("draft-") for t in spec.types):
            return ""
        same = [c.spec.draft_n_max for c in self.candidates if c.spec.spec_type == spec.spec_type]
        top = max([*same, *(self.predicted_by_k if spec.spec_type == "draft-simple" else ())])
        if spec.draft_n_max < top:
            return ""
        below = self.predicted_by_k.get(top - 1)
        if below is not None and self.predicted_by_k.get(top, 0.0) < below:
            return ""  # the cost model's curve has turned: a larger K would not be ranked higher
        return (
            f"The best K ({spec.draft_n_max}) is the largest this tune tried and the curve still rises there: "
            "raise K max and tune again"
        )

    def search_vs_verdict(self) -> str:
        """The table's speedup for the best (its rounds' tokens/s over the baseline's) and the verdict's, said
        apart when they differ: the first was picked for being high, the second pairs each prompt with its
        own baseline run right beside it."""
        if self.verdict is None or not self.baseline_tps or not self.best.measured:
            return ""
        search = self.best.measured_tps / self.baseline_tps
        if abs(search - self.verdict.median) < 0.005:
            return ""
        return (
            f"The table's x{search:.2f} for {self.best.label} is the search's: its rounds' tokens/s over the "
            f"baseline's, the setting picked for being fastest there, so it reads high. The verdict's "
            f"x{self.verdict.median:.2f} pairs each prompt with a baseline run right beside it: that is the claim."
        )

    def to_dict(self) -> TuneRecord:
        rows: list[TuneRow] = [
            {
                "setting": c.label,
                "spec": to_dict(c.spec),
                "predicted_tps": c.predicted_tps,
                "measured_tps": round(c.measured_tps, 3) if c.measured else None,
                "prompts": len(c.measured),
                "error": (round(c.predicted_tps / c.measured_tps - 1, 4) if c.predicted_tps and c.measured else None),
            }
            for c in self.candidates
        ]
        return {
            "baseline_tps": round(self.baseline_tps, 3),
            "best": rows[self.candidates.index(self.best)],
            # the best's tokens/s over the baseline's in the search that chose it: chosen for being high, it
            # reads high. The tune's one claim is the verdict (paired prompt by prompt), not this (issue 30 #9)
            "search_ratio": round(self.best.measured_tps / self.baseline_tps, 4) if self.baseline_tps else None,
            "beats_baseline": self.beats_baseline,
            "verdict": self.verdict.to_dict() if self.verdict else None,
            "verdict_text": self.verdict_text(),
            "raise_k": self.raise_k_hint(),
            "budget_note": self.budget_note,
            "acceptance_by_position": [round(a, 4) for a in self.acceptance_by_position],
            "verify_ms": (
                dict(zip(self.costs.verify.sizes, [round(x, 4) for x in self.costs.verify.ms])) if self.costs else None
            ),
            "draft_ms": (
                dict(zip(self.costs.draft.sizes, [round(x, 4) for x in self.costs.draft.ms]))
                if self.costs and self.costs.draft
                else None
            ),
            "predicted_by_k": {k: round(v, 3) for k, v in self.predicted_by_k.items()},
            "candidates": rows,
            "elapsed_s": round(self.elapsed_s, 2),
            "runs": self.runs,
        }


class Tuner:
    def __init__(
        self,
        client: EngineClient,
        load: LoadSettings,
        prompts: list[Prompt],
        max_tokens: int = 128,
        sampling: SamplingSettings = SamplingSettings(temp=0.0),  # noqa: B008 (frozen: one shared value is safe)
        budget_s: float = 300.0,
        seed: int = 0,
        k_max: int = K_MAX,
        progress: Callable[[str], None] | None = None,
        should_stop: Callable[[], bool] | None = None,
    ):
        if not prompts:
            raise ValueError("the tuner needs at least one prompt")
        self.client, self.load, self.max_tokens, self.sampling = client, load, max_tokens, sampling
        self.rng = random.Random(seed)
        self.prompts = list(prompts)
        self.rng.shuffle(self.prompts)
        self.budget_s, self.k_max = budget_s, k_max
        self.progress = progress or (lambda msg: print(msg, file=sys.stderr, flush=True))
        self.should_stop = should_stop or (lambda: False)
        self.runs = 0
        self.run_seconds: list[float] = []  # each generation's wall time, for the budget's estimate
        self.budget_note = ""  # said up front when the least the tune must run cannot fit its budget
        self.close_call = False  # the last two were settled by a head-to-head round
        self._baseline: dict[Prompt, RunSummary] = {}  # prompt -> its no-speculation summary
        self.methods = pair_verdicts(load.target, load.draft)  # which llama.cpp types this pair can run

    def _check_stop(self) -> None:
        if self.should_stop():
            raise TuneCancelled("the tune was stopped")

    def _run(self, spec: SpecSettings, prompt: Prompt, baseline: bool = False) -> RunSummary:
        self._check_stop()
        self.runs += 1
        started = time.monotonic()
        try:
            s = generate(self.client, prompt, self.max_tokens, spec, self.sampling, baseline=baseline)
            self.run_seconds.append(time.monotonic() - started)
            return s
        except EngineError as exc:
            # a generation cancelled because the caller wants out is a stop, not an engine failure
            if exc.kind == "cancelled" and self.should_stop():
                raise TuneCancelled("the tune was stopped") from exc
            raise

    def _evaluate(self, cand: Candidate, prompts: list[Prompt]) -> None:
        for prompt in prompts:
            s = self._run(cand.spec, prompt)
            cand.totals.add_summary(s)
            cand.measured.append(s["tokens_per_s"])
            cand.prompts_run.append(prompt)

    def _baseline_on(self, prompts: list[Prompt]) -> float:
        """No-speculation tokens/s over these prompts; each prompt's baseline is measured once."""
        for prompt in prompts:
            if prompt not in self._baseline:
                s = self._run(SpecSettings("none"), prompt, baseline=True)
                self._baseline[prompt] = s
        return RunStats.of_summaries([self._baseline[p] for p in prompts]).tokens_per_s

    def _rank(self, pool: list[Candidate]) -> None:
        pool.sort(key=lambda c: (-c.measured_tps, self.rng.random()))
        for cand in pool:
            self.progress(
                f"  {cand.label:<40} measured {cand.measured_tps:8.1f} tok/s"
                + (f"  predicted {cand.predicted_tps:8.1f}" if cand.predicted_tps else "")
            )

    def _close_call(self, finalists: list[Candidate]) -> None:
        """The last two are within CLEAR_MARGIN: on a machine whose speed drifts 10-20 % between runs,
        what each measured in its own rounds does not settle it. Both run every prompt once more,
        alternating prompt by prompt, so that drift and each method's warm-up (an n-gram pool fills
        as a setting keeps running) fall on both alike."""
        a, b = finalists
        self.progress(
            f"close call between {a.label} and {b.label}: both run all {len(self.prompts)} "
            "prompt(s) again, alternating ..."
        )
        for i, prompt in enumerate(self.prompts):
            for cand in finalists if i % 2 == 0 else finalists[::-1]:
                self._evaluate(cand, [prompt])
        self.close_call = True

    def _verdict(self, best: Candidate) -> PairedRatio:
        """The best and no speculation on the same prompts, one right after the other, the order
        alternating from prompt to prompt: the median of the paired ratios and its interval."""
        prompts = self.prompts[: max(1, min(VERDICT_PROMPTS, len(self.prompts)))]
        self.progress(
            f"verdict: {best.label} against no speculation on {len(prompts)} prompt(s), in pairs, alternating ..."
        )
        ratios = []
        for i, prompt in enumerate(prompts):
            tps = {}
            for arm in abba((0, 1), i):
                if arm == 0:
                    s = self._run(best.spec, prompt)
                else:
                    s = self._run(SpecSettings("none"), prompt, baseline=True)
                    # it is this prompt's baseline as much as any: the speedup need not run it again
                    self._baseline.setdefault(prompt, s)
                tps[arm] = s["tokens_per_s"]
            ratios.append(tps[0] / tps[1] if tps[1] else 0.0)
        verdict = median_interval(ratios)
        self.progress(f"  {best.label} over no speculation: {verdict.describe()}")
        return verdict

    def measure_costs(self) -> PairCosts:
        self._check_stop()
        self.progress("measuring the target's verify time by batch size ...")
        verify = forward_times(self.client, "target", list(VERIFY_BATCH_SIZES), n_past=min(256, self.load.ctx // 4))
        draft = None
        if self.load.draft is not None and self.methods["draft-simple"].runs:  # a head cannot run alone
            self._check_stop()
            self.progress("measuring the draft's forward time ...")
            d = forward_times(self.client, "draft", [1, 2, 4, 8, 16], n_past=min(256, self.load.ctx // 4))
            draft = CostCurve(tuple(sorted(d)), tuple(d[k] for k in sorted(d)))
        return PairCosts(CostCurve(tuple(sorted(verify)), tuple(verify[k] for k in sorted(verify))), draft)

    def _say_if_over_budget(self, spent_s: float, n_candidates: int) -> None:
        """The least this tune must still run (every candidate on one prompt, then the verdict's pairs) at
        the median generation so far: when that cannot fit the budget, say so now, with the estimate,
        rather than run on past it unexplained (issue 51: 731 s of a 120 s budget, nothing said)."""
        if not self.run_seconds:
            return
        per = statistics.median(self.run_seconds)
        n_verdict = max(1, min(VERDICT_PROMPTS, len(self.prompts)))
        least = n_candidates + 2 * n_verdict
        total = spent_s + least * per
        if total <= self.budget_s:
            return
        self.budget_note = (
            f"this tune will run past its {self.budget_s:.0f} s budget: {spent_s:.0f} s went to measuring the "
            f"pair's costs and baseline, and the least it must still run ({n_candidates} settings on one prompt, "
            f"then {n_verdict} paired prompt(s) for the verdict: {least} generations at about {per:.1f} s each) "
            f"takes about {least * per:.0f} s more, about {total:.0f} s in all. Fewer max tokens or a shorter "
            "workload make it shorter"
        )
        self.progress(self.budget_note)

    def _costs_if_timed(self) -> PairCosts | None:
        """The pair's forward-pass costs, or None where the engine cannot time passes (llama-server)."""
        try:
            return self.measure_costs()
        except EngineError as exc:
            if exc.kind != "unsupported":
                raise
            self.progress("this engine cannot time forward passes: K is measured at a few values, not predicted")
            return None

    def run(self) -> TuneResult:
        t0 = time.monotonic()
        costs = self._costs_if_timed()
        first = self.prompts[: max(1, min(2, len(self.prompts)))]
        self.progress(f"baseline on {len(first)} prompt(s) ...")
        baseline_tps = self._baseline_on(first)

        candidates: list[Candidate] = []
        cond: list[float] = []
        predicted_by_k: dict[int, float] = {}
        if costs is None and self.load.draft is not None and self.methods["draft-simple"].runs:
            candidates += [Candidate(draft_simple(k)) for k in MEASURED_KS if k <= self.k_max]
            candidates.append(Candidate(with_draft(NGRAM_SIMPLE, 3)))
        elif costs is not None and self.load.draft is not None and self.methods["draft-simple"].runs:
            self.progress(f"probing acceptance by position with draft-simple K={PROBE_K} ...")
            probe = self._run(draft_simple(PROBE_K), first[0])
            cond = conditional_acceptance(probe["accepted_by_position"], probe["steps"])
            scale = baseline_scale(costs.verify.at(1), baseline_tps)
            costs = PairCosts(
                CostCurve(costs.verify.sizes, tuple(m * scale for m in costs.verify.ms)),
                costs.draft,
                {"verify_scale": scale},
            )
            for k in range(1, self.k_max + 1):
                spec = draft_simple(k)
                predicted_by_k[k] = costs.predict_tps(cond, k)
                candidates.append(Candidate(spec, round(predicted_by_k[k], 3)))
            candidates.sort(key=lambda c: -(c.predicted_tps or 0.0))
            best_k = candidates[0].spec.draft_n_max
            candidates = candidates[:4]
            candidates += [Candidate(spec) for spec in tuner_extras(best_k)]
        for method in dict.fromkeys(("draft-mtp", *HEAD_METHODS.values())):  # a gemma4 assistant drafts with draft-mtp
            if self.methods[method].runs:
                candidates += [Candidate(SpecSettings(method, draft_n_max=k)) for k in HEAD_KS]
        candidates += [Candidate(spec) for spec in NGRAMS]

        self._say_if_over_budget(time.monotonic() - t0, len(candidates))
        # successive halving: everyone on the first prompts, then the better half on twice as many,
        # down to the last two
        pool, n_prompts, used = list(candidates), 1, 0
        while True:
            batch = self.prompts[used : used + n_prompts] or self.prompts[:n_prompts]
            self.progress(f"round with {len(pool)} candidates on {len(batch)} prompt(s) ...")
            for cand in pool:
                self._evaluate(cand, batch)
            used += len(batch)
            self._rank(pool)
            out_of_time = time.monotonic() - t0 > self.budget_s
            clear = len(pool) > 1 and pool[0].measured_tps > CLEAR_MARGIN * pool[1].measured_tps
            if len(pool) <= 2 or out_of_time or clear or used >= len(self.prompts):
                break
            pool = pool[: max(2, len(pool) // 2)]
            n_prompts *= 2
        if len(pool) > 1 and not clear and not out_of_time:
            self._close_call(pool[:2])
            self._rank(pool)
        best = pool[0]
        verdict = self._verdict(best)
        # the speedup compares like with like: the baseline on exactly the prompts the best ran (the
        # verdict has just run it on its prompts)
        missing = len({p for p in best.prompts_run if p not in self._baseline})
        if missing:
            self.progress(f"baseline on {missing} more prompt(s), the ones the best setting ran ...")
        baseline_tps = self._baseline_on(best.prompts_run)
        return TuneResult(
            baseline_tps,
            costs,
            cond,
            candidates,
            best,
            time.monotonic() - t0,
            self.runs,
            predicted_by_k,
            verdict,
            self.budget_note,
        )
