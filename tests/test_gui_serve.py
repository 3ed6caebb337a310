"""The Serve page under the offscreen platform: the real bundled llama-server on the demo pair behind the
proxy, a real HTTP client's requests shown, the server killed and restarted, the recording handed to the
Tune page."""

from __future__ import annotations

import json
import os
import signal
import socket
import urllib.request

import pytest

pytest.importorskip("PySide6")

from PySide6.QtGui import QImage  # noqa: E402

from app.pages.serve.page import COLUMNS  # noqa: E402
from engine.core.settings import SpecSettings  # noqa: E402
from engine.core.workloads import load_workload  # noqa: E402

from .test_gui_tune import WAIT, make_window  # noqa: E402

pytestmark = pytest.mark.server


@pytest.fixture
def window(qtbot, tmp_path, monkeypatch):
    monkeypatch.setenv("SPECTUNE_DATA_DIR", str(tmp_path / "data"))
    w = make_window(qtbot, tmp_path, monkeypatch)
    yield w
    w.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def chat(url: str) -> dict:
    body = {"messages": [{"role": "user", "content": "def add(a, b):"}], "max_tokens": 16}
    req = urllib.request.Request(
        url + "/chat/completions", json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=60) as resp:
        return json.loads(resp.read())


def test_serve_shows_the_url_each_request_a_dead_server_and_hands_the_recording_to_tune(qtbot, window, tmp_path):
    window.session.use_demo_pair()
    window.lab.controls.ctx.setValue(384)
    window.show_page("Serve")
    page = window.serve
    # what Start will serve, said before it starts and kept current as the Lab's knobs move
    window.session.set_spec_settings(SpecSettings("draft-simple", draft_n_max=2))
    assert "context 384" in page.lab_summary.text() and "<b>draft-simple K=2</b>" in page.lab_summary.text()
    window.lab.controls.k.setValue(3)
    assert "<b>draft-simple K=3</b>" in page.lab_summary.text()
    port = free_port()
    page.port.setValue(port)
    page.record.setChecked(True)
    page.record_path.setText(str(tmp_path / "traffic.jsonl"))
    assert page.start()
    assert not page.start_button.isEnabled() and page.stop_button.isEnabled()
    qtbot.waitUntil(lambda: page.state == "serving", timeout=WAIT)
    assert page.url.text() == f"http://127.0.0.1:{port}/v1"
    assert not page.charts.stack.drawn, "a sentence on what the charts will show, not bare axes"
    window.save_charts(str(tmp_path / "serve.png"))  # Ctrl+S with nothing drawn: says so, writes nothing
    assert "not drawn" in window.statusBar().currentMessage() and not (tmp_path / "serve.png").exists()
    assert "--spec-type" in page.log.toPlainText() or "llama" in page.log.toPlainText()

    answer = chat(page.url.text())
    qtbot.waitUntil(lambda: page.table.rowCount() == 1, timeout=WAIT)
    row = [page.table.item(0, c).text() for c in range(page.table.columnCount())]
    assert row[2] == "200" and row[4] == str(answer["usage"]["completion_tokens"])
    assert "acceptance" in page.summary.text() and "1 recorded" in page.summary.text()
    assert page.charts.stack.drawn
    window.save_charts(str(tmp_path / "serve.png"))  # Ctrl+S on the Serve page saves its charts, not the Lab's
    assert QImage(str(tmp_path / "serve.png")).size() == page.charts.view.size()

    # a Lab run waits while the server serves: both would compete for the machine
    assert "Serve page" in (window.jobs.not_now("lab") or "")

    os.kill(page.serving.server.pid, signal.SIGKILL)
    qtbot.waitUntil(lambda: page.state == "down", timeout=WAIT)
    assert "exited with status" in page.status.text() and page.restart_button.isEnabled()
    page.restart()
    qtbot.waitUntil(lambda: page.state == "serving", timeout=WAIT)
    chat(page.url.text())
    qtbot.waitUntil(lambda: page.table.rowCount() == 2, timeout=WAIT)

    page.stop()
    qtbot.waitUntil(lambda: page.state == "idle", timeout=WAIT)
    assert page.serving is None and page.start_button.isEnabled()
    assert len(load_workload(tmp_path / "traffic.jsonl").prompts) == 2

    page.tune_button.click()
    assert window.current_page() == "Tune"
    assert (
        window.tune.workload.currentText().endswith("traffic.jsonl") or "traffic" in window.tune.workload.currentText()
    )


def test_a_taken_port_is_said_and_nothing_keeps_running(qtbot, window):
    window.session.use_demo_pair()
    page = window.serve
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        page.port.setValue(s.getsockname()[1])
        assert page.start()
        qtbot.waitUntil(lambda: page.state == "idle", timeout=WAIT)
    assert "Could not start serving" in page.status.text() and str(page.port.value()) in page.status.text()
    assert page.serving is None and not page.busy


def test_stop_while_starting_gives_up_the_start(qtbot, window):
    window.session.use_demo_pair()
    page = window.serve
    page.port.setValue(free_port())
    assert page.start()
    page.stop()
    qtbot.waitUntil(lambda: page.state == "idle", timeout=WAIT)
    assert page.serving is None and not page.busy


def test_a_long_error_leaves_every_column_of_the_request_table_on_screen(qtbot, window):
    """Issue 51: a 400's 400-character message widened the status column until tok/s left the screen. The
    table shows its start; the cell's tooltip has all of it."""
    from engine.serve.watch import RequestRecord

    window.resize(1280, 720)
    window.show_page("Serve")
    page = window.serve
    message = "the request exceeds the available context size, try increasing it " * 6
    records = [
        RequestRecord(1, "/v1/chat/completions", 200, False, 0.0, 2.0, 1, 20, 0, 64, 31.5, 40, 30),
        RequestRecord(2, "/v1/chat/completions", 400, False, 1.0, 0.1, 1, error=message),
    ]
    page._fill_table(records)
    qtbot.wait(50)
    table = page.table
    status = table.item(0, 2)  # newest first
    assert status.text().startswith("400: the request") and len(status.text()) <= 32
    assert status.toolTip() == f"400: {message}"
    last = table.columnCount() - 1
    tps = COLUMNS.index("tok/s")
    assert table.columnViewportPosition(tps) + table.columnWidth(tps) <= table.viewport().width()
    assert table.columnViewportPosition(last) + table.columnWidth(last) <= table.viewport().width() + 1, (
        "every column fits: no horizontal scrolling to find a request's speed"
    )
