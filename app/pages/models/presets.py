"""The Models page's downloads: the catalog's presets (a target and a draft each) with their
size and whether they fit, single REPO:FILENAME files, and the pairs the recommendations
hand over. Download runs engine.models.downloads.pull in a background thread with its progress
(bytes, rate, ETA) on a bar; Cancel keeps the partial file, so Download again resumes it.
"Use in Lab" (which sets the session's pair) is offered once every file of a row is on disk.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QColor
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QProgressBar,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.background import BackgroundJob
from app.session import LabSession
from app.widgets.forms import push_button
from app.widgets.style import ERROR, MUTED, OK, coloured, error_text
from engine.models.downloads import (
    ChecksumError,
    DiskSpaceError,
    DownloadCancelled,
    DownloadError,
    format_bytes,
    format_progress,
    parse_repo_file,
)

COLUMNS = ("preset / file", "download", "fits", "progress", "")


@dataclass
class FileWanted:
    role: str  # target | draft | model
    repo: str  # hub repository, or "bundled"
    filename: str
    bundled_path: str | None = None

    @property
    def library_name(self) -> str:
        """How engine.models.library names this file once it is in the Hugging Face cache."""
        return f"{self.repo}:{self.filename}"


@dataclass
class DownloadRow:
    name: str  # what pull() is given: a preset name or REPO:FILENAME
    kind: str  # preset | file | pick (a recommended pair that has no preset)
    description: str
    files: list[FileWanted]
    pull_catalog: Any = None  # what pull(catalog=) resolves the name in (None: the page's catalog)
    size_text: str = "?"
    fit: bool | None = None
    fit_text: str = ""
    paths: dict[str, str] = field(default_factory=dict)  # role -> file on disk, when known
    message: str = ""  # the last thing that happened, in full
    state: str = "idle"  # idle | running | cancelling | done | failed | cancelled
    job: BackgroundJob | None = None
    # widgets
    bar: QProgressBar | None = None
    download_button: QPushButton | None = None
    cancel_button: QPushButton | None = None
    use_button: QPushButton | None = None

    @property
    def present(self) -> bool:
        return all(f.role in self.paths for f in self.files)


def _bar(row: DownloadRow) -> QProgressBar:
    """The row's progress bar: the page gives every row it holds one (_append)."""
    assert row.bar is not None
    return row.bar


class _OnePair:
    """Stands in for the catalog when pull() is given a recommended pair that is no preset: resolve_name
    asks catalog.preset(name) for an object with .target and .draft ModelFiles, which a PairChoice has."""

    def __init__(self, pair: Any):
        self.pair = pair

    def preset(self, name: str) -> Any:
        return self.pair


def _files_of(pair: Any) -> list[FileWanted]:
    out = []
    for role in ("target", "draft"):
        mf = getattr(pair, role)
        bundled = mf.bundled_path if mf.bundled else None
        out.append(FileWanted(role, mf.repo, mf.filename, str(bundled) if bundled else None))
    return out


def explain(exc: BaseException) -> tuple[str, str]:
    """(short text for the bar, the whole story) of a failed pull."""
    if isinstance(exc, DownloadCancelled):
        return "cancelled: Download resumes", str(exc)
    if isinstance(exc, DiskSpaceError):
        return "not enough disk space", str(exc)
    if isinstance(exc, ChecksumError):
        return "corrupt download (sha256)", str(exc)
    if isinstance(exc, (DownloadError, ValueError)):  # ValueError: the catalog's CatalogError
        return "failed", str(exc)
    if isinstance(exc, OSError):
        where = f" ({exc.filename})" if getattr(exc, "filename", None) else ""
        return "failed (disk)", f"{exc.strerror or exc}{where}"
    return "failed", f"{type(exc).__name__}: {exc}"


class PresetsPanel(QWidget):
    downloaded = Signal(object)  # engine.models.downloads.PullResult

    def __init__(self, session: LabSession, download_options: dict | None = None, parent: QWidget | None = None):
        """download_options: keyword arguments for engine.models.downloads.download_files (cache_dir, endpoint, ...)."""
        super().__init__(parent)
        self.session = session
        self.download_options = dict(download_options or {})
        self.catalog = None
        self.rows: list[DownloadRow] = []
        self.library = None

        self.status = QLabel("loading the catalog…")
        self.status.setWordWrap(True)
        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setHorizontalHeaderLabels(COLUMNS)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.verticalHeader().setVisible(False)
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        for c in (1, 2, 4):
            header.setSectionResizeMode(c, QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(3, QHeaderView.ResizeMode.Interactive)
        self.table.setColumnWidth(3, 380)
        self.table.itemSelectionChanged.connect(self._show_details)

        self.details = QLabel("")
        self.details.setWordWrap(True)
        self.details.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.details.setAlignment(Qt.AlignmentFlag.AlignTop | Qt.AlignmentFlag.AlignLeft)
        self.details.setMinimumHeight(70)

        self.repo_file = QLineEdit()
        self.repo_file.setPlaceholderText("owner/repo:file.gguf (any GGUF on the Hugging Face hub)")
        self.repo_file.returnPressed.connect(self._download_repo_file)
        get = push_button("Download file", self._download_repo_file)
        one = QHBoxLayout()
        one.addWidget(QLabel("one file:"))
        one.addWidget(self.repo_file, 1)
        one.addWidget(get)

        col = QVBoxLayout(self)
        col.setContentsMargins(0, 0, 0, 0)
        col.addWidget(self.status)
        col.addWidget(self.table, 1)
        col.addWidget(self.details)
        col.addLayout(one)

    # -- rows ---------------------------------------------------------------------------------
    def row(self, name: str) -> DownloadRow | None:
        return next((r for r in self.rows if r.name == name), None)

    def set_catalog(self, catalog, fits=None, budget=None, ctx: int | None = None) -> None:
        """The catalog's presets, with engine.planning.advice.recommend.preset_fits' sizes and verdicts when given."""
        self.catalog = catalog
        by_name = {f.name: f for f in (fits or [])}
        for p in catalog.presets:
            row = self.row(p.name)
            if row is None:
                row = DownloadRow(p.name, "preset", p.description, _files_of(p))
                self._append(row)
            fit = by_name.get(p.name)
            if fit is not None:
                bundled = all(f.bundled_path for f in row.files)
                row.size_text = (
                    ("~" if fit.sizes_estimated else "")
                    + format_bytes(fit.download_bytes)
                    + (" bundled" if bundled else "")
                )
                row.fit, row.fit_text = fit.fits, fit.why
            self._paint(row)
        where = budget.describe() if budget is not None else "no memory budget (sizes only)"
        at = f" at {ctx} tokens of context" if ctx and budget is not None else ""
        self.status.setText(f"{len(catalog.presets)} presets · fits{at}: {where}")
        self._match_library()

    def add_file(self, name: str) -> DownloadRow | None:
        """A REPO:FILENAME row (or the existing one)."""
        name = name.strip()
        row = self.row(name)
        if row is not None:
            return row
        request = parse_repo_file(name)
        if request is None:
            self.details.setText(
                error_text(f"{name!r} is not REPO:FILENAME")
                + " (for example bartowski/Qwen2.5-0.5B-Instruct-GGUF:Qwen2.5-0.5B-Instruct-Q8_0.gguf)"
            )
            return None
        row = DownloadRow(name, "file", "one file from the hub", [FileWanted("model", request.repo, request.filename)])
        self._append(row)
        self._match_library()
        return row

    def add_pair(self, name: str, pair: Any, description: str) -> DownloadRow:
        """A recommended target/draft pair that has no preset (pair: anything with .target/.draft ModelFiles)."""
        row = self.row(name)
        if row is None:
            row = DownloadRow(name, "pick", description, _files_of(pair), pull_catalog=_OnePair(pair))
            row.fit, row.fit_text = True, "recommended for this machine"
            self._append(row)
            self._match_library()
        return row

    def _append(self, row: DownloadRow) -> None:
        r = len(self.rows)
        self.rows.append(row)
        self.table.insertRow(r)
        row.bar = QProgressBar()
        row.bar.setRange(0, 1000)
        row.bar.setValue(0)
        row.bar.setTextVisible(True)
        row.download_button = QPushButton("Download")
        row.cancel_button = QPushButton("Cancel")
        row.use_button = QPushButton("Use in Lab")
        row.download_button.clicked.connect(lambda: self.download(row.name))
        row.cancel_button.clicked.connect(lambda: self.cancel(row.name))
        row.use_button.clicked.connect(lambda: self.use_in_lab(row.name))
        actions = QWidget()
        a_row = QHBoxLayout(actions)
        a_row.setContentsMargins(2, 0, 2, 0)
        for b in (row.download_button, row.cancel_button, row.use_button):
            a_row.addWidget(b)
        self.table.setCellWidget(r, 3, row.bar)
        self.table.setCellWidget(r, 4, actions)
        self._paint(row)

    def _index(self, row: DownloadRow) -> int:
        return self.rows.index(row)

    def _paint(self, row: DownloadRow) -> None:
        r = self._index(row)
        name = QTableWidgetItem(row.name if row.kind != "file" else row.name.split(":", 1)[1])
        name.setToolTip(f"{row.name}\n{row.description}")
        size = QTableWidgetItem(row.size_text)
        fit = QTableWidgetItem({True: "✓ fits", False: "✗ too big", None: "–"}[row.fit])
        fit.setForeground(QColor({True: OK, False: ERROR, None: MUTED}[row.fit]))
        fit.setToolTip(row.fit_text)
        for c, item in enumerate((name, size, fit)):
            self.table.setItem(r, c, item)
        bar, download, cancel, use = row.bar, row.download_button, row.cancel_button, row.use_button
        assert bar is not None and download is not None and cancel is not None and use is not None  # _append's
        running = row.state in ("running", "cancelling")
        download.setEnabled(not running)
        download.setText(
            "Resume"
            if row.state == "cancelled"
            else "Check"
            if row.present or all(f.bundled_path for f in row.files)
            else "Download"
        )
        cancel.setEnabled(row.state == "running")
        use.setEnabled(row.present and not running)
        if not running and row.state in ("idle", "done") and row.present:
            bar.setValue(1000)
            bar.setFormat("on disk")
        elif row.state == "idle":
            bar.setFormat("")

    # -- what is already here ------------------------------------------------------------------
    def set_library(self, lib) -> None:
        self.library = lib
        self._match_library()

    def _match_library(self) -> None:
        """Files of each row that the library scan found (HF cache names) or that are bundled."""
        from pathlib import Path

        found: dict[str, str] = {}
        if self.library is not None:
            for m in self.library.models:
                if m.repo and not m.error:
                    found.setdefault(m.name, m.path)
        for row in self.rows:
            for f in row.files:
                if f.bundled_path is not None:
                    if Path(f.bundled_path).is_file():
                        row.paths.setdefault(f.role, f.bundled_path)
                elif f.library_name in found:
                    row.paths.setdefault(f.role, found[f.library_name])
            self._paint(row)
        self._show_details()

    # -- downloading -----------------------------------------------------------------------------
    def download(self, name: str) -> bool:
        row = self.row(name)
        if row is None or row.state in ("running", "cancelling"):
            return False
        from engine.models.downloads import pull

        catalog = row.pull_catalog if row.pull_catalog is not None else self.catalog
        options = dict(self.download_options)

        def work(report):
            return pull(row.name, catalog=catalog, on_progress=report, cancel=job.cancel, **options)

        job = BackgroundJob(f"models-download-{len(self.rows)}", work, self, computing=False)
        row.job, row.state = job, "running"
        row.message = f"asking the hub for {row.name}…"
        _bar(row).setFormat("starting…")
        self._paint(row)
        self.table.selectRow(self._index(row))
        self._show_details()
        job.on(
            done=lambda result: self._pulled(row, result),
            failed=lambda exc: self._pull_failed(row, exc),
            progress=lambda p: self._progress(row, p),
        ).start()
        return True

    def cancel(self, name: str) -> None:
        row = self.row(name)
        if row is not None and row.job is not None and row.job.running:
            row.job.cancel.set()  # the download stops at its next chunk and keeps the partial file
            row.state = "cancelling"
            _bar(row).setFormat("cancelling…")
            self._paint(row)

    def _progress(self, row: DownloadRow, p) -> None:
        if row.state != "running":
            return
        bar = _bar(row)
        if p.fraction is not None:
            bar.setValue(int(1000 * p.fraction))
        if row.kind == "file" and p.total_bytes and row.size_text == "?":
            row.size_text = format_bytes(p.total_bytes)  # the hub has told us now
            self._paint(row)
        bits = [f"file {p.file_index + 1}/{p.file_count}"] if p.file_count > 1 else []
        if p.stage == "verifying":
            bits.append("verifying")
        if p.fraction is not None:
            bits.append(f"{100 * p.fraction:.0f}%")
        bits.append(format_bytes(p.done_bytes) + (f" / {format_bytes(p.total_bytes)}" if p.total_bytes else ""))
        if p.rate_bytes_per_s and p.stage == "downloading":
            bits.append(f"{format_bytes(p.rate_bytes_per_s)}/s")
        if p.eta_s is not None and p.stage == "downloading":
            bits.append(f"ETA {p.eta_s:.0f} s")
        bar.setFormat(" · ".join(bits))
        row.message = format_progress(p)
        self._show_details(row)

    def _pulled(self, row: DownloadRow, result) -> None:
        row.state = "done"
        row.job = None
        broken = [f for f in result.files if f.gguf_error]
        for f in result.files:
            if not f.gguf_error:
                row.paths[f.role] = f.path
        lines = []
        for f in result.files:
            lines.append(f"{f.role}: {f.path} ({f.how()})")
        bar = _bar(row)
        bar.setValue(1000)
        if broken:
            row.state = "failed"
            bar.setFormat("downloaded, but not a usable GGUF")
            lines += [f"{error_text(f'{f.filename} is not a usable GGUF:')} {f.gguf_error}" for f in broken]
        elif result.compat is not None and not result.compat["compatible"]:
            bar.setFormat("done (llama.cpp refuses the pair)")
            refused = error_text("llama.cpp will refuse this draft for this target:")
            lines.append(f"{refused} " + "; ".join(result.compat["reasons"]))
        else:
            bar.setFormat("done")
        row.message = "<br>".join(lines)
        self._paint(row)
        self._show_details(row)
        self.downloaded.emit(result)

    def _pull_failed(self, row: DownloadRow, exc: BaseException) -> None:
        row.job = None
        short, story = explain(exc)
        row.state = "cancelled" if isinstance(exc, DownloadCancelled) else "failed"
        bar = _bar(row)
        bar.setFormat(short)
        if row.state == "failed":
            bar.setValue(0)
        colour = MUTED if row.state == "cancelled" else ERROR
        row.message = f"{coloured(f'{short}:', colour)} {story}"
        self._paint(row)
        self._show_details(row)

    def _download_repo_file(self) -> None:
        row = self.add_file(self.repo_file.text())
        if row is not None:
            self.repo_file.clear()
            self.download(row.name)

    # -- to the session -----------------------------------------------------------------------------
    def use_in_lab(self, name: str) -> bool:
        row = self.row(name)
        if row is None or not row.present:
            return False
        if "model" in row.paths:
            self.session.set_target(row.paths["model"])  # one file: the draft stays
        else:
            self.session.offer_pair(row.paths["target"], row.paths["draft"])
        return True

    def _show_details(self, row: DownloadRow | None = None) -> None:
        selected = self.table.selectionModel().selectedRows()
        current = self.rows[selected[0].row()] if selected else None
        if row is not None and row is not current:
            return  # news about a row that is not the one shown
        row = current
        if row is None:
            self.details.setText("select a preset to see its files")
            return
        parts = [f"<b>{row.name}</b>: {row.description}"]
        for f in row.files:
            where = "bundled with SpecTune" if f.bundled_path else f"{f.repo} · {f.filename}"
            on_disk = f" — on disk: {row.paths[f.role]}" if f.role in row.paths else ""
            parts.append(f"{f.role}: {where}{on_disk}")
        if row.fit_text:
            parts.append(f"memory: {row.fit_text}")
        if row.message:
            parts.append(row.message)
        self.details.setText("<br>".join(parts))

    def shutdown(self) -> None:
        for row in self.rows:
            if row.job is not None:
                row.job.stop(timeout_s=15.0)
