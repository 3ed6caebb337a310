"""How far a speed prediction may be off, shown beside it: bands taken from held-out errors.

bench/prediction_error.py measures plain decoding and draft-simple speedups on pairs no constant of the
speed model was fitted to (the CPU probe measures the device just before each case; real hub models are
among them and never enter any fit), and prints the largest error of each kind of model. Those figures
are written here, with the run they come from, so that every place that shows a prediction (spectune
predict and recommend, the Start and Models pages, the Lab's why line) shows the same band.

A band is the largest |error| seen, not a statistical interval: with about ten cases that is the honest
summary. A GPU's band is the 90th percentile of the held-out errors of bench/gpu_prediction.py over published
llama.cpp measurements (dozens of rows, where the largest is a three-year-old build's), stored with the fit
(resources/catalog/gpu_speed.json). Where no held-out measurement stands behind a prediction (a CPU nobody has
probed yet) there is no band, and the text says the figure is unchecked.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.planning.speed.model_cost import ModelCost


@dataclass(frozen=True)
class Band:
    """Half-widths: ``plain`` relative to the plain tokens/s, ``speedup`` in the speedup's own units."""

    plain: float
    speedup: float
    source: str

    def plain_text(self) -> str:
        return f"±{100 * self.plain:.0f} %"


# bench/results/prediction_error-cpu.txt, the four runs of probe v9 (a matrix row's fixed cost measured), every model
# locked in RAM: 2026-12-04 10:10 and 14:28, 2026-12-05 03:47 and 07:47. Each band is the largest |error| of its kind
# over the held-out cases of all four runs (the 12-05 runs widened the MoE, Gemma and calibrated-speedup bands only).
# Dense: plain -23.8 % (the real Qwen pair) in the first run, -24.3 % (1.4B Q8_0) in the second; speedup -0.237
# (1.4B Q8_0 at K=2: x0.79 predicted, x1.03 measured) in the first, 0.12 in the second
PRIOR_DENSE = Band(
    0.24, 0.24, "largest held-out error of the CPU prior on 4 dense pairs in two runs, the real Qwen pair among them"
)
# a model a token reads under SMALL_MODEL_BYTES of: its CPU passes take a few ms, where a fixed cost and the
# machine's moods weigh most. Decided before the runs, so that one case this small does not set the band of every
# dense model: +28.9 % (0.1B Q4_K_M) in the first run, 16 % in the second; speedup 0.12 and 0.16
SMALL_MODEL_BYTES = 256 * 2**20
PRIOR_SMALL = Band(
    0.29, 0.16, "largest held-out error of the CPU prior on 3 dense pairs whose targets read under 256 MiB a token"
)
# the MoE pairs' plain speed is predicted from the bytes a token reads: +13.6 % and -4.9 % in the first run, -15.2 %
# and +6.4 % in the second, -17.3 % and +25.2 % (moe-1.1B Q4_K_M) in the third, +7.5 % and +19.2 % in the fourth
# (probe v8 had +29 % and +37 % before the models were locked in RAM); speedup 0.12 at the most
PRIOR_MOE = Band(0.25, 0.12, "largest held-out error of the CPU prior on 2 mixture-of-experts pairs in four runs")
# Gemma 3 270M, whose 262144 output rows of 640 weights each are 73 % of it: -8.8 %, +1.5 %, -11.9 % and -3.9 % in
# the four runs once the probe charged each row its fixed cost (probe v8, without it: +8 % to +41 % in four runs);
# it has no draft here, so its speedup band is the dense one
PRIOR_OUTPUT_HEAVY = Band(
    0.12,
    0.24,
    "largest held-out error of the CPU prior on Gemma 3 270M, whose output layer is 73 % of it (speedup: dense)",
)
# after a calibration run: +15.2 % (moe-0.35B Q8_0, second run) is the largest plain error, 0.101 the largest
# speedup error (fourth run; 0.097 in the first)
MEASURED = Band(0.15, 0.11, "largest held-out error after a calibration run of the pair, over 10 cases in four runs")
# a model whose weight types the probe does not time is charged at another class's time per weight
# (model_cost.BORROWED_CLASSES): its plain band is the prior's widened by the largest one-token error
# bench/borrowed_classes.py measured for Q4_0, Q5_1, Q5_K, Q3_K and IQ4_XS against their stand-ins (2026-12-03
# 11:05: -21 % .. +25 %; passes of 5 tokens -32 % .. +18 %)
BORROWED_WIDENING = 0.25


def model_kind(target: ModelCost) -> str:
    """Which band a target's prior takes, and which cases of bench/prediction_error.py give that band:
    "moe", "output-heavy", "small" or "dense", the first that fits."""
    if target.expert_share > 0:
        return "moe"
    if target.output_heavy:
        return "output-heavy"
    return "small" if target.weight_bytes < SMALL_MODEL_BYTES else "dense"


PRIOR_BANDS = {"dense": PRIOR_DENSE, "small": PRIOR_SMALL, "moe": PRIOR_MOE, "output-heavy": PRIOR_OUTPUT_HEAVY}


def gpu_band(held_out: dict[str, float], speedup_kind: str = "speedup") -> Band:
    """The band of a GPU prediction: the fit's held-out error quantiles (gpu_speed.GpuFit.band). Speedups are judged
    by the kind of run (SPEEDUP_KINDS): a separate draft, one that pays for copies of a hybrid model's state
    (cost_model's checkpoints), or the target's own MTP block; a kind the fit has no errors for takes the first's."""
    return Band(
        held_out.get("plain", 0.0),
        held_out.get(speedup_kind, held_out.get("speedup", 0.0)),
        "90th percentile of the held-out errors on published llama.cpp GPU measurements (bench/gpu_prediction.py)",
    )


# the speedup bands a GPU fit carries, by the kind of speculative run its errors were measured on
SPEEDUP_KINDS = ("speedup", "speedup_copies", "speedup_mtp")


def band_for(basis: str, *, device_checked: bool, kind: str = "dense", borrowed: bool = False) -> Band | None:
    """The band of a prediction: ``basis`` "measured" (a tune or calibration of the pair) or "prior";
    ``device_checked`` False for a device no held-out case ran on (a GPU, an unprobed CPU): no band then;
    ``kind`` the target's model_kind."""
    if basis == "measured":
        return MEASURED
    if not device_checked:
        return None
    band = PRIOR_BANDS[kind]
    if borrowed:
        band = Band(band.plain + BORROWED_WIDENING, band.speedup, band.source + ", widened for unmeasured types")
    return band
