"""What this machine has measured of a pair: the newest tune of it in the history, for the speed model.

The history is this machine's own (engine.measure.history), so a tune found there is a measurement of
this pair here: its forward times by batch size and acceptance by position replace the speed model's
priors (engine.planning.speed.speed_model, basis "measured"). A tune whose forward times no undisturbed machine
gives (plausible_verify_curve) is passed over for an older one, or the priors.
"""

from __future__ import annotations

from pathlib import Path
from typing import cast

from engine.core.tune_record import TuneRecord
from engine.measure.history import History, HistoryError
from engine.planning.speed.speed_model import Measured, measured_from_tune, plausible_verify_curve


def measured_pair(target: Path, draft: Path | None, history: History | None = None) -> Measured | None:
    """The newest tune of exactly this target and draft, or None (never tuned here, or no history)."""
    want = (str(Path(target).resolve()), str(Path(draft).resolve()) if draft else None)
    try:
        h = history or History()
        try:
            for entry in h.entries(kind="tune", limit=500):
                have = (_resolved(entry.target), _resolved(entry.draft))
                if have == want and entry.results.get("verify_ms"):
                    # the history keeps TuneResult.to_dict as JSON: the same record, its batch sizes as text
                    measured = measured_from_tune(cast(TuneRecord, entry.results))
                    if not plausible_verify_curve(measured.verify_ms):
                        continue  # a disturbed measurement
                    measured.source = f"tune #{entry.id} in the history"
                    return measured
        finally:
            if history is None:
                h.close()
    except (HistoryError, OSError):
        return None
    return None


def _resolved(path: str | None) -> str | None:
    return str(Path(path).resolve()) if path else None
