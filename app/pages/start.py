"""The Start page: what a new user sees first, a guide in three steps rather than another copy of the
Models page. It shows this machine in one line (the Hardware page's probe), offers the bundled demo pair
as the offline first run, lists the best pairs for this machine from the Models page's own ranking
(engine.planning.recommend, one pass shared by both pages) with one Download click each (the Models
page's downloads, with their progress), and then Tune and Export as the next steps.
"""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QGridLayout, QGroupBox, QHBoxLayout, QLabel, QPushButton, QVBoxLayout, QWidget

from app.widgets.forms import push_button
from engine.core.units import GIB, format_bytes
from engine.planning.recommend import start_choices

SHOWN_PAIRS = 3  # the best few; the Models page's Recommended tab holds the rest and the reasons


def machine_line(report) -> str:
    """ "NVIDIA RTX 4090 · 21.3 GiB VRAM free of 24.0" or "CPU only · 16 cores · 41.2 GiB RAM free of 62.7"."""
    gpus = [g for g in getattr(report, "gpus", []) if g.memory_total_bytes]
    if getattr(report, "status", "") == "ok" and gpus:
        return " · ".join(
            f"{g.name or f'GPU {g.index}'} · {(g.memory_free_bytes or 0) / GIB:.1f} GiB VRAM free of "
            f"{g.memory_total_bytes / GIB:.1f}"
            for g in gpus
        )
    cpu = report.cpu
    cores = f"{cpu.logical_cores} cores" if cpu.logical_cores else "CPU"
    free = f"{cpu.ram_available_bytes / GIB:.1f}" if cpu.ram_available_bytes else "?"
    total = f"{cpu.ram_total_bytes / GIB:.1f}" if cpu.ram_total_bytes else "?"
    return f"CPU only (no NVIDIA GPU seen) · {cores} · {free} GiB RAM free of {total}"


def _step(title: str, text: str) -> tuple[QGroupBox, QVBoxLayout]:
    box = QGroupBox(title)
    col = QVBoxLayout(box)
    label = QLabel(text)
    label.setWordWrap(True)
    col.addWidget(label)
    return box, col


class StartPage(QWidget):
    demoRequested = Signal()  # load the demo pair, measure the baseline, start a live run (the window does it)
    downloadRequested = Signal(object)  # an engine.planning.recommend.PairChoice, for the Models page's downloads
    pageRequested = Signal(str)  # "Models", "Tune", "Export"
    rankingWanted = Signal()  # shown without a ranking yet: the Models page's first pass should start
    measureRequested = Signal()  # measure this CPU's speed (the Hardware page's probe)

    def __init__(self, hardware_report=lambda: None, parent: QWidget | None = None):
        """hardware_report: returns the Hardware page's engine.planning.hardware.HardwareReport."""
        super().__init__(parent)
        self.hardware_report = hardware_report
        self.candidates: list = []
        col = QVBoxLayout(self)
        col.addWidget(QLabel("<h2>Welcome to SpecTune</h2>"))
        intro = QLabel(
            "SpecTune finds the speculative-decoding settings that make a model pair fastest on this machine, "
            "measured live, and hands them to you as a llama-server command."
        )
        intro.setWordWrap(True)
        col.addWidget(intro)
        self.machine = QLabel("looking at this machine…")
        self.machine.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        col.addWidget(self.machine)

        demo_box, demo_col = _step(
            "1 · See it work, offline",
            "The small demo pair ships with SpecTune: it loads in seconds, measures a baseline without "
            "speculation, checks which setting pays on this machine, then runs live with it while the charts "
            "show acceptance and tokens/s.",
        )
        self.demo_button = push_button(
            "Run the demo pair",
            self.demoRequested,
            ("load the demo pair in the Lab, measure the baseline, check which setting pays here and start a live run"),
        )
        demo_col.addWidget(self.demo_button, 0, Qt.AlignmentFlag.AlignLeft)
        col.addWidget(demo_box)

        pairs_box, pairs_col = _step(
            "2 · A real pair for this machine",
            "The best target + draft pairs that fit the free memory here, with the speed the engine predicts for "
            "this machine. Download one (progress on the Models page), then run it in the Lab.",
        )
        self.pairs_status = QLabel("ranking the catalog for this machine…")
        self.pairs_status.setWordWrap(True)
        pairs_col.addWidget(self.pairs_status)
        device_row = QHBoxLayout()
        self.device_label = QLabel("")
        self.device_label.setWordWrap(True)
        self.measure_button = push_button(
            "Measure this CPU",
            self.measureRequested,
            ("time llama.cpp on this CPU (a few minutes, once) so that the predicted speeds are measured, not assumed"),
        )
        self.measure_button.hide()
        device_row.addWidget(self.device_label, 1)
        device_row.addWidget(self.measure_button)
        pairs_col.addLayout(device_row)
        self.pairs_grid = QGridLayout()
        pairs_col.addLayout(self.pairs_grid)
        more = push_button("All models and recommendations…", lambda: self.pageRequested.emit("Models"))
        pairs_col.addWidget(more, 0, Qt.AlignmentFlag.AlignLeft)
        col.addWidget(pairs_box)

        next_box, next_col = _step(
            "3 · Then tune it and take it with you",
            "The auto-tuner tries methods and draft lengths on the Lab's pair; Export writes the winning settings "
            "as a llama-server command for your shell and can check it against llama-server itself.",
        )
        row = QHBoxLayout()
        self.tune_button = push_button("Tune the Lab's pair", lambda: self.pageRequested.emit("Tune"))
        self.export_button = push_button("Export the command", lambda: self.pageRequested.emit("Export"))
        row.addWidget(self.tune_button)
        row.addWidget(self.export_button)
        row.addStretch(1)
        next_col.addLayout(row)
        col.addWidget(next_box)
        col.addStretch(1)

    def showEvent(self, event) -> None:
        super().showEvent(event)
        self.refresh_machine()
        if not self.candidates:
            self.rankingWanted.emit()

    def refresh_machine(self) -> None:
        report = self.hardware_report()
        if report is not None:
            self.machine.setText(f"<b>This machine:</b> {machine_line(report)}")

    # -- the ranking, from the Models page ----------------------------------------------------------
    def set_ranking(self, view) -> None:
        """view: engine.planning.recommend.CatalogView (the Models page's ranking pass)."""
        self._clear_pairs()
        rec = view.recommendation
        if rec is None:
            self.pairs_status.setText(f"No recommendations: {view.error or 'the budget could not be measured'}")
            return
        self._show_device(rec.device)
        start = start_choices(rec, SHOWN_PAIRS)
        self.candidates = list(start.choices)
        head = start.headline
        self.pairs_status.setText(head)
        for r, c in enumerate(self.candidates):
            speed = f"needs {format_bytes(c.needed_bytes)} · {c.speed_text()}"
            name = QLabel(f"<b>{c.setting_label}</b>")
            files = [c.target, c.draft] if c.uses_draft else [c.target]
            name.setToolTip("\n".join(f"{f.repo}/{f.filename}" for f in files))
            button = push_button(
                "Download",
                lambda checked=False, c=c: self.downloadRequested.emit(c),
                "download both files, with progress on the Models page, then run them in the Lab",
            )
            self.pairs_grid.addWidget(name, r, 0)
            self.pairs_grid.addWidget(QLabel(speed), r, 1)
            self.pairs_grid.addWidget(button, r, 2)
        self.pairs_grid.setColumnStretch(0, 1)

    def _show_device(self, device) -> None:
        """Where the speeds come from; an unmeasured CPU gets the button that measures it."""
        if device is None:
            self.device_label.setText("")
            self.measure_button.hide()
            return
        assumed = device.assumed
        self.device_label.setText(
            f"Speeds predicted for {device.name}"
            + (" from its core count, not measured yet." if assumed else f" <small>({device.source})</small>")
        )
        self.measure_button.setVisible(assumed)

    def show_probe_message(self, text: str) -> None:
        """The Hardware page's probe, under way or refused."""
        self.device_label.setText(text)

    def download_buttons(self) -> list[QPushButton]:
        buttons = []
        for r in range(self.pairs_grid.rowCount()):
            item = self.pairs_grid.itemAtPosition(r, 2)
            if item is not None:
                button = item.widget()
                assert isinstance(button, QPushButton)  # the third column holds only the Download buttons
                buttons.append(button)
        return buttons

    def _clear_pairs(self) -> None:
        while self.pairs_grid.count():
            item = self.pairs_grid.takeAt(0)
            assert item is not None  # count() says there is one
            widget = item.widget()
            if widget is not None:
                widget.deleteLater()
        self.candidates = []
