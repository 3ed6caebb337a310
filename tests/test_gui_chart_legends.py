"""Chart legends hide no data: each sits in its plot's title row, clear of the view box and of the title
(app.widgets.chart_legend; issue 30 #6)."""

from __future__ import annotations

import pytest

pytest.importorskip("PySide6")

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
