"""The Lab's charts, painted from engine.measure.live snapshots by one timer.

Five plots: tokens/s (speculative against the measured baseline and, when
known, the bandwidth-bound ceiling), acceptance (rolling, cumulative, mean
accepted length), acceptance by draft position (bars), the histogram of
tokens kept per step (bars: 1 + accepted, so the mean accepted length is its
mean) and the time split per cycle (draft / verify / other).
Every knob change becomes a labelled vertical marker on the time plots.
The widget never paints per event: ``refresh(snapshot)`` is called by the
page's QTimer at ~25 Hz and skips work when hidden. Axis ranges are set here,
in steps (app.widgets.chart_ranges), not auto-ranged per frame, and the two
bar charts follow at a few hertz: both keep the GUI's share of a small
machine's CPU low while the engine runs beside it.
"""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QCheckBox, QFrame, QScrollArea, QSizePolicy, QVBoxLayout, QWidget

from app.widgets import style
from app.widgets.chart_legend import title_row_legend
from app.widgets.chart_ranges import StickyCeiling, time_window
from app.widgets.chart_stack import ChartStack
from app.widgets.style import BLUE, GREEN, GREY, ORANGE, PURPLE, RED
from engine.measure.live import Marker, Snapshot

pg.setConfigOptions(antialias=False, background="w", foreground="k")

PEN_SPEC = pg.mkPen(BLUE, width=1)
PEN_BASE = pg.mkPen(GREY, width=1, style=pg.QtCore.Qt.PenStyle.DashLine)
PEN_CEIL = pg.mkPen(RED, width=1, style=pg.QtCore.Qt.PenStyle.DotLine)
PEN_ROLL = pg.mkPen(GREEN, width=1)
PEN_CUM = pg.mkPen(PURPLE, width=1)
PEN_LEN = pg.mkPen(ORANGE, width=1)
BAR_EVERY = 6  # frames per bar-chart update: ~4 Hz at the page's 25 Hz
# The session keeps up to 2048 cycles; a plot is about 1000 px wide. Drawing every cycle
# cost a third of the GUI's CPU (path building and raster work for 9 curves, 25 times a second)
# for detail a screen cannot show. Past this many points a curve is thinned in whole bins
# (at 2048 cycles: 342 points, one every 2-3 px; 600 cost a fifth more per frame).
MAX_POINTS = 400


def thin(t: np.ndarray, step: int) -> np.ndarray:
    """Every step-th time, ending on the newest: the bins' right edges."""
    return t[len(t) - 1 - (len(t) - 1) // step * step :: step] if step > 1 else t


def thin_peaks(y: np.ndarray, step: int) -> np.ndarray:
    """The largest value of each bin (aligned with thin()), so a slow cycle still shows as a spike."""
    if step <= 1:
        return y
    n = (len(y) - 1) // step * step + 1  # the oldest point stands alone, the rest in whole bins
    head, body = y[: len(y) - n + 1], y[len(y) - n + 1 :]
    return np.concatenate([head[-1:], body.reshape(-1, step).max(axis=1)])


def _curve(plot: pg.PlotItem, pen, name: str | None = None) -> pg.PlotCurveItem:
    """A bare curve: plot.plot()'s PlotDataItem wraps one in symbols, log modes and its own dataset
    bookkeeping, which cost a quarter of each frame's CPU here and draw nothing these charts use."""
    curve = pg.PlotCurveItem(pen=pen, name=name)
    plot.addItem(curve)  # the plot's legend takes a named curve
    return curve


# in place of the plots until a run has a step to draw (app.widgets.chart_stack)
PLACEHOLDER = (
    "The charts follow a run as it goes: tokens/s against the measured baseline, acceptance, acceptance by "
    "draft position, accepted lengths and where each step's time went. Start (Ctrl+Return) loads the pair "
    "if it is not loaded and runs it; a knob moved during the run shows as a marked line."
)

MIN_VIEW_HEIGHT = 560  # logical pixels, for the four rows of plots


class LiveCharts(QWidget):
    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.view = pg.GraphicsLayoutWidget()
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        # the two bar charts describe the current setting unless asked for the whole run: after K moves
        # from 4 to 8, a whole-run count divides positions 4-7 by steps that never drafted them
        self.whole_run = QCheckBox("bars over the whole run")
        self.whole_run.setToolTip(
            "Unchecked: acceptance by draft position and tokens kept per step count the steps since the last knob "
            "change, so they describe the setting in use. Checked: every step of the run, as llama-server counts."
        )
        self.whole_run.toggled.connect(self._bars_scope_changed)
        layout.addWidget(self.whole_run, 0, Qt.AlignmentFlag.AlignRight)
        # four rows of plots stay readable (about 140 px a row, axis labels apart) on a short window, such as
        # a 1080p laptop at 150 % scaling: they scroll there instead of being squeezed flat
        self.view.setMinimumHeight(MIN_VIEW_HEIGHT)
        # as wide as the scroll area, whatever the plots' titles would ask for
        self.view.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.scroll_area = QScrollArea()
        self.scroll_area.setWidget(self.view)
        self.scroll_area.setWidgetResizable(True)
        self.scroll_area.setFrameShape(QFrame.Shape.NoFrame)
        self.scroll_area.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.stack = ChartStack(self.scroll_area, PLACEHOLDER)
        layout.addWidget(self.stack)
        self._last_snapshot: Snapshot | None = None
        self._bars_title = ""
        self.ceiling_tps: float | None = None
        self.frames_painted = 0

        self._add_plots()
        self._x_window: tuple[float, float] | None = None
        self._tps_ceiling = StickyCeiling()
        self._time_ceiling = StickyCeiling()
        self._bar_sizes = (0, 0)

        self.c_tps = _curve(self.p_tps, PEN_SPEC, "speculative")
        self.c_base = _curve(self.p_tps, PEN_BASE, "baseline")
        self.c_ceiling = _curve(self.p_tps, PEN_CEIL)  # in the legend once a ceiling is known
        self.c_roll = _curve(self.p_acc, PEN_ROLL, "rolling")
        self.c_cum = _curve(self.p_acc, PEN_CUM, "cumulative")
        self.c_len = _curve(self.p_acc, PEN_LEN, "accepted length / longest possible")
        self.c_draft = _curve(self.p_time, pg.mkPen(BLUE), "draft")
        self.c_verify = _curve(self.p_time, pg.mkPen(GREEN), "verify")
        self.c_other = _curve(self.p_time, pg.mkPen(RED), "other")
        self.b_pos = pg.BarGraphItem(x=[], height=[], width=0.7, brush=GREEN)
        self.p_pos.addItem(self.b_pos)
        self.p_pos.setYRange(0, 1.05, padding=0)
        self.p_hist.setYRange(0, 1.05, padding=0)
        self.p_pos.setLabel("bottom", "draft position")
        self.b_hist = pg.BarGraphItem(x=[], height=[], width=0.7, brush=BLUE)
        self.p_hist.addItem(self.b_hist)
        # 1 + the draft tokens accepted: the bonus token counts, as in the stats line's mean accepted length,
        # so that mean always lies between the bars (it once read 16.80 over bars that ended at 16)
        self.p_hist.setLabel("bottom", "tokens kept per step (1 + accepted)")
        for p in (self.p_pos, self.p_hist):
            p.getAxis("bottom").setTickSpacing(1, 1)  # whole positions and lengths only
        self._marker_items: list[tuple[Marker, tuple[pg.InfiniteLine, ...]]] = []

    def _add_plots(self) -> None:
        """The five plots in four rows, their titles with legends in them, and no mouse, menu or SI prefix."""
        self.p_tps = self.view.addPlot(row=0, col=0, colspan=2, title="tokens/s")
        self.p_acc = self.view.addPlot(row=1, col=0, colspan=2, title="acceptance")
        self.p_pos = self.view.addPlot(row=2, col=0, title="acceptance by draft position")
        self.p_hist = self.view.addPlot(row=2, col=1, title="tokens kept per step")
        self.p_time = self.view.addPlot(row=3, col=0, colspan=2, title="time per cycle (ms)")
        # the two bar charts share the width alike, whatever their titles ask for
        self.view.ci.layout.setColumnStretchFactor(0, 1)
        self.view.ci.layout.setColumnStretchFactor(1, 1)
        # legends in the title rows, beside the titles, where they hide no data (app.widgets.chart_legend)
        # no downsampling or clipping by pyqtgraph: every point is in view and refresh() thins them
        # no grid: axis items paint grid lines through QPicture, the costliest part of a frame
        title_row_legend(self.p_tps, "tokens/s", 3)
        title_row_legend(self.p_acc, "acceptance", 3)
        title_row_legend(self.p_time, "time per cycle (ms)", 3)
        # the three share one time axis: its unit once, under the lowest, leaves the others room for data
        self.p_time.setLabel("bottom", "seconds since the run started")
        for p in (self.p_tps, self.p_acc, self.p_time, self.p_pos, self.p_hist):
            p.disableAutoRange()
            p.setMouseEnabled(x=False, y=False)
            # no right-click menu: its view and plot options (auto range, log, FFT, alpha, downsampling) fight
            # the stepped ranges and assume PlotDataItem curves; File > Save charts (Ctrl+S) saves a PNG
            p.setMenuEnabled(False)
            for name in ("left", "bottom"):
                p.getAxis(name).enableAutoSIPrefix(False)  # a changing prefix re-lays out the label
        self.p_acc.setYRange(0, 1.05, padding=0)

    def clear(self) -> None:
        for curve in (
            self.c_tps,
            self.c_base,
            self.c_ceiling,
            self.c_roll,
            self.c_cum,
            self.c_len,
            self.c_draft,
            self.c_verify,
            self.c_other,
        ):
            curve.setData([], [])
        self.b_pos.setOpts(x=[], height=[])
        self.b_hist.setOpts(x=[], height=[])
        self._drop_markers(len(self._marker_items))
        self._x_window = None
        self._tps_ceiling.reset()
        self._time_ceiling.reset()
        self._bar_sizes = (0, 0)
        self._last_snapshot, self._bars_title = None, ""
        self.stack.show_placeholder()

    def refresh(self, snap: Snapshot, bars: bool = False) -> bool:
        """Repaint from a snapshot; returns False (and does nothing) while hidden. The bar charts
        follow every BAR_EVERY frames, or now with ``bars`` (a run ended, a PNG is wanted)."""
        if not self.isVisible():
            return False
        s = snap.series
        t = s["t"]
        if len(t):
            self.stack.show_plots()
            # smooth instantaneous tokens/s over a few cycles so the line stays readable
            tps = s["tps"]
            if len(tps) >= 8:
                tps = np.convolve(tps, np.ones(8) / 8, mode="same")
            step = -(-len(t) // MAX_POINTS)
            tt = thin(t, step)
            self.c_tps.setData(tt, thin(tps, step), skipFiniteCheck=True)
            if snap.baseline_tps:
                self.c_base.setData([t[0], t[-1]], [snap.baseline_tps] * 2)
            if self.ceiling_tps:
                if self.c_ceiling.name() is None:
                    self.c_ceiling.opts["name"] = "bandwidth ceiling"
                    self.p_tps.legend.addItem(self.c_ceiling, "bandwidth ceiling")
                self.c_ceiling.setData([t[0], t[-1]], [self.ceiling_tps] * 2)
            self.c_roll.setData(tt, thin(s["rolling_acceptance"], step), connect="finite")
            self.c_cum.setData(tt, thin(s["cumulative_acceptance"], step), connect="finite")
            # accepted length counts the bonus token: drafted + 1 is the best a step can do
            self.c_len.setData(tt, thin(s["length_share"], step), connect="finite")
            self.c_draft.setData(tt, thin_peaks(s["draft_ms"], step), skipFiniteCheck=True)
            self.c_verify.setData(tt, thin_peaks(s["verify_ms"], step), skipFiniteCheck=True)
            self.c_other.setData(tt, thin_peaks(s["other_ms"], step), skipFiniteCheck=True)
            self._follow_data(t, tps, s, snap.baseline_tps)
        if bars or self.frames_painted % BAR_EVERY == 0 or not self._bar_sizes[0]:
            self._refresh_bars(snap)
        self._sync_markers(snap.markers)
        self.frames_painted += 1
        return True

    def _follow_data(self, t: np.ndarray, tps: np.ndarray, s: dict, baseline: float | None) -> None:
        """Move the axes only when the data has left them (see chart_ranges)."""
        window = time_window(float(t[0]), float(t[-1]))
        if window != self._x_window:
            self._x_window = window
            for p in (self.p_tps, self.p_acc, self.p_time):
                p.setXRange(*window, padding=0)
        top = max(float(np.nanmax(tps)), baseline or 0.0, self.ceiling_tps or 0.0)
        if self._tps_ceiling.update(top):
            self.p_tps.setYRange(0, self._tps_ceiling.value, padding=0)
        slowest = float(np.nanmax([s["draft_ms"].max(), s["verify_ms"].max(), s["other_ms"].max()]))
        if self._time_ceiling.update(slowest):
            self.p_time.setYRange(0, self._time_ceiling.value, padding=0)

    def _sync_markers(self, markers: list[Marker]) -> None:
        """Lines for new markers; those the session has dropped (older than its ring) go."""
        if self._marker_items and (not markers or self._marker_items[0][0] is not markers[0]):
            kept = {id(m) for m in markers}
            self._drop_markers(sum(1 for m, _ in self._marker_items if id(m) not in kept))
        for m in markers[len(self._marker_items) :]:
            lines = []
            for plot in (self.p_tps, self.p_acc, self.p_time):
                line = pg.InfiniteLine(
                    pos=m.t,
                    angle=90,
                    pen=pg.mkPen(style.current().guide, width=1, style=Qt.PenStyle.DashLine),
                    movable=False,
                    label=m.label if plot is self.p_tps else None,
                    labelOpts={"position": 0.92, "color": style.current().label, "anchors": [(0, 0), (0, 0)]},
                )
                plot.addItem(line)
                lines.append(line)
            self._marker_items.append((m, tuple(lines)))

    def _drop_markers(self, n: int) -> None:
        """Remove the oldest n markers' lines (markers only ever leave from the front)."""
        for _, lines in self._marker_items[:n]:
            for plot, line in zip((self.p_tps, self.p_acc, self.p_time), lines):
                plot.removeItem(line)
        del self._marker_items[:n]

    def _bars_scope_changed(self) -> None:
        if self._last_snapshot is not None and self.isVisible():
            self._refresh_bars(self._last_snapshot)

    def _refresh_bars(self, snap: Snapshot) -> None:
        self._last_snapshot = snap
        if self.whole_run.isChecked() or snap.current_since is None:
            accepted, histogram = snap.accepted_by_position, snap.length_histogram
            scope = "whole run"
        else:
            accepted, histogram = snap.current_accepted_by_position, snap.current_length_histogram
            scope = "since the last change"
        if scope != self._bars_title:
            self._bars_title = scope
            # the scope on a second, smaller line: on one line the two titles asked for 770 px, more than the
            # charts get at 1280x720, and pushed the right-hand charts out of view
            scope_line = f"<br><span style='font-size:small'>{scope}</span>"
            self.p_pos.setTitle(f"acceptance by position{scope_line}")
            self.p_hist.setTitle(f"tokens kept per step{scope_line}")
        steps = max(int(histogram.sum()), 1)
        n_pos, n_len = len(accepted), len(histogram)
        # as llama-server prints it: steps that accepted position i / all verify steps (of this scope)
        self.b_pos.setOpts(x=np.arange(n_pos), height=accepted / steps)
        self.b_hist.setOpts(x=np.arange(1, n_len + 1), height=histogram / steps)
        if (n_pos, n_len) != self._bar_sizes:
            self._bar_sizes = (n_pos, n_len)
            self.p_pos.setXRange(-0.5, max(n_pos, 1) - 0.5, padding=0.02)
            self.p_hist.setXRange(0.5, max(n_len, 1) + 0.5, padding=0.02)

    def save_png(self, path: str) -> None:
        from pyqtgraph.exporters import ImageExporter

        ImageExporter(self.view.scene()).export(path)
