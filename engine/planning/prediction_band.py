"""How far a speed prediction may be off, shown beside it: bands taken from held-out errors.

bench/prediction_error.py measures plain decoding and draft-simple speedups on pairs no constant of the
speed model was fitted to (the CPU probe measures the device just before each case; real hub models are
among them and never enter any fit), and prints the largest error of each kind of model. Those figures
are written here, with the run they come from, so that every place that shows a prediction (spectune
predict and recommend, the Start and Models pages, the Lab's why line) shows the same band.

A band is the largest |error| seen, not a statistical interval: with about ten cases that is the honest
summary. Where no held-out measurement stands behind a prediction (a GPU, whose figures come from NVML and
a table; a CPU nobody has probed yet) there is no band, and the text says the figure is unchecked.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Band:
    """Half-widths: ``plain`` relative to the plain tokens/s, ``speedup`` in the speedup's own units."""

    plain: float
    speedup: float
    source: str

    def plain_text(self) -> str:
        return f"±{100 * self.plain:.0f} %"


# bench/results/prediction_error-cpu.txt, the run of 2026-12-02 18:16 (probe v4: five classes, each on a file
# of its type alone): the largest |error| of each kind over its held-out cases; one run so far
PRIOR_DENSE = Band(
    0.26, 0.28, "largest held-out error of the CPU prior on 7 dense pairs, the real Qwen pair among them"
)
PRIOR_MOE = Band(0.10, 0.14, "largest held-out error of the CPU prior on 2 mixture-of-experts pairs")
PRIOR_OUTPUT_HEAVY = Band(
    0.27, 0.28, "held-out error of the CPU prior on Gemma 3 270M, whose output layer is 73 % of it"
)
MEASURED = Band(0.11, 0.15, "largest held-out error after a calibration run of the pair, over 10 cases")
# a model whose weight types the probe does not time (speed_model.BORROWED_CLASSES) is charged at another
# class's rates: its band is the prior's widened by this much. Not yet measured: the largest gap between two
# measured classes' per-byte speeds here (Q5_0 against Q8_0, about 20 %) halved; bench/borrowed_classes.py
# times the borrowed types against their stand-ins and is the way to replace it
BORROWED_WIDENING = 0.10


def band_for(
    basis: str, *, device_checked: bool, moe: bool = False, output_heavy: bool = False, borrowed: bool = False
) -> Band | None:
    """The band of a prediction: ``basis`` "measured" (a tune or calibration of the pair) or "prior";
    ``device_checked`` False for a device no held-out case ran on (a GPU, an unprobed CPU): no band then."""
    if basis == "measured":
        return MEASURED
    if not device_checked:
        return None
    band = PRIOR_MOE if moe else PRIOR_OUTPUT_HEAVY if output_heavy else PRIOR_DENSE
    if borrowed:
        band = Band(band.plain + BORROWED_WIDENING, band.speedup, band.source + ", widened for unmeasured types")
    return band
