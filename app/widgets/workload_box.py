"""The workload list the Lab and the Tune page share: shipped sets, the page's own entries, and "a file…".

Choosing "a file…" opens a file dialog (a set's JSON, or chat requests as JSONL); the chosen file joins
the list before the entry named ``files_before``, and a cancelled dialog puts back the previous choice.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtWidgets import QComboBox, QFileDialog, QWidget

from app.session import PICK_FILE, WORKLOAD_FILES


class WorkloadBox(QComboBox):
    def __init__(self, files_before: str, title: str, parent: QWidget | None = None):
        super().__init__(parent)
        self.files_before, self.title = files_before, title
        self.previous = 0  # the choice a cancelled file dialog returns to
        self.activated.connect(self._activated)

    def set_sets(self, names: list[str], own: list[str]) -> None:
        """Shipped sets, then the page's own entries and "a file…"; the choice stays when it still exists."""
        current = self.currentText()
        self.clear()
        self.addItems([*names, *own, PICK_FILE])
        idx = self.findText(current)
        self.setCurrentIndex(idx if idx >= 0 and current != PICK_FILE else 0)
        self.previous = self.currentIndex()

    def choose(self, text: str) -> bool:
        """Select an entry that exists (not "a file…"); False when there is none such."""
        idx = self.findText(text)
        if idx >= 0 and text != PICK_FILE:
            self.setCurrentIndex(idx)
            self.previous = idx
        return idx >= 0

    def add_file(self, path: str | Path) -> None:
        """Use a workload file: it joins the list (once) and is chosen."""
        text = str(path)
        idx = self.findText(text)
        if idx < 0:
            idx = self.findText(self.files_before)
            self.insertItem(idx, text)
        self.setCurrentIndex(idx)
        self.previous = idx

    def _activated(self, index: int) -> None:
        if self.itemText(index) != PICK_FILE:
            self.previous = index
            return
        path, _ = QFileDialog.getOpenFileName(self, self.title, str(Path.home()), WORKLOAD_FILES)
        if path:
            self.add_file(path)
        else:
            self.setCurrentIndex(self.previous)
