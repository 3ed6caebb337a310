"""The Tune page's result table: one row per candidate the tuner measured.

Rank 1 is the tuner's pick; the others follow by how far they got through the
successive halving (prompts measured), then by measured tokens/s, which is the
order in which a reader should trust them. The best row is highlighted and
stays highlighted when the user sorts by another column.
"""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QBrush, QColor, QFont
from PySide6.QtWidgets import QAbstractItemView, QHeaderView, QTableWidget, QTableWidgetItem, QWidget

from app.widgets import style
from engine.measure.tuner import Candidate, TuneResult

COLUMNS = ("rank", "setting", "predicted tok/s", "measured tok/s", "error %", "search speedup", "prompts")
# the verdict, not this column, is the tune's claim; the summary names the difference for the best
SEARCH_SPEEDUP_TIP = (
    "measured tokens/s in the search's rounds over the baseline's: the best was picked for being fastest "
    "there, so its figure reads high. The verdict below pairs each prompt with a baseline run beside it."
)
SORT_ROLE = Qt.ItemDataRole.UserRole
BEST_ROLE = Qt.ItemDataRole.UserRole + 1


class _Item(QTableWidgetItem):
    """Sorts by the number in SORT_ROLE (missing values last when ascending), not by its text."""

    def __lt__(self, other: QTableWidgetItem) -> bool:
        a, b = self.data(SORT_ROLE), other.data(SORT_ROLE)
        if isinstance(a, (int, float)) and isinstance(b, (int, float)):
            return a < b
        if isinstance(a, str) and isinstance(b, str):
            return a < b
        return a is not None and b is None


def ranked(result: TuneResult) -> list[Candidate]:
    rest = [c for c in result.candidates if c is not result.best]
    rest.sort(key=lambda c: (-len(c.measured), -c.measured_tps, -(c.predicted_tps or 0.0)))
    return [result.best] + rest


def error_pct(c: Candidate) -> float | None:
    """The cost model's error in percent of the measured tokens/s (positive: it promised too much)."""
    if not c.predicted_tps or not c.measured or not c.measured_tps:
        return None
    return 100.0 * (c.predicted_tps / c.measured_tps - 1.0)


class TuneTable(QTableWidget):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(0, len(COLUMNS), parent)
        self.setHorizontalHeaderLabels(COLUMNS)
        speedup = self.horizontalHeaderItem(COLUMNS.index("search speedup"))
        assert speedup is not None  # the labels just set made it
        speedup.setToolTip(SEARCH_SPEEDUP_TIP)
        self.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.verticalHeader().setVisible(False)
        self.verticalHeader().setDefaultSectionSize(self.fontMetrics().height() + 8)
        header = self.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        header.setStretchLastSection(False)
        self.best_label: str | None = None

    def show_result(self, result: TuneResult) -> None:
        self.setSortingEnabled(False)
        self.setRowCount(0)
        bold = QFont(self.font())
        bold.setBold(True)
        for rank, c in enumerate(ranked(result), start=1):
            err = error_pct(c)
            speedup = c.measured_tps / result.baseline_tps if result.baseline_tps and c.measured else None
            cells = (
                (str(rank), rank),
                (c.label, c.label),
                (f"{c.predicted_tps:.1f}" if c.predicted_tps else "–", c.predicted_tps),
                (f"{c.measured_tps:.1f}" if c.measured else "–", c.measured_tps if c.measured else None),
                (f"{err:+.1f}" if err is not None else "–", err),
                (f"{speedup:.2f}×" if speedup is not None else "–", speedup),
                (str(len(c.measured)), len(c.measured)),
            )
            row = self.rowCount()
            self.insertRow(row)
            for col, (text, key) in enumerate(cells):
                item = _Item(text)
                item.setData(SORT_ROLE, key)
                if col != 1:
                    item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
                if c is result.best:
                    item.setData(BEST_ROLE, True)
                    item.setBackground(QBrush(QColor(style.current().accepted_background)))
                    item.setFont(bold)
                    item.setToolTip("the tuner's pick: the fastest measured setting in the last round")
                self.setItem(row, col, item)
        self.best_label = result.best.label
        self.setSortingEnabled(True)
        self.sortItems(0, Qt.SortOrder.AscendingOrder)

    def best_row(self) -> int | None:
        """The row the best candidate sits in now (sorting moves it)."""
        for row in range(self.rowCount()):
            item = self.item(row, 1)
            assert item is not None  # show_result fills every cell
            if item.data(BEST_ROLE):
                return row
        return None

    def clear_rows(self) -> None:
        self.setRowCount(0)
        self.best_label = None
