"""Validation from the Export page under the offscreen platform: the real bundled
llama-server and a real engine worker on the synthetic pair."""

from __future__ import annotations

import os
import subprocess

import pytest

pytest.importorskip("PySide6")

from PySide6.QtCore import Qt  # noqa: E402
from PySide6.QtWidgets import QApplication  # noqa: E402

from engine.measure.history import History  # noqa: E402

from .test_gui_tune import WAIT, make_window, set_pair, until_the_app_is_quiet  # noqa: E402

pytestmark = pytest.mark.server


@pytest.fixture
def window(qtbot, tmp_path, monkeypatch):
    monkeypatch.setenv("SPECTUNE_DATA_DIR", str(tmp_path / "data"))  # a history of its own
    w = make_window(qtbot, tmp_path, monkeypatch)
    until_the_app_is_quiet()  # a validation waits for the window's first ranking and scan (app.quiet_wait)
    yield w
    w.close()


def _servers() -> list[str]:
    out = subprocess.run(["ps", "-o", "comm=", "--ppid", str(os.getpid())], capture_output=True, text=True).stdout
    return [name for name in out.split() if "llama-server" in name]


def test_validation_shows_lab_and_server_side_by_side_and_saves_it(qtbot, window, pair):
    set_pair(window, pair, k=3)
    window.lab.controls.max_tokens.setValue(24)
    window.show_page("Export")
    page = window.export
    page.max_tokens.setValue(24)
    steps: list[tuple[int, int]] = []
    paces: list[str] = []  # the status line after a run is done: the time so far and an estimate of the rest
    page.max_tokens.setFocus()  # page shortcuts work where the focus is on the page
    with qtbot.waitSignal(page.validationRecorded, timeout=WAIT) as recorded:
        qtbot.keyClick(
            page.max_tokens, Qt.Key.Key_V, Qt.KeyboardModifier.ControlModifier | Qt.KeyboardModifier.ShiftModifier
        )
        assert page.validating and not page.validate_button.isEnabled() and page.progress.isVisible()
        page.runner.progress.connect(lambda done, total, _what: steps.append((done, total)))
        page.runner.progress.connect(
            lambda done, total, _w: 0 < done < total and paces.append(page.validate_status.text())
        )
    qtbot.waitUntil(lambda: not page.validating, timeout=WAIT)
    report = page.last_report
    assert report is not None, page.last_error
    assert report["agree"] is True and report["mode"] == "side by side"
    assert report["lab"]["drafted"] == report["server"]["drafted"] > 0
    assert steps and all(total == 2 for _, total in steps)  # one prompt: one run on each side
    assert paces and all(" so far, about " in p and "left at this pace" in p for p in paces), paces
    text = page.report.toPlainText()
    assert "agree: yes" in text and "llama-server / lab speed" in text
    assert "counts agree" in page.validate_status.text() and "saved to the history" in page.validate_status.text()
    assert page.validate_button.isEnabled() and not page.progress.isVisible()
    with History() as h:
        entry = h.get(recorded.args[0])
    assert entry.kind == "validate" and entry.results["agree"] is True
    assert window.history.table.rowCount() == 1  # the History page was told


def test_cancel_stops_the_server_and_the_page_stays_usable(qtbot, window, pair):
    set_pair(window, pair, k=3)
    window.show_page("Export")
    page = window.export
    page.max_tokens.setValue(4000)  # long enough that only a cancel ends it soon
    assert page.start_validation()
    qtbot.waitUntil(lambda: page.progress.maximum() == 2, timeout=WAIT)  # runs are under way
    qtbot.wait(300)
    page.command.setFocus()
    with qtbot.waitSignal(page.runner.cancelled, timeout=WAIT):
        qtbot.keyClick(page.command, Qt.Key.Key_Escape)
    qtbot.waitUntil(lambda: not page.validating, timeout=WAIT)
    assert page.last_report is None and "cancelled" in page.validate_status.text()
    assert not _servers()
    assert page.validate_button.isEnabled()


def test_settings_that_cannot_run_are_explained_without_starting(qtbot, window, incompatible_pair):
    page = window.export
    # from the keyboard: Ctrl+5 shows the Export page with the focus in it, Ctrl+Shift+V validates
    window.nav.setFocus()
    qtbot.keyClick(window.nav, Qt.Key.Key_5, Qt.KeyboardModifier.ControlModifier)
    assert window.stack.currentWidget() is page
    qtbot.keyClick(
        QApplication.focusWidget(),
        Qt.Key.Key_V,
        Qt.KeyboardModifier.ControlModifier | Qt.KeyboardModifier.ShiftModifier,
    )
    assert "Cannot validate: choose a target model" in page.validate_status.text()  # no models chosen yet
    assert not page.validating
    set_pair(window, incompatible_pair)
    assert not page.start_validation()
    assert "Cannot validate" in page.validate_status.text() and "vocab" in page.validate_status.text().lower()
    assert not page.validating


def test_closing_the_window_mid_validation_stops_everything(qtbot, tmp_path, monkeypatch, pair):
    monkeypatch.setenv("SPECTUNE_DATA_DIR", str(tmp_path / "data"))
    w = make_window(qtbot, tmp_path, monkeypatch, name="close.ini")
    until_the_app_is_quiet()
    set_pair(w, pair, k=3)
    w.export.max_tokens.setValue(4000)
    assert w.export.start_validation()
    qtbot.waitUntil(lambda: w.export.progress.maximum() == 2, timeout=WAIT)
    runner = w.export.runner
    w.close()
    assert not runner.isRunning() and w.export.runner is None
    assert not _servers()


def test_on_a_gpu_the_labs_copy_is_freed_before_validation_starts(qtbot, window, pair, monkeypatch):
    """No GPU here, so the controller's GPU test is the stand-in; the unload, the wait, the worker
    processes and the server are real."""
    from app.engine_controller import EngineController

    monkeypatch.setattr(EngineController, "uses_gpu", property(lambda self: self.loaded_info is not None))
    set_pair(window, pair, k=3)
    lab, controller = window.lab, window.controller
    lab.controls.max_tokens.setValue(100_000)
    with qtbot.waitSignal(controller.hello, timeout=WAIT):
        controller.start()
    lab.start()
    qtbot.waitUntil(lambda: lab.live.cycles >= 3, timeout=WAIT)
    events: list[str] = []
    controller.unloaded.connect(lambda: events.append("lab unloaded"))
    page = window.export
    # the page's progress slot is wrapped before the runner exists (the runner says "waiting" at once); as a
    # method of the page it stays a queued slot, so it runs in the GUI thread in order with "lab unloaded"
    shown = type(page)._on_progress

    def on_progress(self, done, total, what):
        if events[-1:] != [what]:
            events.append(what)
        shown(self, done, total, what)

    monkeypatch.setattr(type(page), "_on_progress", on_progress)
    page.max_tokens.setValue(16)
    assert page.start_validation()
    assert "freed" in page.validate_status.text()
    qtbot.waitUntil(lambda: not page.validating, timeout=WAIT)
    assert page.last_report is not None and page.last_report["agree"] is True, page.last_error
    assert events[:3] == [
        "waiting for the Lab to free its copy of the pair (it is on the GPU)",
        "lab unloaded",
        "starting the lab's engine",
    ], events
    assert controller.loaded_info is None


def test_a_tune_and_a_validation_do_not_run_at_once(qtbot, window, pair):
    set_pair(window, pair, k=3)
    tune, export = window.tune, window.export
    export.max_tokens.setValue(4000)
    assert export.start_validation()
    tune.start()
    assert tune.mode == "idle" and "a validation is running" in tune.banner.label.text()
    # nor does the Lab load or run beside it, from the keyboard either, with the focus left in the page list
    lab = window.lab
    window.show_page("Lab")
    window.nav.setFocus()
    tune.banner.hide()
    qtbot.keyClick(window.nav, Qt.Key.Key_Return, Qt.KeyboardModifier.ControlModifier)
    assert lab.mode == "idle" and window.controller.loaded_info is None
    assert tune.banner.isHidden(), "only the page in view answers Ctrl+Return"
    assert "a validation is running on the Export page" in lab.banner.label.text()
    lab.banner.hide()
    assert not lab.load() and "a validation is running" in lab.banner.label.text()
    export.cancel_validation()
    qtbot.waitUntil(lambda: not export.validating, timeout=WAIT)
    tune.mode = "running"  # the other way round, without the minute a real tune takes
    try:
        assert not export.start_validation() and "a tune is running" in export.validate_status.text()
    finally:
        tune.mode = "idle"


def test_a_validation_waits_for_the_apps_own_computing_work_and_esc_ends_the_wait(qtbot, window, pair):
    """A validation compares llama-server's speed with the Lab engine's: beside a ranking or a scan both would read
    the loaded machine. It waits as the Lab's baseline and a tune do (app.quiet_wait), counts as running meanwhile
    (nothing else measures), and Esc ends the wait without starting anything."""
    import threading

    from app.background import BackgroundJob, computing_jobs

    set_pair(window, pair, k=3)
    window.show_page("Export")
    page = window.export
    page.max_tokens.setValue(8)
    release = threading.Event()
    ranking = BackgroundJob("a-ranking", lambda _: release.wait(60), window, what="a ranking").start()
    qtbot.waitUntil(lambda: computing_jobs() == ["a ranking"], timeout=WAIT)  # the window's own first jobs end
    assert page.start_validation()
    assert "The validation starts once a ranking is done" in page.validate_status.text()
    assert page.validating and page.runner is None and page.cancel_button.isEnabled()
    assert "a validation is running" in (window.jobs.running_besides("tune") or "")
    qtbot.wait(600)
    assert page.runner is None and not _servers()  # nothing measured while it computes
    page.command.setFocus()
    qtbot.keyClick(page.command, Qt.Key.Key_Escape)
    assert not page.validating and "cancelled before it started" in page.validate_status.text()
    assert page.validate_button.isEnabled()
    qtbot.wait(600)
    assert page.runner is None
    assert page.start_validation() and page.runner is None
    release.set()
    qtbot.waitUntil(lambda: not ranking.running and page.runner is not None, timeout=WAIT)
    qtbot.waitUntil(lambda: not page.validating, timeout=WAIT)
    assert page.last_report is not None and page.last_report["agree"] is True, page.last_error
