"""The Tune page's two charts, drawn once per finished tune.

Left: tokens/s against K for draft-simple, the cost model's prediction for every
K next to the K values that were measured, the measured baseline as a dashed
line and the best setting as a star. Right: the forward-pass time by batch size
that the prediction rests on (the target's verify curve, and the draft's when
there is one), so a reader can see why large K loses.
"""

from __future__ import annotations

import pyqtgraph as pg
from PySide6.QtWidgets import QVBoxLayout, QWidget

from app.widgets.chart_legend import title_row_legend
from app.widgets.chart_stack import ChartStack
from app.widgets.style import AMBER, BLUE, GREEN, GREY, NOTE_GREY, ORANGE, PURPLE
from engine.measure.tuner import TuneResult

PEN_PRED = pg.mkPen(BLUE, width=2)
PEN_BASE = pg.mkPen(GREY, width=1, style=pg.QtCore.Qt.PenStyle.DashLine)
PEN_VERIFY = pg.mkPen(PURPLE, width=2)
PEN_DRAFT = pg.mkPen(ORANGE, width=2)
BRUSH_MEASURED = pg.mkBrush(GREEN)
BRUSH_BEST = pg.mkBrush(AMBER)

# in place of the plots until there is something to draw (app.widgets.chart_stack)
PLACEHOLDER = (
    "The charts are drawn when a tune's search ends: draft-simple's tokens/s by K, predicted beside measured, "
    "and the forward time by batch size that the prediction rests on."
)


class TuneCharts(QWidget):
    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.view = pg.GraphicsLayoutWidget()
        self.stack = ChartStack(self.view, PLACEHOLDER)
        self.placeholder = self.stack.placeholder
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.stack)
        self.p_k = self.view.addPlot(row=0, col=0, title="draft-simple: tokens/s by K")
        self.p_k.setLabel("bottom", "K (draft tokens per step)")
        self.p_k.setLabel("left", "tokens/s")
        title_row_legend(self.p_k, "draft-simple: tokens/s by K", 2, below_title=True)
        self.p_cost = self.view.addPlot(row=0, col=1, title="forward time by batch size")
        self.p_cost.setLabel("bottom", "tokens in the batch")
        self.p_cost.setLabel("left", "ms")
        title_row_legend(self.p_cost, "forward time by batch size", 2, below_title=True)
        self.c_pred = self.p_k.plot(pen=PEN_PRED, symbol="o", symbolSize=5, symbolBrush=BLUE, name="predicted")
        self.c_meas = self.p_k.plot(pen=None, symbol="s", symbolSize=9, symbolBrush=BRUSH_MEASURED, name="measured")
        self.c_best = self.p_k.plot(pen=None, symbol="star", symbolSize=16, symbolBrush=BRUSH_BEST, name="best")
        self.c_base = self.p_k.plot(pen=PEN_BASE, name="baseline (no speculation)")
        self.c_verify = self.p_cost.plot(
            pen=PEN_VERIFY, symbol="o", symbolSize=5, symbolBrush=PURPLE, name="target verify"
        )
        self.c_draft = self.p_cost.plot(
            pen=PEN_DRAFT, symbol="t", symbolSize=6, symbolBrush=ORANGE, name="draft forward"
        )

    @property
    def drawn(self) -> bool:
        return self.stack.drawn

    def clear(self) -> None:
        self.stack.show_placeholder()
        for curve in (self.c_pred, self.c_meas, self.c_best, self.c_base, self.c_verify, self.c_draft):
            curve.setData([], [])
        self._title_note("")

    def show_result(self, result: TuneResult) -> None:
        self.clear()
        ks = sorted(result.predicted_by_k)
        self.c_pred.setData(ks, [result.predicted_by_k[k] for k in ks])
        # only plain draft-simple points belong on a K axis (p-min and combinations change the draft length rule)
        plain = [
            c for c in result.candidates if c.spec.spec_type == "draft-simple" and not c.spec.draft_p_min and c.measured
        ]
        plain.sort(key=lambda c: c.spec.draft_n_max)
        self.c_meas.setData([c.spec.draft_n_max for c in plain], [c.measured_tps for c in plain])
        best = result.best
        if best in plain:
            self.c_best.setData([best.spec.draft_n_max], [best.measured_tps])
        xs = ks or [c.spec.draft_n_max for c in plain] or [1]
        if result.baseline_tps:
            self.c_base.setData([min(xs), max(xs)], [result.baseline_tps] * 2)
        notes = []
        if result.costs is None:  # an engine that cannot time passes (llama-server): K measured, not predicted
            notes.append("measured through llama-server: K at a few values, no pass costs")
        elif not ks:
            notes.append("no draft model: only n-gram methods were measured (see the table)")
        if plain and best not in plain:
            notes.append(f"the best, {best.label}, is not on this axis (see the table)")
        self._title_note("; ".join(notes))
        if result.costs is not None:
            v = result.costs.verify
            self.c_verify.setData(list(v.sizes), list(v.ms))
            if result.costs.draft is not None:
                d = result.costs.draft
                self.c_draft.setData(list(d.sizes), list(d.ms))
        self.p_k.enableAutoRange()
        self.p_cost.enableAutoRange()
        self.stack.show_plots()

    def _title_note(self, note: str) -> None:
        title = "draft-simple: tokens/s by K"
        self.p_k.setTitle(title + (f"<br><span style='font-size:8pt;color:{NOTE_GREY}'>{note}</span>" if note else ""))

    def save_png(self, path: str) -> None:
        self.grab().save(path)
