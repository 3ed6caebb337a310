"""The Models page's library: the GGUF files already on this machine (engine.models.library.scan over
the Hugging Face cache, LM Studio, llama.cpp's cache, Ollama, the user's folders and the demo pair
SpecTune ships), the pairs they make, and buttons that hand a file or a pair to the session
(app.session), which the Lab shows. Draft heads say what they are: an EAGLE-3 or DFlash draft file,
a model with an MTP head (engine.models.draft_heads).

The scan runs in a background thread: a first scan reads one header per file and a large
library on a slow disk takes seconds. Later scans reuse the engine's scan cache.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QColor
from PySide6.QtWidgets import (
    QAbstractItemView,
    QFileDialog,
    QHBoxLayout,
    QHeaderView,
    QInputDialog,
    QLabel,
    QSplitter,
    QStackedWidget,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.background import BackgroundJob
from app.session import LabSession
from app.widgets.empty_state import EmptyState
from app.widgets.forms import push_button
from app.widgets.style import ERROR, error_text, ok_text
from engine.core.units import format_bytes
from engine.models.draft_heads import has_mtp_head, is_head

if TYPE_CHECKING:
    from engine.models.library import Library  # for annotations: the page imports the module where it uses it

COLUMNS = ("name", "source", "size", "architecture / family", "quant", "path")
ERROR_COLOUR = QColor(ERROR)


class _SortItem(QTableWidgetItem):
    """Sorts by a key kept beside the text (bytes for the size column, not "1.2 GiB" as a string)."""

    def __init__(self, text: str, key):
        super().__init__(text)
        self.key = key

    def __lt__(self, other: QTableWidgetItem) -> bool:
        if isinstance(other, _SortItem):
            return self.key < other.key
        return super().__lt__(other)


def _family_text(m) -> str:
    parts = [m.architecture or "?"]
    if m.family and m.family != m.architecture:
        parts.append(m.family)
    if m.size_label:
        parts.append(m.size_label)
    if m.kind:
        parts.append(m.kind)
    return " · ".join(parts)


class LibraryPanel(QWidget):
    scanned = Signal(object)  # engine.models.library.Library
    downloadRequested = Signal()  # the empty library's "Download a preset": the Models page shows its Downloads

    def __init__(self, session: LabSession, sources=None, parent: QWidget | None = None):
        """sources: engine.models.library.Source list to scan instead of the usual places (None: those)."""
        super().__init__(parent)
        self.session = session
        self.sources = sources
        self.library: Library | None = None
        self.job: BackgroundJob | None = None
        self.refusal_job: BackgroundJob | None = None  # why two selected files make no pair
        self._again = False

        top = self._scan_row()
        self._build_files_table()
        actions = self._file_actions_row()
        self._build_pairs_table()
        self._build_empty_state()
        self._lay_out(top, actions)
        self._selection_changed()
        self.pair_button.setEnabled(False)
        self._update_remove_button()

    # -- the panel's parts ----------------------------------------------------------------------
    def _scan_row(self) -> QHBoxLayout:
        """What the scan found (or is doing), Rescan, and the folders of the user's own to look in."""
        self.status = QLabel("not scanned yet")
        self.status.setWordWrap(True)
        self.rescan_button = push_button("Rescan", self.rescan)
        add = push_button(
            "Add folder…",
            self._ask_add_folder,
            "also look for GGUF files in a folder of your own (kept between sessions)",
        )
        self.remove_button = push_button("Remove folder…", self._ask_remove_folder)
        top = QHBoxLayout()
        top.addWidget(self.status, 1)
        for b in (self.rescan_button, add, self.remove_button):
            top.addWidget(b)
        return top

    def _build_files_table(self) -> None:
        """The files found, a row each, in the scan's order until a header is clicked."""
        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setHorizontalHeaderLabels(COLUMNS)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.verticalHeader().setVisible(False)
        self.table.setWordWrap(False)  # one line a file; the tooltips hold the rest
        self.table.setTextElideMode(Qt.TextElideMode.ElideMiddle)
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.Interactive)
        header.setStretchLastSection(True)
        header.setSortIndicator(-1, Qt.SortOrder.AscendingOrder)  # the scan's order until a header is clicked
        header.setSortIndicatorShown(True)
        self.table.itemSelectionChanged.connect(self._selection_changed)
        self.table.itemDoubleClicked.connect(lambda item: self.use_selected())

    def _file_actions_row(self) -> QHBoxLayout:
        """What is selected, and the buttons that hand it to the Lab as the target, the pair or the draft."""
        self.use_button = push_button(
            "Use in Lab",
            self.use_selected,
            (
                "one file: the Lab's target (an EAGLE-3 or DFlash draft file: the Lab's draft); "
                "two files: the larger one as target, the smaller as draft"
            ),
        )
        self.draft_button = push_button("Use as draft", self.use_selected_as_draft)
        self.selection_label = QLabel("select a file (or two: target and draft)")
        self.selection_label.setWordWrap(True)
        actions = QHBoxLayout()
        actions.addWidget(self.selection_label, 1)
        actions.addWidget(self.use_button)
        actions.addWidget(self.draft_button)
        return actions

    def _build_pairs_table(self) -> None:
        """The pairs llama.cpp accepts among the files, each with its predicted speed here, and its button."""
        self.pairs = QTableWidget(0, 3)
        self.pairs.setHorizontalHeaderLabels(("target", "draft (llama.cpp accepts the pair)", "predicted here"))
        predicted = self.pairs.horizontalHeaderItem(2)
        assert predicted is not None  # the labels just set made it
        predicted.setToolTip(
            "tokens/s the speed model predicts for the pair on this machine, and the speedup at the best K: from "
            "the pair's tune when it has one, else from this machine's measured speed and the prior acceptance"
        )
        self.pairs.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.pairs.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.pairs.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.pairs.verticalHeader().setVisible(False)
        self.pairs.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.Stretch)
        # one line a cell (the prediction's whole sentence is in its tooltip), and room for three pairs at least:
        # issue 51 saw one row and a half at 1280x720
        self.pairs.setWordWrap(False)
        self.pairs.setTextElideMode(Qt.TextElideMode.ElideRight)
        rows = self.pairs.verticalHeader().defaultSectionSize()
        self.pairs.setMinimumHeight(self.pairs.horizontalHeader().sizeHint().height() + 3 * rows + 4)
        self.pairs.itemDoubleClicked.connect(lambda item: self.use_selected_pair())
        self.pair_button = push_button("Use this pair in the Lab", self.use_selected_pair)
        self.pairs.itemSelectionChanged.connect(
            lambda: self.pair_button.setEnabled(bool(self.pairs.selectionModel().selectedRows()))
        )
        self.pairs_label = QLabel("compatible pairs")

    def _build_empty_state(self) -> None:
        """The files table, or in its place while there are no files, the ways to fill it."""
        self.empty = EmptyState(
            "No GGUF models found on this machine",
            "SpecTune looked in the Hugging Face cache, LM Studio, llama.cpp's cache and Ollama. "
            "Add a folder that holds .gguf files, download a recommended pair, or start with the small "
            "demo pair that ships with SpecTune (it works offline).",
        )
        self.empty.add_action("Add folder…", self._ask_add_folder, "look for GGUF files in a folder of your own")
        self.empty.add_action("Download a preset", self.downloadRequested.emit, "the Downloads tab: presets that fit")
        self.empty.add_action("Use the demo pair", self.session.use_demo_pair, "the bundled pair, into the Lab")
        self.table_or_empty = QStackedWidget()
        self.table_or_empty.addWidget(self.table)
        self.table_or_empty.addWidget(self.empty)

    def _lay_out(self, top: QHBoxLayout, actions: QHBoxLayout) -> None:
        """Files above, pairs below, split so the files get the most room."""
        upper = QWidget()
        u_col = QVBoxLayout(upper)
        u_col.setContentsMargins(0, 0, 0, 0)
        u_col.addLayout(top)
        u_col.addWidget(self.table_or_empty, 1)
        u_col.addLayout(actions)
        lower = QWidget()
        l_col = QVBoxLayout(lower)
        l_col.setContentsMargins(0, 0, 0, 0)
        l_col.addWidget(self.pairs_label)
        l_col.addWidget(self.pairs, 1)
        l_row = QHBoxLayout()
        l_row.addStretch(1)
        l_row.addWidget(self.pair_button)
        l_col.addLayout(l_row)
        split = QSplitter(Qt.Orientation.Vertical)
        split.addWidget(upper)
        split.addWidget(lower)
        split.setStretchFactor(0, 1)
        split.setStretchFactor(1, 1)
        split.setChildrenCollapsible(False)
        col = QVBoxLayout(self)
        col.setContentsMargins(0, 0, 0, 0)
        col.addWidget(split)

    # -- the scan ---------------------------------------------------------------------------
    def rescan(self) -> None:
        if self.job is not None and self.job.running:
            self._again = True  # files changed while scanning: look once more when it ends
            return
        from engine.models.library import scan

        sources = self.sources
        self.status.setText("scanning…")
        self.rescan_button.setEnabled(False)
        self.job = BackgroundJob(
            "models-library-scan",
            lambda report: scan(sources, on_progress=lambda done, total, path: report((done, total, path))),
            self,
            what="the Models page scanning for GGUF files",
        )
        self.job.on(done=self._scanned, failed=self._scan_failed, progress=self._scan_progress).start()

    @property
    def scanning(self) -> bool:
        return self.job is not None and self.job.running

    def _scan_progress(self, value) -> None:
        done, total, path = value
        self.status.setText(f"scanning {done + 1} of {total}: {Path(path).name}")

    def _scan_failed(self, exc: BaseException) -> None:
        self.rescan_button.setEnabled(True)
        self.status.setText(f"{error_text('the scan failed:')} {exc}")
        self._maybe_again()

    def _scanned(self, lib) -> None:
        self.rescan_button.setEnabled(True)
        self.library = lib
        self._fill(lib)
        self.table_or_empty.setCurrentWidget(self.table if lib.models else self.empty)
        found = [s for s in lib.sources if s["exists"]]
        broken = sum(1 for m in lib.models if m.error)
        where = ", ".join(f"{s['kind']} {s['files']}" for s in found) or "none of the usual places exist"
        only_shipped = bool(lib.models) and all(m.source == "bundled" for m in lib.models)
        self.status.setText(
            f"{len(lib.models)} file{'s' if len(lib.models) != 1 else ''}"
            + (f" ({broken} unreadable)" if broken else "")
            + f" · {where}"
            + (" · none of your own yet: Add folder… or download a preset" if only_shipped else "")
        )
        self.status.setToolTip(
            "\n".join(f"{s['kind']}: {s['path']} ({s['files'] if s['exists'] else 'not found'})" for s in lib.sources)
        )
        self._update_remove_button()
        self.scanned.emit(lib)
        self._maybe_again()

    def _maybe_again(self) -> None:
        if self._again:
            self._again = False
            self.rescan()

    def _fill(self, lib) -> None:
        self.table.setSortingEnabled(False)
        self.table.clearSelection()
        self.table.setRowCount(len(lib.models))
        for r, m in enumerate(lib.models):
            name = m.name + (f" (also {', '.join(m.aliases)})" if m.aliases else "")
            size = format_bytes(m.size_bytes) + (f" in {m.split_parts} parts" if m.split_parts else "")
            cells: list[QTableWidgetItem] = [
                _SortItem(name, m.name.lower()),
                _SortItem(m.source, m.source),
                _SortItem(size, m.size_bytes),
                _SortItem(f"✗ {m.error}" if m.error else _family_text(m), m.error or _family_text(m)),
                _SortItem(m.quant or "", m.quant or ""),
                _SortItem(m.path, m.path),
            ]
            cells[0].setData(Qt.ItemDataRole.UserRole, r)  # back to lib.models after a sort
            for c, item in enumerate(cells):
                if m.error:
                    item.setForeground(ERROR_COLOUR)
                    item.setToolTip(m.error)
                elif c == 5:
                    item.setToolTip(m.path)
                elif c == 3 and m.kind:
                    item.setToolTip(m.kind)
                self.table.setItem(r, c, item)
        self.table.setSortingEnabled(True)
        self.table.resizeColumnsToContents()
        for c, most in ((0, 360), (3, 260)):
            self.table.setColumnWidth(c, min(self.table.columnWidth(c), most))

        self.pairs.setRowCount(len(lib.pairs))
        for r, p in enumerate(lib.pairs):
            for c, key in enumerate(("target", "draft")):
                item = QTableWidgetItem(p[f"{key}_name"])
                item.setToolTip(p[key])
                self.pairs.setItem(r, c, item)
            self.pairs.setItem(r, 2, QTableWidgetItem("…"))
        self.pairs_label.setText(
            f"compatible pairs ({len(lib.pairs)})"
            if lib.pairs
            else "compatible pairs: none (no two files share a vocabulary llama.cpp accepts)"
        )
        self.pair_button.setEnabled(False)

    def set_pair_speeds(self, speeds: dict) -> None:
        """Each pair's prediction (engine.measure.pair_speed.predict_pairs: a Prediction, or why there is none),
        for the library the speeds were predicted for."""
        if self.library is None:
            return
        for r, p in enumerate(self.library.pairs):
            got = speeds.get((p["target"], p["draft"]))
            if got is None:
                continue
            if isinstance(got, str):
                item = QTableWidgetItem("?")
                item.setToolTip(f"no prediction: {got}")
            else:
                item = QTableWidgetItem(got.speed_text() + ("" if got.basis == "prior" else f" ({got.basis})"))
                where = f"{got.device.name}: {got.device.source}" if got.device else "this pair's tune"
                if got.device is not None and got.device.assumed:
                    where += "; measure it on the Hardware page (Ctrl+1)"
                item.setToolTip(f"{got.why()}\npredicted from {where}")
            self.pairs.setItem(r, 2, item)

    # -- selection -> the session ------------------------------------------------------------------
    def selected_models(self) -> list:
        if self.library is None:
            return []
        rows = sorted(i.row() for i in self.table.selectionModel().selectedRows())
        return [self.library.models[self._cell(r, 0).data(Qt.ItemDataRole.UserRole)] for r in rows]

    def _cell(self, row: int, column: int) -> QTableWidgetItem:
        item = self.table.item(row, column)
        assert item is not None  # _fill gives every cell of every row an item
        return item

    def select_paths(self, *paths: str | Path) -> None:
        """Select the rows of these files (what a click or a Ctrl+click does)."""
        wanted = {str(p) for p in paths}
        self.table.clearSelection()
        mode = self.table.selectionMode()
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.MultiSelection)
        for r in range(self.table.rowCount()):
            if self._cell(r, 5).text() in wanted:
                self.table.selectRow(r)
        self.table.setSelectionMode(mode)

    def _selection_changed(self) -> None:
        chosen = [m for m in self.selected_models() if not m.error]
        self.use_button.setEnabled(len(chosen) in (1, 2))
        self.draft_button.setEnabled(len(chosen) == 1)
        if len(chosen) == 1:
            m = chosen[0]
            assert self.library is not None  # a file is selected, so a scan's library is shown
            by_path = {x.path: x for x in self.library.models}
            mates = [by_path[p].name for p in m.compatible_with if p in by_path]
            if is_head(m):
                text = f"<b>{m.name}</b>: {m.kind}. Use in Lab makes it the draft of the Lab's target"
            elif mates:
                text = f"<b>{m.name}</b> pairs with: {', '.join(mates)}"
            else:
                text = f"<b>{m.name}</b>: no other file here shares its vocabulary (n-gram methods need no draft)"
            if has_mtp_head(m):
                text += f" · {m.kind}"
            self.selection_label.setText(text)
        elif len(chosen) == 2:
            a, b = chosen
            ok = b.path in a.compatible_with
            self.selection_label.setText(
                "two files: " + (ok_text("✓ compatible") if ok else error_text("✗ not a pair llama.cpp accepts"))
            )
            if not ok:  # llama.cpp would refuse them: say why (headers read off the GUI thread), offer nothing
                self.use_button.setEnabled(False)
                self._explain_refusal(a.path, b.path)
        else:
            self.selection_label.setText("select a file (or two: target and draft)")

    def _explain_refusal(self, a: str, b: str) -> None:
        from engine.models.compat import check_pair

        def reasons(report) -> list[str]:
            return list(check_pair(a, b)["reasons"])

        def show(found: list[str]) -> None:
            chosen = {m.path for m in self.selected_models()}
            if chosen == {a, b}:  # still the selection the reasons are about
                why = "; ".join(found) or "their vocabularies differ"
                self.selection_label.setText(f"two files: {error_text('✗ not a pair llama.cpp accepts:')} {why}")

        self.refusal_job = BackgroundJob("library-pair-refusal", reasons, self)
        self.refusal_job.on(done=show, failed=lambda exc: show([str(exc)])).start()

    def use_selected(self) -> None:
        chosen = [m for m in self.selected_models() if not m.error]
        if len(chosen) == 1:
            # a draft head generates nothing alone: it can only be the draft
            (self.session.set_draft if is_head(chosen[0]) else self.session.set_target)(chosen[0].path)
        elif len(chosen) == 2:
            # the larger model verifies, the smaller drafts; a draft head drafts, whatever its size
            target, draft = sorted(
                chosen, key=lambda m: (not is_head(m), m.parameter_count or 0, m.size_bytes), reverse=True
            )
            self.session.offer_pair(target.path, draft.path)

    def use_selected_as_draft(self) -> None:
        chosen = [m for m in self.selected_models() if not m.error]
        if len(chosen) == 1:
            self.session.set_draft(chosen[0].path)

    def use_selected_pair(self) -> None:
        rows = self.pairs.selectionModel().selectedRows()
        if not rows or self.library is None:
            return
        p = self.library.pairs[rows[0].row()]
        self.session.offer_pair(p["target"], p["draft"])

    # -- the user's folders -------------------------------------------------------------------
    def add_folder(self, folder: str | Path) -> bool:
        from engine.models.library import LibraryError, add_folder

        try:
            path = add_folder(folder)
        except LibraryError as exc:
            self.status.setText(error_text(str(exc)))
            return False
        self.status.setText(f"added {path}; scanning…")
        self.rescan()
        return True

    def remove_folder(self, folder: str | Path) -> bool:
        from engine.models.library import LibraryError, remove_folder

        try:
            remove_folder(folder)
        except LibraryError as exc:
            self.status.setText(error_text(str(exc)))
            return False
        self.rescan()
        return True

    def _user_folders(self) -> list[Path]:
        from engine.models.library import LibraryError, user_folders

        try:
            return user_folders()
        except LibraryError:
            return []

    def _update_remove_button(self) -> None:
        folders = self._user_folders()
        self.remove_button.setEnabled(bool(folders))
        self.remove_button.setToolTip("\n".join(map(str, folders)) or "no folders added")

    def _ask_add_folder(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, "A folder with GGUF models", str(Path.home()))
        if folder:
            self.add_folder(folder)

    def _ask_remove_folder(self) -> None:
        folders = [str(f) for f in self._user_folders()]
        if not folders:
            return
        folder, ok = QInputDialog.getItem(self, "Remove folder", "Stop looking in:", folders, 0, False)
        if ok and folder:
            self.remove_folder(folder)

    def shutdown(self) -> None:
        # a scan cannot be interrupted; its thread is a daemon, so waiting a little is enough
        self._again = False
        if self.job is not None:
            self.job.stop(timeout_s=5.0)
