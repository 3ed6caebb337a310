"""The Start page: what a new user sees first, a guide in three steps rather than another copy of the
Models page. It shows this machine in one line (the Hardware page's probe), offers the bundled demo pair
as the offline first run, lists the best pairs for this machine from the Models page's own ranking
(engine.planning.advice.recommend, one pass shared by both pages) with one Download click each (the Models
page's downloads, with their progress), and then Tune and Export as the next steps. Which few pairs it shows,
and the sentence above them, are the page's own (start_choices), picked from that ranking.
"""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QGridLayout, QGroupBox, QHBoxLayout, QLabel, QPushButton, QVBoxLayout, QWidget

from app.widgets.forms import push_button
from engine.core.units import GIB, format_bytes
from engine.planning.advice.choice import PairChoice, Recommendation
from engine.planning.speed.device_speed import DeviceSpeed

SHOWN_PAIRS = 3  # the best few; the Models page's Recommended tab holds the rest and the reasons


@dataclass(frozen=True)
class StartChoices:
    """What a newcomer is shown first (the Start page): a few choices and the sentence above them."""

    headline: str
    choices: list[PairChoice]
    drafts_pay: bool  # some fitting pair's draft is predicted to pay on this device (True without a device)


def start_choices(rec: Recommendation, n: int) -> StartChoices:
    """Where drafts pay here, the pairs whose speculation is fastest. Where none does (a CPU, where verifying
    K + 1 tokens costs about K + 1 tokens), the models to run alone, smallest first, as a laptop owner would
    try them, with one line on why and what would change it. Under the speed floor, the fastest that fit."""
    where = rec.budget.describe(short=True)
    if rec.device is None:  # no speed known: the score's ranking, by the bandwidth-bound speedup
        return StartChoices(f"For {where}:", rec.recommended[:n], True)
    fitting = rec.recommended
    if not fitting:
        slow = [c for c in rec.near_misses if c.too_slow][:n]
        head = (
            f"Nothing in the catalog is predicted to reach {rec.speed_floor:g} tokens/s on this machine. "
            "The fastest that fit:"
            if slow
            else "Nothing in the catalog fits this machine's free memory with headroom."
        )
        pays = any(c.uses_draft for c in slow)
        if slow and not pays:  # slow, and no draft helps: say why, as above the floor
            head = _why_no_draft_pays(rec.device, slow[0]) + " " + head
        return StartChoices(head, slow, pays)
    paying = [c for c in fitting if c.uses_draft]
    if paying:
        paying.sort(key=lambda c: -(c.tokens_per_s or 0.0))
        return StartChoices(f"For {where}, the pairs whose drafts pay most here:", paying[:n], True)
    alone = sorted(fitting, key=lambda c: (c.needed_bytes, c.label))[:n]
    head = _why_no_draft_pays(rec.device, alone[0]) + " Models to run alone, smallest first:"
    return StartChoices(head, alone, False)


def _why_no_draft_pays(device: DeviceSpeed, c: PairChoice) -> str:
    """One line: why no draft pays on this device, measured by its own prediction, and what would change it."""
    pr = c.prediction
    assert pr is not None
    one, five = pr.verify_ms_by_batch.get(1), pr.verify_ms_by_batch.get(5)
    cost = f": checking 5 tokens at once costs x{five / one:.1f} one token's pass here" if one and five else ""
    return (
        f"No draft pays on {device.name}{cost}, so a draft's guesses save little. A GPU checks several tokens "
        "for about the price of one, which is where drafts pay. ngram-mod needs no draft and can pay where "
        "text repeats (code edits)."
    )


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
    downloadRequested = Signal(object)  # an engine.planning.advice.choice.PairChoice, for the Models page
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
        """view: engine.planning.advice.recommend.CatalogView (the Models page's ranking pass)."""
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
