"""A measurement waits until the app's own computing work is done (app.background.computing_jobs).

On a small machine a speed measured beside the app's own work (a ranking, a scan, the CPU probe) measures the
machine that work loads, not the pair: a demo baseline read 180 tok/s beside the Start page's ranking and 808
after it. The Lab's baseline and quick check, and a tune, ask ``ready`` first; it says what they wait for,
looks again every QUIET_POLL_MS, and after QUIET_WAIT_S lets them measure anyway and says beside what.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from PySide6.QtCore import QObject

from app.widgets.timers import make_timer

QUIET_POLL_MS = 250
QUIET_WAIT_S = 120.0


class QuietWait(QObject):
    """One page's waiting measurement. ``say(text, level)`` shows the page's banner ("info", "warning")."""

    def __init__(self, parent: QObject, say: Callable[[str, str], object]):
        super().__init__(parent)
        self._say = say
        self._timer = make_timer(self, QUIET_POLL_MS, self._poll, single_shot=True)
        self._retry: Callable[[], None] | None = None  # the measurement waiting
        self._since: float | None = None  # when it began to wait

    @property
    def waiting(self) -> bool:
        return self._retry is not None

    def cancel(self) -> bool:
        """Drop the waiting measurement (Esc, Stop); True where one waited."""
        if self._retry is None:
            return False
        self._timer.stop()
        self._retry, self._since = None, None
        return True

    def ready(self, what: str, measure: Callable[[], None]) -> bool:
        """True when nothing else in the app computes now: measure at once. Else False, with a banner saying what
        ``what`` (the baseline, the tune) waits for, and measure() is called again a moment later. After
        QUIET_WAIT_S it is True anyway, and the banner says beside what it measures."""
        from app.background import computing_jobs

        busy = computing_jobs()
        if not busy:
            self._since = None
            return True
        now = time.monotonic()
        self._since = self._since if self._since is not None else now
        waited = now - self._since
        if waited >= QUIET_WAIT_S:
            self._since = None
            self._say(
                f"Measuring the {what} beside {busy[0]}, still running after {waited:.0f} s: it may read slow.",
                "warning",
            )
            return True
        self._retry = measure
        self._timer.start()
        more = f" (and {len(busy) - 1} more)" if len(busy) > 1 else ""
        self._say(
            f"The {what} starts once {busy[0]}{more} is done: beside it this machine would measure slower than it "
            f"is (waited {waited:.0f} s; Esc cancels)",
            "info",
        )
        return False

    def _poll(self) -> None:
        retry, self._retry = self._retry, None
        if retry is not None:
            retry()
            if self._retry is None:  # it measured, or gave up before asking again: the next wait starts afresh
                self._since = None
