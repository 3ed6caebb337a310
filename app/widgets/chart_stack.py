"""Charts that show a sentence until there is something to draw.

Bare axes from 0 to 1 tell a newcomer nothing; the line in their place says what will appear there
and what makes it appear. Every chart widget of the app (the Lab's, the Tune page's, the Serve page's)
puts its plots in one of these, so the three behave alike.
"""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel, QStackedWidget, QWidget

from app.widgets.style import NOTE_GREY


class ChartStack(QStackedWidget):
    """``placeholder`` (a grey sentence) until ``show_plots()``; ``show_placeholder()`` goes back."""

    def __init__(self, plots: QWidget, text: str, parent: QWidget | None = None):
        super().__init__(parent)
        self.plots = plots
        self.placeholder = QLabel(text)
        self.placeholder.setWordWrap(True)
        self.placeholder.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.placeholder.setStyleSheet(f"color: {NOTE_GREY}; padding: 24px")
        self.addWidget(self.placeholder)
        self.addWidget(plots)

    @property
    def drawn(self) -> bool:
        """Whether the plots show, rather than the sentence that says what they will show."""
        return self.currentWidget() is self.plots

    def show_plots(self) -> None:
        if not self.drawn:
            self.setCurrentWidget(self.plots)

    def show_placeholder(self) -> None:
        self.setCurrentWidget(self.placeholder)
