"""A strip at the top of a page that works on the session's model pair (Tune, Export), shown while there is
none: it says so and offers the two ways to get one, the bundled demo pair (one click, offline) or the
Models page. It hides itself as soon as the session has a target file."""

from __future__ import annotations

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QWidget

from app.session import LabSession
from app.widgets import style
from app.widgets.forms import push_button


class NeedsPairBar(QFrame):
    chooseRequested = Signal()  # the user wants to pick a pair: the window shows the Models page

    def __init__(self, session: LabSession, what: str, parent: QWidget | None = None):
        """what: what the page does with the pair ("tunes", "exports"), for the sentence."""
        super().__init__(parent)
        self.setObjectName("NeedsPairBar")
        self.session = session
        self.label = QLabel(f"This page {what} the Lab's model pair, and none is chosen yet.")
        self.label.setWordWrap(True)
        self.demo_button = push_button(
            "Use the demo pair",
            session.use_demo_pair,
            "the small model pair SpecTune ships: works offline, loads in seconds",
        )
        self.choose_button = push_button(
            "Choose models…", self.chooseRequested, "the Models page: files on this machine, downloads, recommendations"
        )
        row = QHBoxLayout(self)
        row.addWidget(self.label, 1)
        row.addWidget(self.demo_button)
        row.addWidget(self.choose_button)
        self.restyle()
        session.pairChanged.connect(self.refresh)
        session.loadChanged.connect(self.refresh)  # restore_state fills the pair without pairChanged
        self.refresh()

    def restyle(self) -> None:
        colours = style.current()
        self.setStyleSheet(
            f"#NeedsPairBar {{ background: {colours.banner_backgrounds['info']}; border: 1px solid {colours.border}; }}"
        )

    def refresh(self) -> None:
        try:
            target = self.session.target()
        except RuntimeError:  # the Lab has not bound the session yet
            target = None
        self.setVisible(target is None or not target.is_file())
