"""The History page: runs kept in the SQLite history (engine.measure.history), newest
first; a Lab run (Start to Stop) is one row, written as each of its generations
ends (their summaries added up, the setting in force at the last one), with the
model fingerprints. The table shows the newest ``limit``
runs (older rows leave it as new ones come, so a session of hours keeps its
memory flat); all of them stay in the database. Export to CSV from here or with
``spectune history export --csv FILE``."""

from __future__ import annotations

import time

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QStackedWidget,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.widgets.empty_state import EmptyState
from app.widgets.forms import push_button
from engine.core.settings import SamplingSettings, SpecSettings, from_dict
from engine.core.stats import combine_summaries
from engine.measure.history import History, HistoryError, record_summary

CREATED_ROLE = Qt.ItemDataRole.UserRole  # the time column's item keeps the exact timestamp for trimming
COLUMNS = (
    "id",
    "time",
    "kind",
    "method",
    "K",
    "temp",
    "generations",
    "tokens",
    "tokens/s",
    "acceptance",
    "mean length",
    "target",
)


class HistoryPage(QWidget):
    labRequested = Signal()  # the empty page's button: show the Lab

    def __init__(self, lab, parent: QWidget | None = None, limit: int = 500):
        super().__init__(parent)
        self.lab = lab
        self.limit = limit
        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setHorizontalHeaderLabels(COLUMNS)
        self.table.setSortingEnabled(True)
        self.status = QLabel()
        export = push_button("Export CSV…", self.export_csv)
        col = QVBoxLayout(self)
        col.addWidget(QLabel("<h3>History</h3>"))
        self.empty = EmptyState(
            "No runs yet",
            "Every Lab run, auto-tune and validation against llama-server lands here with its settings, "
            "its tokens/s and its acceptance, kept between sessions (and exportable as CSV). "
            "Start a run on the Lab page to make the first one.",
        )
        self.empty.add_action("Open the Lab", self.labRequested.emit)
        self.table_or_empty = QStackedWidget()
        self.table_or_empty.addWidget(self.table)
        self.table_or_empty.addWidget(self.empty)
        col.addWidget(self.table_or_empty, 1)
        row = QHBoxLayout()
        row.addWidget(self.status, 1)
        row.addWidget(export)
        col.addLayout(row)
        # the Lab run whose generations are arriving: its number, its entry and row, what it has summed so far
        self._open: dict | None = None
        lab.runFinished.connect(self.add_run)
        self.reload()

    def reload(self) -> None:
        try:
            with History() as h:
                entries = h.entries(limit=self.limit)
        except HistoryError as exc:
            self.status.setText(f"the history cannot be read: {exc}")
            return
        self.table.setSortingEnabled(False)
        self.table.setRowCount(0)
        for e in reversed(entries):
            self._append(
                e.id,
                e.created_at,
                e.kind,
                e.settings.get("spec", {}),
                e.settings.get("sampling", {}),
                e.results,
                e.target,
            )
        self.table.setSortingEnabled(True)
        self._shown_note()

    def _shown_note(self) -> None:
        n = self.table.rowCount()
        self.table_or_empty.setCurrentWidget(self.table if n else self.empty)
        self.status.setText(
            f"{n} run{'s' if n != 1 else ''} shown (click a header to sort)"
            + (" (the newest only: export CSV for all)" if n >= self.limit else "")
        )

    def add_run(self, ev: dict) -> None:
        """Store a finished Lab generation and show it: the first of a Lab run as a new row, the next ones added
        into that row (issue 51: one row per prompt buried 247 rows deep). A failing database costs the row,
        not the run."""
        summary = ev.get("summary", {})
        if not summary.get("tokens_generated"):
            # Stop pressed just as the Lab moved on to its next prompt: a run cancelled before its
            # first token measured nothing, and an empty row would only bury the real ones
            return
        run = ev.get("lab_run")
        same = self._open is not None and run is not None and self._open["run"] == run
        if not same:
            self._open = {"run": run, "entry": None, "created": time.time(), "summaries": [], "changes": []}
        assert self._open is not None
        opened = self._open
        opened["summaries"].append(summary)
        opened["changes"] += ev.get("settings_changed", [])
        total = summary if len(opened["summaries"]) == 1 else combine_summaries(opened["summaries"])
        results = {**total, "event": ev.get("event"), "settings_changed": list(opened["changes"])}
        load = self.lab.loaded_settings
        if load is not None:
            try:
                opened["entry"] = record_summary(
                    "lab",
                    load,
                    from_dict(SpecSettings, ev.get("spec", {})),
                    from_dict(SamplingSettings, ev.get("sampling", {})),
                    results,
                    entry_id=opened["entry"],
                )
            except (HistoryError, OSError, ValueError) as exc:
                self.status.setText(f"not saved to the history: {exc}")
        self.table.setSortingEnabled(False)
        row = self._row_created_at(opened["created"]) if same else None
        if row is None:
            row = self.table.rowCount()
            self.table.insertRow(row)
        self._fill(
            row,
            opened["entry"],
            opened["created"],
            "lab",
            ev.get("spec", {}),
            ev.get("sampling", {}),
            results,
            str(load.target) if load else "",
        )
        self._trim()
        self.table.setSortingEnabled(True)
        self.table_or_empty.setCurrentWidget(self.table)
        self._shown_note()  # the count follows every row added (it once said 0 over 247)

    def _row_created_at(self, created: float) -> int | None:
        """The row of the run created at this time, wherever a sort has put it (None: trimmed away)."""
        for r in range(self.table.rowCount()):
            if self._created_of(r) == float(created):
                return r
        return None

    def _created_of(self, row: int) -> float:
        """The exact timestamp the row's time cell keeps (every row has one: _fill)."""
        item = self.table.item(row, 1)
        assert item is not None
        return item.data(CREATED_ROLE)

    def _trim(self) -> None:
        """Drop the oldest rows beyond the limit, wherever a sort has put them."""
        while self.table.rowCount() > self.limit:
            oldest = min(range(self.table.rowCount()), key=self._created_of)
            self.table.removeRow(oldest)

    def _append(self, entry_id, created, kind, spec: dict, sampling: dict, results: dict, target) -> None:
        row = self.table.rowCount()
        self.table.insertRow(row)
        self._fill(row, entry_id, created, kind, spec, sampling, results, target)

    def _fill(self, row: int, entry_id, created, kind, spec: dict, sampling: dict, results: dict, target) -> None:
        values = (
            entry_id if entry_id is not None else "",
            time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(created)),
            kind,
            spec.get("spec_type", "?") + (" (changed during the run)" if results.get("settings_changed") else ""),
            spec.get("draft_n_max", ""),
            sampling.get("temp", ""),
            _number(results.get("generations", 1 if results.get("tokens_generated") else None)),
            _number(results.get("tokens_generated")),
            _number(results.get("tokens_per_s"), 1),
            _number(results.get("acceptance_rate"), 3),
            _number(results.get("mean_accepted_length"), 2),
            (target or "").rsplit("/", 1)[-1],
        )
        for i, value in enumerate(values):
            item = QTableWidgetItem()
            item.setData(0, value)
            if i == 1:
                item.setData(CREATED_ROLE, float(created))
            self.table.setItem(row, i, item)

    def export_csv(self) -> None:
        path, _ = QFileDialog.getSaveFileName(self, "Export history", "spectune-history.csv", "CSV (*.csv)")
        if path:
            with History() as h:
                n = h.export_csv(path)
            self.status.setText(f"wrote {n} runs to {path}")


def _number(value, digits: int | None = None):
    """A result the entry has, rounded; "–" for one it lacks (a tune keeps no token count), not a fake 0."""
    if value is None:
        return "–"
    return round(value, digits) if digits is not None else value
