"""The Lab's chart widget on hand-made cycles: a real LiveCharts under the offscreen platform."""

import numpy as np

from app.widgets.live_charts import BAR_EVERY, MAX_POINTS, LiveCharts
from engine.measure.live import LiveSession
from tests.test_live import cyc


def feed(session, n, start=0, drafted=4, accepted=2):
    for i in range(start, start + n):
        session.add_cycle(cyc(i, drafted, accepted))


def legend_names(plot):
    return [label.text for _, label in plot.legend.items]


def test_axes_move_in_steps_and_hold_the_data(qtbot):
    charts = LiveCharts()
    qtbot.addWidget(charts)
    charts.show()
    clock = iter(np.arange(0, 1000, 0.01)).__next__  # 100 cycles a second
    session = LiveSession(clock=clock)
    changes = []
    charts.p_tps.vb.sigXRangeChanged.connect(lambda *_: changes.append("x"))
    charts.p_tps.vb.sigYRangeChanged.connect(lambda *_: changes.append("y"))
    frames = 0
    for _ in range(250):  # 10 s of cycles, a frame every 4 cycles
        feed(session, 4, start=session.cycles)
        assert charts.refresh(session.snapshot())
        frames += 1
    xs, ys = charts.c_tps.getData()
    (x0, x1), (y0, y1) = charts.p_tps.viewRange()
    assert x0 <= xs[0] and xs[-1] <= x1 and y0 <= 0 and np.nanmax(ys) <= y1
    # auto-ranging would move both axes every frame; whole steps move them a handful of times
    assert len(changes) <= 8, changes
    # bars follow every BAR_EVERY frames, with an axis for whole positions
    assert len(charts.b_pos.opts["x"]) == 4
    assert charts.frames_painted == frames and BAR_EVERY > 1


def test_a_sentence_stands_in_for_the_charts_until_a_run_has_a_step(qtbot):
    charts = LiveCharts()
    qtbot.addWidget(charts)
    charts.show()
    session = LiveSession()
    charts.refresh(session.snapshot())
    assert not charts.stack.drawn and charts.stack.placeholder.isVisible()
    feed(session, 3)
    charts.refresh(session.snapshot())
    assert charts.stack.drawn and charts.view.isVisible()
    charts.clear()  # a new run
    assert not charts.stack.drawn


def test_ceiling_joins_the_legend_only_when_known(qtbot):
    charts = LiveCharts()
    qtbot.addWidget(charts)
    charts.show()
    session = LiveSession()
    feed(session, 20)
    charts.refresh(session.snapshot())
    assert "bandwidth ceiling" not in legend_names(charts.p_tps)
    charts.ceiling_tps = 40000.0
    feed(session, 5, start=20)
    charts.refresh(session.snapshot())
    assert legend_names(charts.p_tps).count("bandwidth ceiling") == 1
    assert charts.p_tps.viewRange()[1][1] >= 40000.0


def test_hidden_charts_do_no_work(qtbot):
    charts = LiveCharts()
    qtbot.addWidget(charts)
    session = LiveSession()
    feed(session, 5)
    assert not charts.refresh(session.snapshot()) and charts.frames_painted == 0


def test_marker_lines_leave_with_their_cycles(qtbot):
    charts = LiveCharts()
    qtbot.addWidget(charts)
    charts.show()
    session = LiveSession(capacity=50)
    for round_ in range(10):  # a knob moved every 20 cycles, 200 cycles in all
        feed(session, 20, start=session.cycles)
        session.mark(f"K {round_}", cycle=session.cycles)
        charts.refresh(session.snapshot())
    lines_in_plot = [i for i in charts.p_tps.items if type(i).__name__ == "InfiniteLine"]
    assert 1 <= len(charts._marker_items) <= 3 and len(lines_in_plot) == len(charts._marker_items)
    assert [m.label for m, _ in charts._marker_items] == [m.label for m in session.markers]
    charts.clear()
    assert not [i for i in charts.p_tps.items if type(i).__name__ == "InfiniteLine"]


def test_a_full_ring_is_drawn_thinned_and_a_slow_cycle_still_shows(qtbot):
    charts = LiveCharts()
    qtbot.addWidget(charts)
    charts.show()
    clock = iter(np.arange(0, 1000, 0.01)).__next__
    session = LiveSession(clock=clock)
    feed(session, 1500)
    slow = cyc(1500, 4, 2)
    slow["verify_ms"] = 40.0  # one cycle far slower than the rest
    session.add_cycle(slow)
    feed(session, 1500, start=1501)
    snap = session.snapshot()
    charts.refresh(snap)
    xs, ys = charts.c_verify.getData()
    assert len(xs) <= MAX_POINTS < len(snap.series["t"])
    assert xs[-1] == snap.series["t"][-1]  # the newest cycle is always drawn
    assert ys.max() == 40.0 and np.count_nonzero(ys == 40.0) == 1
    assert len(charts.c_tps.getData()[0]) == len(xs) == len(charts.c_roll.getData()[0])


def test_a_right_click_opens_no_plot_menu(qtbot):
    """pyqtgraph's menu would offer auto range, log axes, FFT and downsampling: all at odds with the stepped
    ranges, and written for another kind of curve."""
    from PySide6.QtCore import QPoint, Qt
    from PySide6.QtWidgets import QApplication

    charts = LiveCharts()
    qtbot.addWidget(charts)
    charts.resize(900, 700)
    charts.show()
    qtbot.waitExposed(charts)
    session = LiveSession()
    feed(session, 50)
    charts.refresh(session.snapshot())
    view = charts.view
    for plot in (charts.p_tps, charts.p_acc, charts.p_time, charts.p_pos):
        centre = view.mapFromScene(plot.vb.sceneBoundingRect().center())
        qtbot.mouseClick(view.viewport(), Qt.MouseButton.RightButton, pos=QPoint(centre.x(), centre.y()))
        qtbot.wait(50)
        menu = QApplication.activePopupWidget()
        if menu is not None:
            menu.close()
        assert menu is None, f"a menu opened over {plot.titleLabel.text}"


def test_bars_describe_the_current_setting_and_the_whole_run_is_one_click_away(qtbot):
    charts = LiveCharts()
    qtbot.addWidget(charts)
    charts.show()
    session = LiveSession()
    feed(session, 20, drafted=4, accepted=3)
    session.mark("K 4→8")
    feed(session, 20, start=20, drafted=8, accepted=6)
    charts.refresh(session.snapshot(), bars=True)
    heights = charts.b_pos.opts["height"]
    assert np.allclose(heights, [1] * 6 + [0, 0])  # every step since the change accepted 6 of 8
    assert "since the last change" in charts.p_pos.titleLabel.text  # the marker on the time plots names it
    charts.whole_run.setChecked(True)  # repaints the bars at once from the last snapshot
    heights = charts.b_pos.opts["height"]
    assert np.allclose(heights, [1, 1, 1, 0.5, 0.5, 0.5, 0, 0]) and "whole run" in charts.p_pos.titleLabel.text
