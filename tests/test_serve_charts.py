"""The Serve page's charts on hand-made request records: a real ServeCharts under the offscreen platform."""

import numpy as np
import pytest

pytest.importorskip("PySide6")

from app.pages.serve.charts import ServeCharts  # noqa: E402
from engine.serve.watch import RequestRecord  # noqa: E402


def record(rid: int, drafted: int, accepted: int, status: int = 200, error: str = "") -> RequestRecord:
    return RequestRecord(
        id=rid, path="/v1/chat/completions", status=status, stream=True, started=float(rid), seconds=1.0,
        overlapped=2, generated_tokens=32, tokens_per_s=10.0 + rid, drafted=drafted, accepted=accepted, error=error,
    )  # fmt: skip


def test_requests_that_end_out_of_order_are_drawn_by_their_number(qtbot):
    charts = ServeCharts()
    qtbot.addWidget(charts)
    charts.show()
    charts.show_records([])
    assert not charts.stack.drawn
    # two clients at once: 2 ends before 1, 4 before 3; 5 failed (no point)
    ended = [record(2, 10, 5), record(1, 10, 10), record(4, 10, 0), record(3, 10, 5), record(5, 0, 0, 503, "down")]
    charts.show_records(ended, tuned_acceptance=0.6)
    assert charts.stack.drawn
    xs, ys = charts.rolling.getData()
    assert list(xs) == [1, 2, 3, 4], "the rolling line runs left to right, never back"
    assert np.allclose(ys, [1.0, 15 / 20, 20 / 30, 20 / 40])
    px, py = charts.speed_points.getData()
    assert list(px) == [1, 2, 3, 4] and list(py) == [11, 12, 13, 14]
    assert charts.tuned.isVisible() and charts.tuned.value() == 0.6
