"""A ranked choice and what it says: one target/draft/quantization choice with its memory plan, predicted
speed, score and the reasons shown beside it (PairChoice), a whole ranking (Recommendation), their JSON, and
how to download a choice. engine.planning.advice.recommend makes them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from engine.core.units import format_plan_bytes
from engine.models.catalog import ModelFile
from engine.planning.advice.placement import Placement
from engine.planning.constants import DEFAULT_SPEED_FLOOR
from engine.planning.memory.budget import Budget
from engine.planning.memory.memory_plan import MemoryPlan
from engine.planning.speed.device_speed import DeviceSpeed
from engine.planning.speed.speed_model import (
    Prediction,
    tokens_per_s_text,
)


@dataclass
class PairChoice:
    """One target/draft/quantization choice the recommender ranks: its memory plan, predicted speed and the
    reasons shown beside it (engine.measure.tuner.Candidate is another thing: a setting a tune measures)."""

    target: ModelFile
    draft: ModelFile
    params: int
    plan: MemoryPlan | None
    needed_bytes: int  # on the budget's devices
    usable_bytes: int
    fits_memory: bool
    ppl_increase: float
    ppl_estimated: bool
    bits_per_weight: float
    cost_ratio: float
    speedup: float
    draft_n_max: int
    acceptance_prior: float
    tokens_per_s_bound: float | None
    score_parts: dict[str, float]
    published: list[dict] = field(default_factory=list)
    preset: str | None = None
    why_not: str = ""  # empty when recommended
    prediction: Prediction | None = None  # the speed model on the budget's device, when its speed is known
    speed_floor: float | None = None
    # where the models go when both on the GPUs does not fit (engine.planning.advice.placement); None: the default
    placement: Placement | None = None
    active_params: int = 0  # of an MoE target: the parameters a token uses (0: dense)
    # the target has an MTP block of an architecture llama.cpp runs draft-mtp for (Qwen3.5): it can draft alone
    mtp_head: bool = False
    # the speed model for the target drafting with its own MTP block (draft-mtp), when the device is known
    mtp_prediction: Prediction | None = None
    # a GPU budget's host part: what the plan keeps in RAM, and the RAM usable for it (None: unknown)
    host_bytes: int = 0
    ram_usable_bytes: int | None = None
    # with N requests at once (llama-server -np N): the best K and its aggregate speedup, or None where no K pays
    # (engine.planning.speed.speed_model.concurrent_speedups); filled for the shown pairs on a GPU
    concurrent: dict[int, tuple[int, float] | None] = field(default_factory=dict)

    @property
    def ram_short(self) -> bool:
        """The GPUs hold their part, the RAM not the host part (the experts or the draft placed there)."""
        return self.ram_usable_bytes is not None and self.host_bytes > self.ram_usable_bytes

    @property
    def score(self) -> float:
        return round(sum(self.score_parts.values()), 2)

    @property
    def too_slow(self) -> bool:
        """Fits, but is predicted under the speed floor on this device."""
        return (
            self.fits_memory and self.prediction is not None and (self.tokens_per_s or 0.0) < (self.speed_floor or 0.0)
        )

    @property
    def uses_draft(self) -> bool:
        """False when speculation with this draft is predicted slower than the target alone."""
        return self.prediction is None or self.prediction.pays

    @property
    def plain_tokens_per_s(self) -> float | None:
        return self.prediction.plain_tokens_per_s if self.prediction else None

    @property
    def tokens_per_s(self) -> float | None:
        """Predicted tokens/s of the recommended setting: with the draft when it pays, else without."""
        if self.prediction is None:
            return None
        return self.prediction.plain_tokens_per_s * (self.speedup if self.uses_draft else 1.0)

    def speed_text(self) -> str:
        """ "~14 tok/s (x1.32 at K=4)" or "~14 tok/s without the draft (x0.81 with it)"; the old bound
        when the device's speed is unknown."""
        if self.prediction is None:
            bound = f", ≤{self.tokens_per_s_bound:.0f} tok/s" if self.tokens_per_s_bound else ""
            return f"x{self.speedup:.2f} at K={self.draft_n_max}{bound}"
        return self.prediction.speed_text()

    @property
    def label(self) -> str:
        return f"{self.target.model} {self.target.quant} + {self.draft.model} {self.draft.quant}"

    @property
    def setting_label(self) -> str:
        """What to run: the pair, or the target alone where its draft is predicted not to pay."""
        return self.label if self.uses_draft else f"{self.target.model} {self.target.quant}, alone"

    def placement_flags(self) -> list[str]:
        """llama-server's flags for the placement (the export writes the same from LoadSettings)."""
        return self.placement.flags(with_draft=self.uses_draft) if self.placement else []

    def reasons(self) -> list[str]:
        p = self.score_parts
        quality = (
            f"{self.target.quant} ({self.bits_per_weight:.2f} bits per weight) adds "
            f"{'about ' if self.ppl_estimated else ''}{self.ppl_increase:+.3f} perplexity on Llama-3-8B"
            f"{' (interpolated by bits per weight)' if self.ppl_estimated else ' (llama.cpp quantize table)'}: "
            f"{p['quant']:+.1f}"
        )
        if self.prediction is None:
            speed = [
                f"the draft reads {100 * self.cost_ratio:.1f}% of the target's bytes per token; at acceptance "
                f"{self.acceptance_prior:.2f} (prior) and K={self.draft_n_max} that is x{self.speedup:.2f}: "
                f"{p['speed']:+.1f}"
            ]
        else:
            pr, floor = self.prediction, self.speed_floor or DEFAULT_SPEED_FLOOR
            device = f" on {pr.device.name} ({pr.device.source})" if pr.device else ""
            speed = [
                f"predicted{device}: {tokens_per_s_text(pr.plain_tokens_per_s)} tokens/s without speculation; "
                f"{tokens_per_s_text(self.tokens_per_s or 0.0)} tokens/s as recommended, against a floor of {floor:g}: "
                f"{p['speed']:+.1f}",
                f"at acceptance {self.acceptance_prior:.2f} (prior), {pr.why()}",
            ]
        size = f"{self.params / 1e9:.1f}B-parameter target"
        if self.active_params:
            counted = math.sqrt(self.params * self.active_params)
            size = (
                f"{self.params / 1e9:.1f}B-parameter mixture of experts, {self.active_params / 1e9:.1f}B active "
                f"per token (sized as {counted / 1e9:.1f}B, the geometric mean)"
            )
        out = [
            f"{size}: {p['size']:+.1f}",
            quality,
            *speed,
            f"memory: {format_plan_bytes(self.needed_bytes)} of {format_plan_bytes(self.usable_bytes)} usable",
        ]
        if self.placement is not None and self.ram_usable_bytes is not None:
            out.append(
                f"RAM: {format_plan_bytes(self.host_bytes)} of {format_plan_bytes(self.ram_usable_bytes)} usable"
            )
        if self.placement is not None:
            how = "placed so that it fits" if self.fits_memory else "placed so that the GPUs hold their part"
            out.append(f"{how}: {self.placement.describe()} ({' '.join(self.placement_flags())})")
        if self.tokens_per_s_bound:
            out.append(f"bandwidth bound: about {self.tokens_per_s_bound:.0f} tokens/s with the draft")
        for s in self.published:
            out.append(f"published: x{s['speedup']:.2f} ({s['setup']}) {s['source']}")
        if self.concurrent:
            parts = [
                f"{n}: K={best[0]} x{best[1]:.2f}" if best else f"{n}: none pays"
                for n, best in sorted(self.concurrent.items())
            ]
            out.append(
                "requests at once (-np N), the best K and the aggregate speedup: "
                + ", ".join(parts)
                + " (each client adds K + 1 tokens to every verify pass)"
            )
        if self.mtp_head:
            mtp = self.mtp_prediction
            alone = ""
            if mtp is not None and mtp.speedup_by_k:
                by_k = mtp.speedup_by_k
                k = mtp.best_k or max(by_k, key=lambda k: by_k[k])
                alone = f" (predicted x{by_k[k]:.2f} at K={k} here, acceptance {self.acceptance_prior:.2f})"
            out.append(
                f"the target has an MTP head: draft-mtp needs no separate draft model{alone}, where its GGUF "
                "keeps the MTP block (spectune inspect says so)"
            )
        return out

    def to_dict(self, with_plan: bool = True) -> dict:
        d = {
            "target": vars(self.target).copy(),
            "draft": vars(self.draft).copy(),
            "preset": self.preset,
            "score": self.score,
            "score_parts": self.score_parts,
            "needed_bytes": self.needed_bytes,
            "usable_bytes": self.usable_bytes,
            "host_bytes": self.host_bytes,
            "ram_usable_bytes": self.ram_usable_bytes,
            "fits_memory": self.fits_memory,
            "quality": {
                "quant": self.target.quant,
                "bits_per_weight": self.bits_per_weight,
                "ppl_increase": self.ppl_increase,
                "ppl_estimated": self.ppl_estimated,
            },
            "cost_ratio": self.cost_ratio,
            "expected_speedup": self.speedup,
            "draft_n_max": self.draft_n_max,
            "acceptance_prior": self.acceptance_prior,
            "tokens_per_s_bound": self.tokens_per_s_bound,
            "uses_draft": self.uses_draft,
            "mtp_head": self.mtp_head,
            "plain_tokens_per_s": _rounded(self.plain_tokens_per_s),
            "tokens_per_s": _rounded(self.tokens_per_s),
            "speed_floor": self.speed_floor,
            "prediction": self.prediction.to_dict() if self.prediction else None,
            "mtp_prediction": self.mtp_prediction.to_dict() if self.mtp_prediction else None,
            "published_speedups": self.published,
            "concurrent": {
                str(n): None if best is None else {"k": best[0], "speedup": round(best[1], 3)}
                for n, best in self.concurrent.items()
            },
            "reasons": self.reasons(),
            "pull": pull_commands(self.target, self.draft if self.uses_draft else None, self.preset),
            "placement": self.placement.to_dict() if self.placement else None,
            "placement_flags": self.placement_flags(),
            "active_params": self.active_params or None,
        }
        if self.why_not:
            d["why_not"] = self.why_not
        if with_plan and self.plan is not None:
            d["plan"] = self.plan.to_dict()
        return d


@dataclass
class Recommendation:
    budget: Budget
    ctx: int
    family: str | None
    recommended: list[PairChoice]
    near_misses: list[PairChoice]
    left_out: list[str]
    device: DeviceSpeed | None = None
    speed_floor: float = DEFAULT_SPEED_FLOOR

    def to_dict(self) -> dict:
        return {
            "budget": self.budget.to_dict(),
            "device": self.device.to_dict() if self.device else None,
            "speed_floor": self.speed_floor,
            "ctx": self.ctx,
            "family": self.family,
            "recommendations": [c.to_dict() for c in self.recommended],
            "near_misses": [c.to_dict(with_plan=False) for c in self.near_misses],
            "left_out": self.left_out,
        }


def pull_commands(target: ModelFile, draft: ModelFile | None, preset: str | None = None) -> list[str]:
    """How to download a pair with `spectune pull`: the preset when there is one, else each hub file
    (the target alone when the draft is not worth having here)."""
    if preset and draft is not None:
        return [f"spectune pull {preset}"]
    return [f"spectune pull {f.repo}:{f.filename}" for f in (target, draft) if f is not None and not f.bundled]


def _rounded(x: float | None) -> float | None:
    return None if x is None else round(x, 2)
