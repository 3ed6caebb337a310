"""What a live view shows about a running session, kept in fixed-size rings.

Data intake (``add_cycle``, called once per cycle event) is separate from
painting (``snapshot``, called by a timer at the display's rate), as in friture
and pyqtgraph's own examples: the GUI never redraws per event. Pure Python and
numpy, so the CLI and the tests can use it without Qt.

Terms follow engine.core.stats: acceptance rate = accepted / drafted, mean accepted
length = 1 + accepted / steps, by-position and histogram over steps.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from engine.core.stats import RunStats
from engine.runtime.events import CycleEvent

FIELDS = (
    "t",
    "tps",
    "drafted",
    "accepted",
    "k",
    "draft_ms",
    "verify_ms",
    "other_ms",
    "cycle_ms",
    "rolling_acceptance",
    "cumulative_acceptance",
    "mean_length",
    "length_share",
    "replayed",
)
# mean_length and length_share are rolling, over the same steps as rolling_acceptance: a cumulative
# mean drawn against the current K would leave the chart when K moves. length_share is the steps'
# accepted length over the longest each could have been (drafted + 1, the bonus token counted).


@dataclass
class Marker:
    t: float  # seconds since the session started
    cycle: int
    label: str


@dataclass
class Snapshot:
    """Copies of the visible data, safe to hand to a painter."""

    series: dict[str, np.ndarray]
    accepted_by_position: np.ndarray  # the whole run (llama-server's definition over all its steps)
    drafted_by_position: np.ndarray
    length_histogram: np.ndarray
    markers: list[Marker]
    baseline_tps: float | None
    totals: dict[str, float]
    # the same three counted since the last knob change (the whole run when none moved): what the
    # current setting does; after K 4 -> 8, positions 4-7 are not divided by steps that never drafted them
    current_accepted_by_position: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    current_drafted_by_position: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    current_length_histogram: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    current_since: str | None = None  # the label of the knob change they count from; None: the start


class Ring:
    """A fixed-capacity ring of float rows; ``view()`` returns the rows in order."""

    def __init__(self, capacity: int, width: int):
        self._data = np.zeros((capacity, width), dtype=np.float64)
        self._n = 0
        self._capacity = capacity

    def push(self, row: list[float]) -> None:
        self._data[self._n % self._capacity] = row
        self._n += 1

    def __len__(self) -> int:
        return min(self._n, self._capacity)

    def oldest(self, column: int) -> float:
        """A column of the oldest row kept (the ring is not empty)."""
        return float(self._data[self._n % self._capacity if self._n > self._capacity else 0, column])

    def view(self) -> np.ndarray:
        if self._n <= self._capacity:
            return self._data[: self._n].copy()
        start = self._n % self._capacity
        return np.concatenate([self._data[start:], self._data[:start]])


@dataclass
class LiveSession:
    capacity: int = 2048
    rolling_window: int = 32
    clock: Callable[[], float] = time.monotonic
    ring: Ring = field(init=False)
    markers: list[Marker] = field(default_factory=list)
    baseline_tps: float | None = None

    def __post_init__(self) -> None:
        self.ring = Ring(self.capacity, len(FIELDS))
        self.reset_totals()
        self._t0 = self.clock()
        self._recent: list[tuple[int, int]] = []
        self._pending_text: list[tuple[str, bool]] = []

    def reset_totals(self) -> None:
        self.stats = RunStats()  # the one counter (engine.core.stats); the text is shown elsewhere
        self.current = RunStats()  # the same, since the last knob change (mark)
        self.current_since: str | None = None

    # the totals the Lab and the tests read
    cycles = property(lambda self: self.stats.cycles)
    steps = property(lambda self: self.stats.steps)
    drafted = property(lambda self: self.stats.drafted)
    accepted = property(lambda self: self.stats.accepted)
    tokens = property(lambda self: self.stats.tokens_generated)
    wall_ms = property(lambda self: self.stats.wall_ms)

    def now(self) -> float:
        return self.clock() - self._t0

    # -- intake -----------------------------------------------------------
    def add_cycle(self, ev: CycleEvent) -> None:
        pieces = ev.get("pieces") or [ev.get("text", "")]
        if ev.get("prompt"):
            self.stats.add_event(ev, keep_text=False)
            self.current.add_event(ev, keep_text=False)
            self._pending_text.extend((p, False) for p in pieces)
            return
        drafted, accepted = int(ev["drafted"]), int(ev["accepted"])
        emitted, wall = int(ev["emitted"]), float(ev.get("wall_ms") or ev.get("cycle_ms") or 0.0)
        self.stats.add_event(ev, keep_text=False)
        self.current.add_event(ev, keep_text=False)
        if drafted:
            self._recent.append((drafted, accepted))
            if len(self._recent) > self.rolling_window:
                del self._recent[0]
        rd = sum(d for d, _ in self._recent)
        ra = sum(a for _, a in self._recent)
        n = len(self._recent)
        self.ring.push(
            [
                self.now(),
                emitted * 1000.0 / wall if wall > 0 else 0.0,
                drafted,
                accepted,
                ev.get("k", 0),
                ev.get("draft_ms", 0.0),
                ev.get("verify_ms", 0.0),
                ev.get("other_ms", 0.0),
                ev.get("cycle_ms", 0.0),
                ra / rd if rd else np.nan,
                self.stats.acceptance_rate if self.stats.drafted else np.nan,
                1.0 + ra / n if n else np.nan,
                (ra + n) / (rd + n) if n else np.nan,
                1.0 if ev.get("replayed") else 0.0,
            ]
        )
        if self.markers and len(self.ring) == self.capacity:
            # the ring has dropped the cycles older markers pointed at: drop those markers too, so an
            # hours-long session with a knob moved every few seconds keeps a bounded list
            oldest = self.ring.oldest(0)
            if self.markers[0].t < oldest:
                self.markers = [m for m in self.markers if m.t >= oldest]
        # the first `accepted` tokens of a speculative cycle came from the draft
        for i, piece in enumerate(pieces):
            self._pending_text.append((piece, drafted > 0 and i < accepted))

    def mark(self, label: str, cycle: int = -1) -> None:
        """A knob moved: a labelled line on the time charts, and the per-setting counts start again."""
        self.markers.append(Marker(self.now(), cycle, label))
        self.current, self.current_since = RunStats(), label

    def take_text(self) -> list[tuple[str, bool]]:
        """Text pieces since the last call, each with True when it came from an accepted draft."""
        out, self._pending_text = self._pending_text, []
        return out

    # -- painting ---------------------------------------------------------
    @property
    def tokens_per_s(self) -> float:
        return self.stats.tokens_per_s

    def snapshot(self) -> Snapshot:
        rows = self.ring.view()
        series = {name: rows[:, i] for i, name in enumerate(FIELDS)}
        s = self.stats
        totals = {
            "tokens": s.tokens_generated,
            "drafted": s.drafted,
            "accepted": s.accepted,
            "steps": s.steps,
            "acceptance_rate": s.acceptance_rate,
            "mean_accepted_length": s.mean_accepted_length,
            "tokens_per_s": s.tokens_per_s,
        }
        return Snapshot(
            series,
            np.array(s.accepted_by_position, np.int64),
            np.array(s.drafted_by_position, np.int64),
            np.array(s.accepted_length_histogram, np.int64),
            list(self.markers),
            self.baseline_tps,
            totals,
            np.array(self.current.accepted_by_position, np.int64),
            np.array(self.current.drafted_by_position, np.int64),
            np.array(self.current.accepted_length_histogram, np.int64),
            self.current_since,
        )
