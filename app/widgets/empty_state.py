"""What a page shows where its list would be empty: a title, a sentence on what will appear there, and
the buttons that get it there. An empty table says nothing; this says where to go next."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QPushButton, QVBoxLayout, QWidget

from app.widgets.forms import push_button


class EmptyState(QFrame):
    def __init__(self, title: str, text: str, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("EmptyState")
        self.title = QLabel(f"<h3>{title}</h3>")
        self.text = QLabel(text)
        self.text.setWordWrap(True)
        for label in (self.title, self.text):
            label.setAlignment(Qt.AlignmentFlag.AlignHCenter)
            label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.buttons: dict[str, QPushButton] = {}
        self._row = QHBoxLayout()
        self._row.addStretch(1)
        self._row.addStretch(1)
        # a column of paragraph width in the middle: a word-wrapped label given its own width by an
        # alignment flag gets one line's height and cuts the rest
        column = QWidget()
        column.setMaximumWidth(680)
        col = QVBoxLayout(column)
        col.addWidget(self.title)
        col.addWidget(self.text)
        col.addSpacing(8)
        col.addLayout(self._row)
        middle = QHBoxLayout()
        middle.addStretch(1)
        middle.addWidget(column, 4)
        middle.addStretch(1)
        outer = QVBoxLayout(self)
        outer.addStretch(1)
        outer.addLayout(middle)
        outer.addStretch(2)

    def add_action(self, label: str, slot: Callable[[], object], tooltip: str = "") -> QPushButton:
        button = push_button(label, lambda checked=False: slot(), tooltip)
        self._row.insertWidget(self._row.count() - 1, button)
        self.buttons[label] = button
        return button
