"""The History page: the runs of this session with their summaries. (Runs kept
across sessions in SQLite, comparison and CSV export are issue #6.)"""

from __future__ import annotations

import time

from PySide6.QtWidgets import QLabel, QTableWidget, QTableWidgetItem, QVBoxLayout, QWidget

COLUMNS = ("time", "method", "K", "temp", "tokens", "tokens/s", "acceptance", "mean length", "result")


class HistoryPage(QWidget):
    def __init__(self, lab, parent: QWidget | None = None):
        super().__init__(parent)
        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setHorizontalHeaderLabels(COLUMNS)
        self.table.setSortingEnabled(True)
        col = QVBoxLayout(self)
        col.addWidget(QLabel("<h3>Runs in this session</h3>"))
        col.addWidget(self.table)
        lab.runFinished.connect(self.add_run)

    def add_run(self, ev: dict) -> None:
        s, spec, sampling = ev.get("summary", {}), ev.get("spec", {}), ev.get("sampling", {})
        row = self.table.rowCount()
        self.table.setSortingEnabled(False)
        self.table.insertRow(row)
        values = (time.strftime("%H:%M:%S"), spec.get("spec_type", "?"), spec.get("draft_n_max", ""),
                  sampling.get("temp", ""), s.get("tokens_generated", 0), round(s.get("tokens_per_s", 0.0), 1),
                  round(s.get("acceptance_rate", 0.0), 3), round(s.get("mean_accepted_length", 1.0), 2),
                  ev.get("event", ""))
        for i, value in enumerate(values):
            item = QTableWidgetItem()
            item.setData(0, value)
            self.table.setItem(row, i, item)
        self.table.setSortingEnabled(True)
