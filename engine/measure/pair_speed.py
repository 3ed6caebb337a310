"""How fast a pair of GGUF files is predicted to run here, before it is loaded.

The speed model (engine.planning.speed.speed_model) on the files' headers: on this pair's newest tune in this
machine's history when there is one (basis "measured", engine.measure.calibration), else on the device's
figures with the prior acceptance (basis "prior"). The Models page's library asks it for every
compatible pair it found, reading each file's header once.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from engine.measure.calibration import measured_pair
from engine.measure.history import History, HistoryError
from engine.models.gguf_inspect import GGUFInspectError, inspect_gguf
from engine.planning.constants import PREDICT_N_PAST
from engine.planning.speed.device_speed import DeviceSpeed
from engine.planning.speed.model_cost import ModelCost, model_cost
from engine.planning.speed.speed_model import Prediction, predict


class _Costs:
    """Model costs by file, each header read once."""

    def __init__(self) -> None:
        self._by_path: dict[Path, ModelCost] = {}

    def model(self, path: Path) -> ModelCost:
        if path not in self._by_path:
            self._by_path[path] = model_cost(inspect_gguf(path, keep=False))  # every pair of the library: a scan
        return self._by_path[path]


def _predict_pair(
    target: Path, draft: Path, device: DeviceSpeed | None, workload: str | None, history: History | None, costs: _Costs
) -> Prediction:
    """The pair's tune in the history, else the device's figures (GGUFInspectError: a file that cannot be
    read; ValueError: neither a tune nor a device)."""
    measured = measured_pair(target, draft, history)
    if measured is None and device is None:
        raise ValueError("no device to predict for, and no tune of this pair in the history")
    return predict(
        costs.model(target),
        costs.model(draft),
        device,  # with a tune, only for what the tune's bare passes do not time: a hybrid's state copies
        n_past=PREDICT_N_PAST,
        measured=measured,
        workload=workload,
    )


def predict_pairs(
    pairs: Iterable[tuple[str, str]],
    device: DeviceSpeed | None,
    workload: str | None = None,
    history: History | None = None,
) -> dict[tuple[str, str], Prediction | str]:
    """Every (target, draft) pair's prediction, or why it has none (a file that cannot be read), each file read
    once and the history (default: this machine's) opened once."""
    costs = _Costs()
    out: dict[tuple[str, str], Prediction | str] = {}
    own = history is None
    try:
        history = History() if own else history
    except (HistoryError, OSError):
        history = None  # no tunes to read: every pair on the device's figures
    try:
        for target, draft in pairs:
            try:
                out[(target, draft)] = _predict_pair(Path(target), Path(draft), device, workload, history, costs)
            except (GGUFInspectError, OSError, ValueError) as exc:
                out[(target, draft)] = str(exc)
    finally:
        if own and history is not None:
            history.close()
    return out
