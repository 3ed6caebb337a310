"""One place to make the pages' timers: a repaint, a poll, a knob that must rest before it is sent."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QObject, QTimer


def make_timer(parent: QObject, interval_ms: int, slot: Callable[[], object], *, single_shot: bool = False) -> QTimer:
    """A timer owned by parent (so it dies with the page) that calls slot every interval_ms, or once after it
    when single_shot; not started."""
    timer = QTimer(parent)
    timer.setInterval(interval_ms)
    timer.setSingleShot(single_shot)
    timer.timeout.connect(slot)
    return timer
