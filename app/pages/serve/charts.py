"""The Serve page's charts: one point per request the proxy passed on, newest on the right.

Tokens/s is llama-server's own generation speed for each request; acceptance is its accepted drafts
over its drafted ones, beside the rolling figure over the last requests and, when a tune measured
one for these settings, the tune's. A request that failed or drafted nothing has no acceptance point.
"""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6.QtWidgets import QVBoxLayout, QWidget

from app.widgets.chart_legend import title_row_legend
from app.widgets.chart_stack import ChartStack
from app.widgets.style import BLUE, GREEN, GREY
from engine.serve.watch import ROLLING, RequestRecord

SHOWN = 200  # requests on the charts
# in place of the plots until a request has an answer (app.widgets.chart_stack)
PLACEHOLDER = (
    "One point per request your tools send through the proxy: llama-server's tokens/s, and the share of its "
    f"drafts accepted beside the rolling figure over the last {ROLLING}. Start serving (Ctrl+Shift+S) and give "
    "the base URL to your IDE or chat client."
)


class RequestAxis(pg.AxisItem):
    """Request numbers are whole: no tick at request 1.5."""

    def tickValues(self, minVal, maxVal, size):  # noqa: N802, N803 (pyqtgraph's names)
        levels = super().tickValues(minVal, maxVal, size)
        return [(max(spacing, 1.0), [v for v in values if float(v).is_integer()]) for spacing, values in levels]


class ServeCharts(QWidget):
    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.view = pg.GraphicsLayoutWidget()
        self.stack = ChartStack(self.view, PLACEHOLDER)
        box = QVBoxLayout(self)
        box.addWidget(self.stack)
        box.setContentsMargins(0, 0, 0, 0)
        self.speed = self.view.addPlot(row=0, col=0, axisItems={"bottom": RequestAxis("bottom")})
        title_row_legend(self.speed, "tokens/s per request", columns=1)
        self.speed.setLabel("bottom", "request")
        self.speed_points = pg.ScatterPlotItem(size=6, brush=pg.mkBrush(BLUE), pen=None, name="generation speed")
        self.speed.addItem(self.speed_points)
        self.accept = self.view.addPlot(row=1, col=0, axisItems={"bottom": RequestAxis("bottom")})
        title_row_legend(self.accept, "acceptance per request", columns=3)
        self.accept.setLabel("bottom", "request")
        self.accept.setYRange(0, 1.05)
        self.accept_points = pg.ScatterPlotItem(size=6, brush=pg.mkBrush(GREEN), pen=None, name="request")
        self.accept.addItem(self.accept_points)
        self.rolling = pg.PlotCurveItem(pen=pg.mkPen(GREEN, width=2), name=f"last {ROLLING}")
        self.accept.addItem(self.rolling)
        self.tuned = pg.InfiniteLine(
            angle=0,
            pen=pg.mkPen(GREY, style=pg.QtCore.Qt.PenStyle.DashLine),
            label="when tuned",
            labelOpts={"position": 0.05, "color": GREY},
        )
        self.tuned.setVisible(False)
        self.accept.addItem(self.tuned)

    def show_records(self, records: list[RequestRecord], tuned_acceptance: float | None = None) -> None:
        # by request number, the charts' x: requests that overlap end in another order than they began, and a
        # rolling line drawn in the order they ended would double back on itself
        recs = sorted((r for r in records if r.status == 200 and not r.error), key=lambda r: r.id)[-SHOWN:]
        if recs:
            self.stack.show_plots()
        else:
            self.stack.show_placeholder()
        ids = np.array([r.id for r in recs], dtype=float)
        speeds = np.array([r.tokens_per_s for r in recs], dtype=float)
        self.speed_points.setData(ids, speeds)
        self.speed.setYRange(0, float(speeds.max()) * 1.1 if len(speeds) else 1.0)  # from 0: a ratio reads true
        drafted = [r for r in recs if r.drafted]
        self.accept_points.setData(
            np.array([r.id for r in drafted], dtype=float), np.array([r.accepted / r.drafted for r in drafted])
        )
        rolling_x, rolling_y = [], []
        for i, r in enumerate(drafted):
            window = drafted[max(0, i - ROLLING + 1) : i + 1]
            rolling_x.append(r.id)
            rolling_y.append(sum(w.accepted for w in window) / sum(w.drafted for w in window))
        self.rolling.setData(np.array(rolling_x, dtype=float), np.array(rolling_y, dtype=float))
        self.tuned.setVisible(tuned_acceptance is not None)
        if tuned_acceptance is not None:
            self.tuned.setValue(tuned_acceptance)

    def save_png(self, path: str) -> None:
        self.view.grab().save(path)
