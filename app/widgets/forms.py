"""Form fields the pages share: buttons, number boxes, a GGUF file picker, several fields on one row."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import Signal, SignalInstance
from PySide6.QtWidgets import QDoubleSpinBox, QFileDialog, QHBoxLayout, QLineEdit, QPushButton, QSpinBox, QWidget


def push_button(
    text: str, on_click: Callable[..., object] | SignalInstance | None = None, tip: str = "", *, enabled: bool = True
) -> QPushButton:
    """A button with what it does on a click (a method, or a signal to pass the click on), its tooltip and
    whether it starts enabled, in one call."""
    w = QPushButton(text)
    if tip:
        w.setToolTip(tip)
    w.setEnabled(enabled)
    if on_click is not None:
        w.clicked.connect(on_click)
    return w


def spin_box(lo: int, hi: int, value: int, tip: str = "", *, suffix: str = "", track_keys: bool = True) -> QSpinBox:
    """track_keys=False: the value changes (and signals) when typing ends, not per keystroke; for a knob
    whose every change is acted on (the Lab sends it to a running engine)."""
    w = QSpinBox()
    w.setRange(lo, hi)
    w.setValue(value)
    w.setToolTip(tip)
    w.setSuffix(suffix)
    w.setKeyboardTracking(track_keys)
    return w


def double_spin_box(
    lo: float, hi: float, value: float, step: float, tip: str = "", *, track_keys: bool = True
) -> QDoubleSpinBox:
    w = QDoubleSpinBox()
    w.setRange(lo, hi)
    w.setDecimals(2)
    w.setSingleStep(step)
    w.setValue(value)
    w.setToolTip(tip)
    w.setKeyboardTracking(track_keys)
    return w


def side_by_side(*widgets: QWidget) -> QWidget:
    """Several fields as one form row (ngram-mod's min and max)."""
    w = QWidget()
    row = QHBoxLayout(w)
    row.setContentsMargins(0, 0, 0, 0)
    for widget in widgets:
        row.addWidget(widget)
    return w


class PathPicker(QWidget):
    """A file path, typed or chosen with "…"; ``changed`` when typing ends or a file is chosen."""

    changed = Signal()

    def __init__(self, placeholder: str, parent: QWidget | None = None):
        super().__init__(parent)
        self.edit = QLineEdit()
        self.edit.setPlaceholderText(placeholder)
        browse = QPushButton("…")
        browse.setFixedWidth(28)
        browse.setToolTip("choose a GGUF file")
        browse.clicked.connect(self._browse)
        row = QHBoxLayout(self)
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(self.edit)
        row.addWidget(browse)
        self.edit.editingFinished.connect(self.changed)

    def _browse(self) -> None:
        start = self.edit.text() or str(Path.home())
        path, _ = QFileDialog.getOpenFileName(self, "Choose a GGUF model", start, "GGUF models (*.gguf)")
        if path:
            self.set_path(path)

    def set_path(self, path: str | Path | None, notify: bool = True) -> None:
        """notify=False: the caller signals once for several pickers (a target and its draft)."""
        self.edit.setText(str(path) if path else "")
        if notify:
            self.changed.emit()

    def path(self) -> Path | None:
        text = self.edit.text().strip()
        return Path(text) if text else None
