"""Chart legends hide no data: each sits in its plot's title row, clear of the view box and of the title
(app.widgets.chart_legend; issue 30 #6)."""

from __future__ import annotations

import pytest

pytest.importorskip("PySide6")

from PySide6.QtCore import Qt  # noqa: E402
from PySide6.QtWidgets import QApplication  # noqa: E402


@pytest.mark.parametrize("width", [1100, 700])
def test_every_legend_is_clear_of_the_data_and_the_title(qtbot, width):
    from app.widgets.live_charts import LiveCharts
    from app.widgets.tune_charts import TuneCharts

    live, tune = LiveCharts(), TuneCharts()
    for w in (live, tune):
        qtbot.addWidget(w)
        w.resize(width, 700)
        w.show()
        qtbot.waitExposed(w)
    QApplication.processEvents()
    plots = [live.p_tps, live.p_acc, live.p_time, tune.p_k, tune.p_cost]
    for plot in plots:
        legend = plot.legend
        assert legend is not None and legend.items, plot.titleLabel.text
        box, data = legend.sceneBoundingRect(), plot.vb.sceneBoundingRect()
        assert not box.intersects(data), (plot.titleLabel.text, box, data)
        title = plot.titleLabel.item.sceneBoundingRect()
        assert not box.intersects(title), (plot.titleLabel.text, box, title)
        assert plot.sceneBoundingRect().contains(box), plot.titleLabel.text  # and within its own chart


def test_the_mean_accepted_length_lies_within_the_length_bars(qtbot):
    """Issue 51: an n-gram run read "mean accepted length 16.80" over a histogram whose last bar was 16,
    because the bars counted accepted drafts and the mean counts the bonus token too. The bars now
    count tokens kept per step, so the mean is theirs."""
    from app.widgets.live_charts import LiveCharts
    from engine.measure.live import LiveSession

    from .test_why import feed

    s = LiveSession()
    feed(s, 30, k=16, accepted=16, verify_ms=lambda b: 10.0, draft_ms_per_token=0.1)
    feed(s, 10, k=16, accepted=0, verify_ms=lambda b: 10.0, draft_ms_per_token=0.1)
    live = LiveCharts()
    qtbot.addWidget(live)
    live.resize(1000, 700)
    live.show()
    qtbot.waitExposed(live)
    snap = s.snapshot()
    assert live.refresh(snap, bars=True)
    x, height = list(live.b_hist.opts["x"]), list(live.b_hist.opts["height"])
    mean = s.stats.mean_accepted_length
    assert mean == pytest.approx(1 + 16 * 30 / 40)
    assert min(x) <= mean <= max(x) == 17
    # the bars' own mean is the stats line's
    assert sum(xi * h for xi, h in zip(x, height)) == pytest.approx(mean)
    assert "tokens kept per step" in live.p_hist.titleLabel.text


def test_a_long_knob_change_label_does_not_widen_the_bar_charts(qtbot):
    """Issue 51: after a method change the bar charts' titles named it whole, widened their column and cut
    off the right-hand charts and the marker; the titles now say "since the last change" and the marker
    on the time plots names it."""
    from app.widgets.live_charts import LiveCharts
    from engine.measure.live import LiveSession

    from .test_why import feed

    s = LiveSession()
    feed(s, 20, k=4, accepted=2, verify_ms=lambda b: 10.0, draft_ms_per_token=0.1)
    live = LiveCharts()
    qtbot.addWidget(live)
    live.resize(620, 700)  # what the charts get of a 1280x720 window beside the Lab's controls
    live.show()
    qtbot.waitExposed(live)
    live.refresh(s.snapshot(), bars=True)
    live.whole_run.setChecked(False)
    long = "method ngram-mod,ngram-map-k4v,draft-simple, K 2→6, n-match 24, n-min 48, n-max 64"
    widths = []
    for label in ("K 4→6", long):
        s.mark(label)
        feed(s, 20, k=6, accepted=3, verify_ms=lambda b: 10.0, draft_ms_per_token=0.1)
        live.refresh(s.snapshot(), bars=True)
        QApplication.processEvents()
        title = live.p_hist.titleLabel.text
        assert title.startswith("tokens kept per step") and "since the last change" in title
        widths.append((live.p_pos.minimumWidth(), live.p_hist.minimumWidth()))
        needed = live.view.ci.effectiveSizeHint(Qt.SizeHint.MinimumSize).width()
        assert needed <= live.view.width(), f"the charts need {needed:.0f} px of {live.view.width()}: cut off"
    assert widths[0] == widths[1], "the label's length does not reach the titles"
