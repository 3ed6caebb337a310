"""How fast a pair will run here, before it runs: a roofline on what the GGUF says a token costs.

One forward pass of B tokens on one device, with n_past tokens already in the KV cache:

    t(B) = overhead + max(bytes read / bandwidth, B x FLOPs per token / compute)

bytes read: the weights a pass touches, once per pass whatever B is (the token embedding is one row
per token; an MoE layer reads only its active experts, n_expert_used of n_expert), plus the KV cache
up to n_past (a sliding-window layer's only up to its window: gpt-oss attends over 128 positions in half
its layers, Gemma 3 over 1024 in five of six). FLOPs per token: 2 per weight multiplied, plus attention
over the positions each layer attends to. A CPU prices this otherwise (DeviceSpeed): one token reads,
a batch adds what the CPU probe timed per multiply-add at that batch size, and each layer has a fixed cost.
A hybrid model (Qwen3.5: engine.planning.memory.recurrent) has KV caches in its attention layers only; each
of its delta-net layers instead reads its fixed-size recurrent state at the start of a pass and writes
it back at the end, whatever n_past is, and updates it for every token (about three multiply-adds per
state element: decay and write the key-value outer product, read it out with the query). An MTP block
after the trunk is not part of a forward pass of the model.
Plain decoding is t(1) per token; a speculative step with K drafted tokens costs K draft passes, a
draft pass over the K + 1 verified tokens (none for a Gemma 4 assistant, which keeps no cache of its
own) and one target pass of K + 1 (engine.planning.speed.cost_model; a hybrid target adds the replay of a
partly kept draft),
which is why verify cost that grows with B (compute-bound, as on a 2-core CPU) eats the speedup and
a flat one (bandwidth-bound, as on a GPU) does not.

Until this pair has been measured on this machine the prediction rests on priors: the device's
speed (NVML and a table for GPUs; a measured probe for the CPU) and an acceptance per workload.
A tune of the pair (kept in the history) replaces both with what it measured; ``basis`` says which.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field

from engine.core.paths import RESOURCES_DIR
from engine.core.tune_record import TuneRecord
from engine.planning.constants import ACCEPTANCE_PRIOR, K_MAX, PREDICT_N_PAST, VERIFY_BATCH_SIZES
from engine.planning.speed.cost_model import CostCurve, PairCosts, StateCopies, accepted_exactly, expected_tokens
from engine.planning.speed.device_speed import DeviceSpeed
from engine.planning.speed.model_cost import ModelCost
from engine.planning.speed.prediction_band import Band, band_for, gpu_band, model_kind

# predict reports the verify cost of every batch up to this many tokens (a verify of K = 15)
MAX_VERIFY_BATCH = 16

# the same prior by the kind of text (the shipped workload sets), measured on a real same-family pair
# (Qwen2.5-Coder 1.5B Instruct drafted by the 0.5B, draft-simple K=4, greedy) by bench/acceptance_priors.py,
# in chat mode (an instruct model's default) and as raw text; the file says where each number comes from.
# Text that restates its prompt is drafted more easily than free writing; a tune of the pair replaces any of
# these with what it measured.
ACCEPTANCE_PRIORS_FILE = RESOURCES_DIR / "catalog" / "acceptance_priors.json"


def _load_priors() -> tuple[dict[str, float], dict[str, float], str]:
    doc = json.loads(ACCEPTANCE_PRIORS_FILE.read_text(encoding="utf-8"))
    sets = doc["sets"]
    return (
        {name: float(v["chat"]) for name, v in sets.items()},
        {name: float(v["raw"]) for name, v in sets.items()},
        str(doc["source"]),
    )


ACCEPTANCE_PRIORS, ACCEPTANCE_PRIORS_RAW, ACCEPTANCE_PRIORS_SOURCE = _load_priors()


def acceptance_prior(workload: str | None = None, chat: bool = True) -> float:
    """The prior acceptance per draft position for a shipped workload set, as chat requests (``chat``) or raw
    text; the flat prior for any other text."""
    return (ACCEPTANCE_PRIORS if chat else ACCEPTANCE_PRIORS_RAW).get(workload or "", ACCEPTANCE_PRIOR)


def acceptance_prior_text(workload: str | None = None, chat: bool = True) -> str:
    """Where a prior is shown: "0.70 per position (prior: ...)", saying it is one and where it comes from."""
    where = (
        f"the {workload} set on a real Qwen2.5-Coder pair"
        if workload in ACCEPTANCE_PRIORS
        else "a same-family draft, from Llama 3.1 8B / 3.2 1B"
    )
    return f"{acceptance_prior(workload, chat):.2f} per position (prior: {where}, until the pair is measured)"


@dataclass
class Measured:
    """This pair measured on this machine (a tune in the history): forward times by batch size and the
    acceptance by draft position."""

    verify_ms: dict[int, float]
    draft_ms: dict[int, float] | None
    acceptance_by_position: list[float] = field(default_factory=list)  # conditional, per position
    source: str = ""


@dataclass
class Prediction:
    plain_tokens_per_s: float
    verify_ms_by_batch: dict[int, float]
    draft_ms: float | None  # one draft token
    speedup_by_k: dict[int, float]
    best_k: int | None  # None: no K beats plain decoding
    acceptance: list[float]  # conditional acceptance by position used
    basis: str  # "measured" or "prior"
    device: DeviceSpeed | None
    method: str = "draft-simple"  # the drafting the speedups are for: draft-mtp for an MTP block or an assistant
    # how far the figures may be off (engine.planning.speed.prediction_band); None: nothing held out checks them
    band: Band | None = None
    # a hybrid target's or draft's state copies every step with a draft (cost_model's checkpoints), a partial keep's
    # copies back aside: what the why line names
    checkpoint_ms: float = 0.0

    @property
    def pays(self) -> bool:
        return self.best_k is not None

    def _closest_k(self) -> int:
        by_k = self.speedup_by_k
        return self.best_k or max(by_k, key=lambda k: by_k[k])

    @property
    def verdict(self) -> str:
        """ "pays", "does not pay", or "may not pay" where the best speedup lies within the band of x1.00 (the
        figures cannot tell it from no speculation); "" without a draft."""
        if not self.speedup_by_k:
            return ""
        best = self.speedup_by_k[self._closest_k()]
        if self.band is not None and abs(best - 1.0) <= self.band.speedup:
            return "may not pay"
        return "pays" if self.pays else "does not pay"

    def unchecked_text(self) -> str:
        """What stands in for a band where no held-out case checked the figures."""
        if self.band is not None:
            return ""
        if self.device is not None and self.device.assumed:
            return "rough: this CPU is not measured yet"
        return "not yet checked on this kind of device"

    def speed_text(self) -> str:
        """ "~14 tok/s ±15 % (x1.32 at K=4)" at the best K, or "~14 tok/s ±15 % without the draft (x0.81 with
        it)" where no K pays (the K whose speedup comes closest to 1); a speedup within the band of x1.00
        says "may not pay". Without a band the figure says it is unchecked."""
        by_k = self.speedup_by_k
        plain = self.plain_tokens_per_s
        band = f" {self.band.plain_text()}" if self.band is not None else ""
        unchecked = f" ({self.unchecked_text()})" if self.band is None else ""
        if not by_k:
            return f"~{tokens_per_s_text(plain)} tok/s{band}{unchecked}"
        k = self._closest_k()
        doubt = f", may not pay: ±{self.band.speedup:.2f}" if self.verdict == "may not pay" and self.band else ""
        if self.pays:
            return f"~{tokens_per_s_text(plain * by_k[k])} tok/s{band} (x{by_k[k]:.2f} at K={k}{doubt}){unchecked}"
        return f"~{tokens_per_s_text(plain)} tok/s{band} without the draft (x{by_k[k]:.2f} with it{doubt}){unchecked}"

    def why(self) -> str:
        """One sentence: why speculation pays here, or why it does not (or may not: within the band)."""
        v1, k = self.verify_ms_by_batch[1], self.best_k or 4
        ratio = self.verify_ms_by_batch.get(k + 1, v1) / v1 if v1 else 1.0
        base = f"verifying {k + 1} tokens costs {ratio:.1f}x one token"
        if self.draft_ms is not None and v1:
            base += f" and a draft token {self.draft_ms / v1:.0%} of a target step"
        if self.checkpoint_ms and v1:
            base += (
                f", and each step copies the hybrid model's recurrent state to host memory for "
                f"{self.checkpoint_ms / v1:.1f}x a target step"
            )
        band = f" ±{self.band.speedup:.2f}" if self.band is not None else ""
        if not self.speedup_by_k:  # no draft named: what a draft would have to beat
            return f"no draft: {base}, which a draft's accepted tokens would have to pay for ({self.basis})"
        if self.verdict == "may not pay":
            closest = self._closest_k()
            return (
                f"speculation may not pay here: {base}, so K={closest} gives x{self.speedup_by_k[closest]:.2f}{band}, "
                f"within the prediction's band of x1.00 ({self.basis})"
            )
        if self.pays:
            return f"speculation pays here: {base}, so K={k} gives x{self.speedup_by_k[k]:.2f}{band} ({self.basis})"
        return f"speculation does not pay here: {base} ({self.basis}); run without it"

    def to_dict(self) -> dict:
        return {
            "plain_tokens_per_s": round(self.plain_tokens_per_s, 3),
            "verify_ms_by_batch": {str(b): round(ms, 4) for b, ms in self.verify_ms_by_batch.items()},
            "draft_ms": None if self.draft_ms is None else round(self.draft_ms, 4),
            "speedup_by_k": {str(k): round(s, 4) for k, s in self.speedup_by_k.items()},
            "best_k": self.best_k,
            "acceptance": [round(a, 4) for a in self.acceptance],
            "basis": self.basis,
            "method": self.method,
            "device": self.device.to_dict() if self.device else None,
            "band": None
            if self.band is None
            else {"plain": self.band.plain, "speedup": self.band.speedup, "source": self.band.source},
            "verdict": self.verdict,
            "checkpoint_ms": round(self.checkpoint_ms, 4),
            "why": self.why(),
        }


def tokens_per_s_text(x: float) -> str:
    """Tokens/s to two significant figures: 1.2, 14, 140."""
    return f"{x:.1f}" if x < 10 else f"{x:.0f}"


def predict(
    target: ModelCost,
    draft: ModelCost | None,
    device: DeviceSpeed | None,
    *,
    n_past: int = PREDICT_N_PAST,
    acceptance: float | Sequence[float] | None = None,
    measured: Measured | None = None,
    k_max: int = K_MAX,
    host: DeviceSpeed | None = None,
    target_on_host: ModelCost | None = None,
    draft_on_host: bool = False,
    workload: str | None = None,
) -> Prediction:
    """Plain tokens/s and the speedup of draft-simple at each K. ``measured`` (this pair on this machine)
    replaces the device's roofline and the acceptance prior; ``acceptance`` (one chance for every position,
    or one per position) replaces either, so the cost side can be checked on its own.

    A pair placed partly on the CPU (engine.planning.advice.placement) runs that part at the ``host``'s speed:
    ``target_on_host``, the target's tensors kept in host memory (its other part is ``target``), and with
    ``draft_on_host`` the whole draft. Each pass then costs the GPU's part plus the host's.
    workload: a shipped workload set's name, whose prior acceptance (ACCEPTANCE_PRIORS) stands in until
    the pair is measured."""
    if measured is None and device is None:
        raise ValueError("a prediction needs the device's speed or a measurement of the pair")
    if measured is not None:
        verify, draft_curve = _measured_curves(measured)
        basis = "measured"
    else:
        assert device is not None
        if (target_on_host is not None or draft_on_host) and host is None:
            raise ValueError("a pair placed partly on the CPU needs the host's speed")
        verify, draft_curve = _prior_curves(target, draft, device, n_past, k_max, host, target_on_host, draft_on_host)
        basis = "prior"
    cond = _conditional_acceptance(acceptance, measured, workload)
    restores = target.replays and not (draft is not None and draft.mtp)
    copies = _state_copies(target, draft, device, host if draft_on_host else device) if device else None
    costs = PairCosts(verify, draft_curve, replays=restores, checkpoints=copies)
    plain = costs.baseline_tps
    feed = draft is None or not draft.reads_target_cache
    speedups = (
        {k: costs.predict_tps(cond, k, feed_draft=feed) / plain for k in range(1, k_max + 1)} if draft_curve else {}
    )
    best = max(speedups, key=lambda k: speedups[k]) if speedups else None
    if measured is not None:
        band = band_for("measured", device_checked=True)
    else:
        assert device is not None
        # a GPU's figures are judged on published measurements; a CPU's on held-out cases on a probed CPU
        checked = not device.overlap and not device.assumed
        band = (
            gpu_band(device.gpu_fit.band, _speedup_kind(draft, copies))
            if device.gpu_fit is not None and device.gpu_fit.band
            else band_for(
                "prior",
                device_checked=checked,
                kind=model_kind(target),
                borrowed=bool(target.borrowed or (draft is not None and draft.borrowed)),
            )
        )
    return Prediction(
        plain_tokens_per_s=plain,
        verify_ms_by_batch={b: verify.at(b) for b in range(1, max(k_max + 2, MAX_VERIFY_BATCH + 1))},
        draft_ms=draft_curve.at(1) if draft_curve else None,
        speedup_by_k=speedups,
        best_k=best if best is not None and speedups[best] > 1.0 else None,
        acceptance=list(cond),
        basis=basis,
        device=device if measured is None else None,
        method="draft-mtp" if draft is not None and (draft.mtp or draft.reads_target_cache) else "draft-simple",
        band=band,
        checkpoint_ms=copies.step_ms(0.0, restores) if copies and draft_curve else 0.0,
    )


def _speedup_kind(draft: ModelCost | None, copies: StateCopies | None) -> str:
    """Which of the GPU fit's speedup bands (prediction_band.SPEEDUP_KINDS) judges this prediction."""
    if draft is not None and draft.mtp:  # the runs behind this band: hybrid Qwen targets' own MTP blocks
        return "speedup_mtp"
    return "speedup_copies" if copies is not None and draft is not None else "speedup"


def _state_copies(
    target: ModelCost, draft: ModelCost | None, device: DeviceSpeed, draft_device: DeviceSpeed | None
) -> StateCopies | None:
    """What copying each hybrid model's recurrent state costs once (cost_model's checkpoints): the target's when it
    restores a separate draft's rejection, a separate hybrid draft model's always; None when neither copies."""
    separate = draft is not None and not draft.mtp and not draft.reads_target_cache
    target_ms = device.state_copy_ms(target.checkpoint_bytes) if target.replays and separate else 0.0
    dev = draft_device or device
    draft_ms = dev.state_copy_ms(draft.checkpoint_bytes) if separate and draft is not None and draft.replays else 0.0
    return StateCopies(target_ms, draft_ms) if target_ms or draft_ms else None


def _measured_curves(measured: Measured) -> tuple[CostCurve, CostCurve | None]:
    """The verify and draft costs by batch size as this pair was measured (no draft curve without a draft)."""
    verify = CostCurve(
        tuple(sorted(measured.verify_ms)), tuple(measured.verify_ms[b] for b in sorted(measured.verify_ms))
    )
    draft_curve = (
        CostCurve(tuple(sorted(measured.draft_ms)), tuple(measured.draft_ms[b] for b in sorted(measured.draft_ms)))
        if measured.draft_ms
        else None
    )
    return verify, draft_curve


def _prior_curves(
    target: ModelCost,
    draft: ModelCost | None,
    device: DeviceSpeed,
    n_past: int,
    k_max: int,
    host: DeviceSpeed | None,
    target_on_host: ModelCost | None,
    draft_on_host: bool,
) -> tuple[CostCurve, CostCurve | None]:
    """The verify and draft costs by batch size (up to k_max + 1) that the devices' rooflines give: each pass
    on the device, plus the host's part of it for a pair placed partly on the CPU."""
    sizes = tuple(b for b in VERIFY_BATCH_SIZES if b <= max(k_max + 1, MAX_VERIFY_BATCH))

    def verify_ms(b: int) -> float:
        gpu = device.forward_ms(target, b, n_past)
        return gpu + (host.forward_ms(target_on_host, b, n_past) if host and target_on_host else 0.0)

    draft_device = host if draft_on_host and host is not None else device
    verify = CostCurve(sizes, tuple(verify_ms(b) for b in sizes))
    draft_curve = (
        CostCurve(sizes, tuple(draft_device.forward_ms(draft, b, n_past) for b in sizes)) if draft is not None else None
    )
    return verify, draft_curve


def _conditional_acceptance(
    acceptance: float | Sequence[float] | None, measured: Measured | None, workload: str | None
) -> list[float]:
    """The chance of acceptance at each draft position (one entry: the same at every position): the caller's,
    else the pair's measured one, else the workload's prior."""
    if isinstance(acceptance, Sequence):
        return [float(a) for a in acceptance] or [acceptance_prior(workload)]
    if acceptance is not None:
        return [acceptance]
    if measured is not None and measured.acceptance_by_position:
        return list(measured.acceptance_by_position)
    return [acceptance_prior(workload)]


# how far a measured pass may stray from what batching allows before the curve is taken for a disturbed
# measurement: a pass of B tokens costs at least about one token's pass, and at most about B of them
PLAUSIBLE_LOW, PLAUSIBLE_HIGH = 0.75, 1.5


def plausible_verify_curve(verify_ms: dict[int, float]) -> bool:
    """False for forward times no machine produces undisturbed: a pass of B tokens much faster than a pass of
    one (under PLAUSIBLE_LOW of it), or much slower than B passes of one (over PLAUSIBLE_HIGH x B of it). A
    tune taken while something else held the machine (a first pass paging the weights in, a burst of other
    work) records such a curve, and a speedup predicted from it would be absurd (x9 at K=3)."""
    one = verify_ms.get(1)
    if not one or one <= 0:
        return False
    return all(PLAUSIBLE_LOW * one <= ms <= PLAUSIBLE_HIGH * b * one for b, ms in verify_ms.items() if b > 1)


def measured_from_tune(result: TuneRecord) -> Measured:
    """A tune's result as the history keeps it (engine.measure.tuner TuneResult.to_dict)."""
    by_position = result.get("acceptance_by_position") or []
    return Measured(
        verify_ms={int(b): float(ms) for b, ms in (result.get("verify_ms") or {}).items()},
        draft_ms={int(b): float(ms) for b, ms in (result.get("draft_ms") or {}).items()} or None,
        acceptance_by_position=[float(a) for a in by_position],
        source="tune",
    )


# the numbers of concurrent requests the recommendations quote a best K for (llama-server -np N)
CONCURRENT_CLIENTS = (2, 4, 8)


def concurrent_speedups(
    target: ModelCost,
    draft: ModelCost,
    device: DeviceSpeed,
    clients: int,
    *,
    acceptance: float | Sequence[float] | None = None,
    n_past: int = PREDICT_N_PAST,
    k_max: int = K_MAX,
    workload: str | None = None,
) -> dict[int, float]:
    """The aggregate speedup of draft-simple at each K with ``clients`` requests decoding together (llama-server
    -np N, one batch for all slots): a plain step is a pass of one token per client; a speculative step drafts K
    for each (K draft passes of N tokens, and the draft's pass over what was kept) and verifies K + 1 for each, a
    pass of N x (K + 1) tokens. The verify costs come from the same batch curve as the single-stream prediction,
    taken out to N x (K + 1): each token beyond the first costs its weights again in arithmetic, so where a card's
    arithmetic is slow for its bandwidth the best K falls as clients are added. A hybrid target (cost_model's
    replays) verifies each slot's partly kept draft again within the next pass, a + 2 more tokens in it, and every
    slot copies its state as one stream does (cost_model's checkpoints)."""
    if clients < 1:
        raise ValueError(f"clients must be 1 or more, got {clients}")
    cond = _conditional_acceptance(acceptance, None, workload)
    plain_ms = device.forward_ms(target, clients, n_past)
    draft_one = device.forward_ms(draft, clients, n_past)
    restores = target.replays and not draft.mtp
    copies = _state_copies(target, draft, device, device)
    out = {}
    for k in range(1, k_max + 1):
        kept = accepted_exactly(cond, k)[:k]
        partial = sum(kept) if restores else 0.0
        batch = clients * (k + 1 + (sum(p * (a + 2) for a, p in enumerate(kept)) if restores else 0.0))
        step = k * draft_one + device.forward_ms(draft, round(batch), n_past)
        step += device.forward_ms(target, round(batch), n_past)
        step += clients * copies.step_ms(sum(kept), restores) if copies else 0.0
        out[k] = (expected_tokens(cond, k) + partial) * plain_ms / step
    return out


def best_concurrent_k(speedups: dict[int, float]) -> tuple[int, float] | None:
    """(K, speedup) of the best K, or None when no K beats plain decoding."""
    if not speedups:
        return None
    k = max(speedups, key=lambda x: speedups[x])
    return (k, speedups[k]) if speedups[k] > 1.0 else None
