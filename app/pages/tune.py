"""The Tune page: its place in the window. Auto-tuning (cost model, successive
halving, best setting with its measured speedup) is issue #6; until it lands
this page says so plainly instead of pretending."""

from __future__ import annotations

from PySide6.QtWidgets import QLabel, QVBoxLayout, QWidget


class TunePage(QWidget):
    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        label = QLabel("<h3>Auto-tune</h3><p>Not built yet. The auto-tuner (a cost model from measured verify "
                       "times, candidates confirmed by real runs) will live here.</p><p>Until then, use the Lab "
                       "page: move K and the method while a run goes and compare against the Baseline.</p>")
        label.setWordWrap(True)
        col = QVBoxLayout(self)
        col.addWidget(label)
        col.addStretch(1)
