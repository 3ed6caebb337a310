"""A message strip at the top of a page, with an optional action button (restart after a crash,
load anyway) and a close button."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QPushButton, QWidget

from app.widgets import style
from app.widgets.forms import push_button


class Banner(QFrame):
    actionClicked = Signal()

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.label = QLabel()
        self.label.setWordWrap(True)
        self.label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.button = push_button("", self.actionClicked)
        close = QPushButton("✕")
        close.setFixedWidth(28)
        close.setToolTip("dismiss")
        close.clicked.connect(self.hide)
        row = QHBoxLayout(self)
        row.addWidget(self.label, 1)
        row.addWidget(self.button)
        row.addWidget(close)
        self.level = "info"  # the level of the message shown last
        self.hide()

    def show_message(self, text: str, level: str = "error", action: str | None = None) -> None:
        """level: error | warning | info (the background says which)."""
        self.level = level
        colours = style.current()  # light or dark, as the system is now
        self.setStyleSheet(
            f"Banner {{ background: {colours.banner_backgrounds[level]}; border: 1px solid {colours.border}; }}"
        )
        self.label.setText(text)
        self.button.setVisible(action is not None)
        self.button.setText(action or "")
        self.show()
