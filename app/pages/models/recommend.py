"""The Models page's recommendations: engine.planning.advice.recommend's ranked target/draft/quant choices
for the memory this machine has (free VRAM from NVML, else available RAM for a CPU-only
run) and the speed its device is predicted to give them (at least the floor set here), each
with the reasons behind its score, then the near-misses with why they missed (too big, or
too slow here), then what was left out. Download hands the chosen pair to the downloads tab.
The "on" box ranks for a card from SpecTune's GPU table instead (engine.planning.speed.gpu_table): what
a pair would do on a GPU the user is thinking of buying or renting.
"""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QColor
from PySide6.QtWidgets import (
    QComboBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QSpinBox,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.widgets.forms import push_button
from app.widgets.style import ERROR, error_text
from engine.core.units import format_bytes
from engine.planning.constants import ACCEPTANCE_PRIOR, DEFAULT_CTX
from engine.planning.speed.gpu_table import load_gpus
from engine.planning.speed.speed_model import ACCEPTANCE_PRIORS, ACCEPTANCE_PRIORS_SOURCE

GENERATION_ORDER = ("Blackwell", "Hopper", "Ada", "Ampere", "Turing", "Volta", "Pascal")

COLUMNS = ("target + draft", "score", "memory", "predicted speed", "preset")
ROLE = Qt.ItemDataRole.UserRole


def _generation_rank(generation: str) -> int:
    return GENERATION_ORDER.index(generation) if generation in GENERATION_ORDER else len(GENERATION_ORDER)


def nothing_recommended(rec, where: str = "this machine") -> str:
    """Why the list is empty: nothing fits, or nothing that fits is fast enough there."""
    family = " in this family" if rec.family else ""
    if any(c.too_slow for c in rec.near_misses):
        return f"Nothing{family} reaches {rec.speed_floor:g} tokens/s on {where}; the fastest are below"
    return f"Nothing in the catalog fits with headroom{family}"


class RecommendPanel(QWidget):
    refreshRequested = Signal()
    downloadRequested = Signal(object)  # engine.planning.advice.choice.PairChoice

    def __init__(self, default_ctx: int = DEFAULT_CTX, parent: QWidget | None = None):
        super().__init__(parent)
        self.result = None
        self.budget_label = QLabel("measuring the memory budget…")
        self.budget_label.setWordWrap(True)
        self.ctx = QSpinBox()
        self.ctx.setRange(256, 1 << 20)
        self.ctx.setSingleStep(1024)
        self.ctx.setValue(default_ctx)
        self.ctx.setSuffix(" tokens")
        self.ctx.setToolTip("the context to plan the KV caches for")
        self.ctx.setKeyboardTracking(False)
        self.ctx.valueChanged.connect(lambda value: self.refreshRequested.emit())
        self.floor = QSpinBox()
        self.floor.setRange(0, 10_000)
        self.floor.setValue(10)
        self.floor.setSuffix(" tok/s")
        self.floor.setToolTip(
            "pairs predicted slower than this on this machine are listed as near-misses; "
            "10 tokens/s is about reading speed"
        )
        self.floor.setKeyboardTracking(False)
        self.floor.valueChanged.connect(lambda value: self.refreshRequested.emit())
        # the kind of text: its prior acceptance is what the pairs' speeds are predicted at
        self.text_kind = QComboBox()
        self.text_kind.addItem(f"any text (prior {ACCEPTANCE_PRIOR:.2f})", None)
        for name, prior in sorted(ACCEPTANCE_PRIORS.items()):
            self.text_kind.addItem(f"{name} (prior {prior:.2f})", name)
        self.text_kind.setToolTip(
            "the kind of text you will generate: the pairs are predicted at its prior acceptance per draft "
            "position (text that restates its prompt is drafted more easily than free writing); a tune of a "
            f"pair in the Lab measures its own.\nThe priors: {ACCEPTANCE_PRIORS_SOURCE}; any text: "
            "Llama 3.1 8B drafted by 3.2 1B"
        )
        self.text_kind.currentIndexChanged.connect(lambda index: self.refreshRequested.emit())
        self.machine = self._machine_box()
        self.refresh_button = push_button("Refresh", self.refreshRequested, "read the free memory again and rank anew")
        top = QHBoxLayout()
        top.addWidget(self.budget_label, 1)
        top.addWidget(QLabel("on"))
        top.addWidget(self.machine)
        top.addWidget(QLabel("context"))
        top.addWidget(self.ctx)
        top.addWidget(QLabel("at least"))
        top.addWidget(self.floor)
        top.addWidget(QLabel("for"))
        top.addWidget(self.text_kind)
        top.addWidget(self.refresh_button)

        self.tree = QTreeWidget()
        self.tree.setColumnCount(len(COLUMNS))
        self.tree.setHeaderLabels(COLUMNS)
        self.tree.setWordWrap(True)
        self.tree.setUniformRowHeights(False)
        header = self.tree.header()
        header.setStretchLastSection(False)
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        for c in range(1, len(COLUMNS)):
            header.setSectionResizeMode(c, QHeaderView.ResizeMode.ResizeToContents)
        self.tree.itemSelectionChanged.connect(self._selection_changed)

        self.download_button = push_button("Download the selected pair", self._download_selected, enabled=False)
        self.selection_label = QLabel("")
        self.selection_label.setWordWrap(True)
        bottom = QHBoxLayout()
        bottom.addWidget(self.selection_label, 1)
        bottom.addWidget(self.download_button)

        col = QVBoxLayout(self)
        col.setContentsMargins(0, 0, 0, 0)
        col.addLayout(top)
        col.addWidget(self.tree, 1)
        col.addLayout(bottom)

    def _machine_box(self) -> QComboBox:
        """Where to rank for: this machine, or a card from the table (newest generation first)."""
        box = QComboBox()
        box.addItem("this machine", None)
        cards = sorted(load_gpus(), key=lambda g: (_generation_rank(g.generation), -(g.bandwidth_gb_s or 0)))
        for g in cards:
            # the label, not NVML's name: two cards sold in two memory sizes share one name
            box.addItem(f"{g.label} · {g.vram_gb:g} GB, {g.bandwidth_gb_s:g} GB/s ({g.generation})", g.label)
        # a label can be 60 characters: the closed box shows the start, the open list all of it, so the
        # row stays narrow enough for a 1280 px screen at 150 %
        box.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        box.setMinimumContentsLength(16)
        box.view().setMinimumWidth(box.view().sizeHintForColumn(0) + 24)
        box.setToolTip(
            "rank for this machine, or for a GPU you do not have: its whole memory free, its bandwidth and the GPU "
            "model fitted to published llama.cpp measurements (the band beside each speed is its held-out error)"
        )
        box.currentIndexChanged.connect(lambda index: self.refreshRequested.emit())
        return box

    def workload(self) -> str | None:
        """The shipped workload set chosen (None: any text, the flat prior)."""
        return self.text_kind.currentData()

    def gpu(self) -> str | None:
        """The card chosen in the "on" box (its label in the table), or None for this machine."""
        return self.machine.currentData()

    def where(self) -> str:
        """Whom the list is for, in words: "this machine" or "the RTX 4060 Ti 16GB"."""
        return "this machine" if self.gpu() is None else f"the {self.machine.currentText().split(' · ')[0]}"

    def set_busy(self) -> None:
        self.refresh_button.setEnabled(False)
        self.budget_label.setText("measuring the memory budget and ranking the catalog…")

    def set_error(self, message: str) -> None:
        self.refresh_button.setEnabled(True)
        self.tree.clear()
        self.result = None
        self.budget_label.setText(f"{error_text('no recommendations:')} {message}")

    def set_result(self, rec) -> None:
        """rec: an engine.planning.advice.choice.Recommendation."""
        self.refresh_button.setEnabled(True)
        self.result = rec
        speed = ""
        if rec.device is not None:
            speed = f"<br><b>speeds predicted for:</b> {rec.device.name} <small>({rec.device.source})</small>"
            if rec.device.assumed:
                speed += " · measure this CPU on the Hardware page (Ctrl+1)"
        self.budget_label.setText(f"<b>budget:</b> {rec.budget.describe()}{speed}")
        self.budget_label.setToolTip(f"usable: {format_bytes(rec.budget.usable_bytes)} at {rec.ctx} tokens")
        self.tree.clear()

        top = QTreeWidgetItem([f"Recommended for {self.where()} ({len(rec.recommended)})"])
        if not rec.recommended:
            top.setText(0, nothing_recommended(rec, self.where()))
        self.tree.addTopLevelItem(top)
        for i, c in enumerate(rec.recommended, 1):
            item = self._candidate(top, c, f"{i}. ")
            item.setExpanded(i == 1)  # the best one's reasons in view; the others a click away
        top.setExpanded(True)

        if rec.near_misses:
            misses = QTreeWidgetItem([f"Near misses ({len(rec.near_misses)})"])
            self.tree.addTopLevelItem(misses)
            for c in rec.near_misses:
                item = self._candidate(misses, c, "")
                why = QTreeWidgetItem([f"why not: {c.why_not}"])
                why.setForeground(0, QColor(ERROR))
                item.insertChild(0, why)
                item.setText(0, f"{c.label} — {c.why_not}")  # why it missed, readable without a click
                item.setToolTip(0, f"why not: {c.why_not}")
            misses.setExpanded(True)
        if rec.left_out:
            left = QTreeWidgetItem([f"Left out ({len(rec.left_out)})"])
            self.tree.addTopLevelItem(left)
            for reason in rec.left_out:
                left.addChild(QTreeWidgetItem([reason]))
        if rec.recommended:
            self.tree.setCurrentItem(top.child(0))

    def _candidate(self, parent: QTreeWidgetItem, c, prefix: str) -> QTreeWidgetItem:
        placed = f" · {c.placement.describe()}" if c.placement else ""  # fits only placed so (the Lab offers it)
        item = QTreeWidgetItem(
            [
                f"{prefix}{c.label}{placed}",
                f"{c.score:+.1f}",
                format_bytes(c.needed_bytes),
                c.speed_text(),
                c.preset or "",
            ]
        )
        item.setData(0, ROLE, c)
        item.setToolTip(0, f"{c.target.repo}/{c.target.filename}\n{c.draft.repo}/{c.draft.filename}")
        for reason in c.reasons():
            child = QTreeWidgetItem([reason])
            child.setToolTip(0, reason)
            item.addChild(child)
        parent.addChild(item)
        return item

    # -- choosing --------------------------------------------------------------------------------
    def selected_candidate(self):
        item = self.tree.currentItem()
        while item is not None:
            c = item.data(0, ROLE)
            if c is not None:
                return c
            item = item.parent()
        return None

    def _selection_changed(self) -> None:
        c = self.selected_candidate()
        self.download_button.setEnabled(c is not None)
        if c is None:
            self.selection_label.setText("")
            return
        what = f"preset {c.preset}" if c.preset else "no preset: both files are fetched by name"
        if c.placement is not None:
            what += f" · fits with {c.placement.describe()} ({' '.join(c.placement_flags())}); the Lab places it so"
        miss = f" · {error_text(c.why_not, bold=False)}" if c.why_not else ""
        self.selection_label.setText(f"<b>{c.label}</b> · {what}{miss}")

    def _download_selected(self) -> None:
        c = self.selected_candidate()
        if c is not None:
            self.downloadRequested.emit(c)
