"""How fast a pair of GGUF files is predicted to run here, before it is loaded.

The speed model (engine.planning.speed_model) on the files' headers: on this pair's newest tune in this
machine's history when there is one (basis "measured", engine.measure.calibration), else on the device's
figures with the prior acceptance (basis "prior"). `spectune predict` asks for one pair; the Models
page's library for every compatible pair it found, reading each file's header once.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from engine.measure.calibration import measured_pair
from engine.measure.history import History, HistoryError
from engine.models.gguf_inspect import GGUFInspectError, inspect_gguf
from engine.planning.speed_model import DeviceSpeed, ModelCost, Prediction, model_cost, mtp_cost, predict

N_PAST = 512  # tokens in the context when a step is predicted: a prompt and some of its answer


class _Costs:
    """Model costs by file, each header read once."""

    def __init__(self) -> None:
        self._by_path: dict[str, tuple[ModelCost, ModelCost | None]] = {}

    def _read(self, path: Path) -> tuple[ModelCost, ModelCost | None]:
        key = str(path)
        if key not in self._by_path:
            info = inspect_gguf(path)
            self._by_path[key] = (model_cost(info), mtp_cost(info))
        return self._by_path[key]

    def model(self, path: Path) -> ModelCost:
        """The cost of a pass of the model."""
        return self._read(path)[0]

    def mtp(self, path: Path) -> ModelCost | None:
        """The cost of a pass of the model's MTP block (None when it has none)."""
        return self._read(path)[1]


def predict_files(
    target: Path,
    draft: Path | None,
    device: DeviceSpeed | None,
    *,
    n_past: int = N_PAST,
    acceptance: float | None = None,
    workload: str | None = None,
    use_history: bool = True,
    history: History | None = None,
    costs: _Costs | None = None,
) -> Prediction:
    """The prediction for target drafted by draft (None: by the target's own MTP block, when it has one, as
    `spectune run` picks draft-mtp; else the target alone). The pair's tune in the history replaces the
    device's figures unless use_history is False; device may then be None. Raises GGUFInspectError for a
    file that cannot be read, and ValueError when there is neither a tune nor a device."""
    costs = costs or _Costs()
    target_cost = costs.model(Path(target))
    draft_cost = costs.model(Path(draft)) if draft else costs.mtp(Path(target))
    measured = measured_pair(Path(target), Path(draft) if draft else None, history) if use_history else None
    if measured is None and device is None:
        raise ValueError("no device to predict for, and no tune of this pair in the history")
    return predict(
        target_cost,
        draft_cost,
        None if measured is not None else device,
        n_past=n_past,
        acceptance=acceptance,
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
                out[(target, draft)] = predict_files(
                    Path(target), Path(draft), device, workload=workload, history=history, costs=costs
                )
            except (GGUFInspectError, OSError, ValueError) as exc:
                out[(target, draft)] = str(exc)
    finally:
        if own and history is not None:
            history.close()
    return out
