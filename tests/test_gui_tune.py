"""The Tune page under the offscreen platform: real tunes on the synthetic pair, each
against the page's own engine worker process."""

from __future__ import annotations

import os
import signal

import pytest

pytest.importorskip("PySide6")

from PySide6.QtCore import QSettings, Qt  # noqa: E402
from PySide6.QtGui import QImage  # noqa: E402

from app.main_window import MainWindow  # noqa: E402
from app.pages.tune.page import LAB_PROMPT  # noqa: E402
from engine.core.settings import to_dict  # noqa: E402

from .conftest import PROMPTS  # noqa: E402

WAIT = 120_000  # ms; generous: the machine may be busy


def make_window(qtbot, tmp_path, monkeypatch, name="t.ini") -> MainWindow:
    monkeypatch.setenv("SPECTUNE_CONFIG_DIR", str(tmp_path / "config"))
    w = MainWindow(settings=QSettings(str(tmp_path / name), QSettings.Format.IniFormat))
    qtbot.addWidget(w)
    w.show()
    return w


@pytest.fixture
def window(qtbot, tmp_path, monkeypatch):
    """The window without the Lab's engine: the Tune page starts its own."""
    w = make_window(qtbot, tmp_path, monkeypatch)
    yield w
    w.close()


def set_pair(w, pair, k=4, method="draft-simple"):
    c = w.lab.controls
    c.target.set_path(pair[0])
    c.draft.set_path(pair[1])
    c.ctx.setValue(4096)
    c.threads.setValue(1)
    c.method.setCurrentText(method)
    c.k.setValue(k)
    c.temp.setValue(0.0)
    c.workload.setCurrentText("custom prompt")
    c.prompt.setPlainText(PROMPTS[1])


def record_tune_events(page) -> list[str]:
    """The kinds of the events the running tune's engine client receives, from now on (its reader thread
    appends them)."""
    kinds: list[str] = []
    page.runner.client.on_event = lambda ev: kinds.append(ev["event"])
    return kinds


def set_tune(page, prompts=3, max_tokens=16, budget=5, k_max=6, workload="code-completion"):
    page.workload.setCurrentText(workload)
    page.max_prompts.setValue(prompts)
    page.max_tokens.setValue(max_tokens)
    page.budget.setValue(budget)
    page.k_max.setValue(k_max)
    page.seed.setValue(3)
    until_the_app_is_quiet()


def until_the_app_is_quiet(timeout_s: float = WAIT / 1000) -> None:
    """A tune waits for the app's own computing work (app.quiet_wait): a new window's first ranking and scan end
    here first, the Qt events processed meanwhile, so that a test's Start starts at once."""
    import time

    from PySide6.QtCore import QCoreApplication

    from app.background import computing_jobs

    end = time.monotonic() + timeout_s
    while computing_jobs() and time.monotonic() < end:
        QCoreApplication.processEvents()
        time.sleep(0.02)
    assert not computing_jobs(), computing_jobs()


def process_gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


@pytest.mark.slow
def test_a_tune_fills_the_table_and_its_best_goes_to_the_lab(qtbot, window, pair, tmp_path):
    set_pair(window, pair, k=2, method="ngram-mod")
    window.show_page("Tune")
    page = window.tune
    set_tune(page)
    assert pair[0].name in page.lab_summary.text() and "context 4096" in page.lab_summary.text()
    assert page.progress_bar.isHidden(), "no progress to show before the first tune"
    assert not page.charts.drawn and page.charts.placeholder.isVisibleTo(page), "a line in place of empty axes"
    page.start_button.click()
    assert page.mode == "running" and not page.start_button.isEnabled() and page.cancel_button.isEnabled()
    assert not page.progress_bar.isHidden()
    qtbot.waitUntil(lambda: page.runner is not None and page.runner.client.pid is not None, timeout=WAIT)
    pid = page.runner.client.pid
    assert pid != window.controller.pid, "the tune has an engine process of its own"
    qtbot.waitUntil(lambda: page.mode == "idle", timeout=WAIT)
    result = page.result
    assert result is not None, page.log.toPlainText()[-2000:]
    assert not page.progress_bar.isHidden() and page.progress_bar.value() == 1  # full: done

    # the table: every candidate, the tuner's pick first and highlighted, numbers as the tuner measured them
    table = page.table
    assert table.rowCount() == len(result.candidates)
    assert table.best_row() == 0 and table.item(0, 1).text() == result.best.label
    assert table.item(0, 3).text() == f"{result.best.measured_tps:.1f}"
    assert table.item(0, 6).text() == str(max(len(c.measured) for c in result.candidates))
    table.sortItems(3, Qt.SortOrder.DescendingOrder)  # the highlight follows the row
    assert table.item(table.best_row(), 1).text() == result.best.label
    assert (
        "The search picked" in page.summary.text()
        and "Best:" not in page.summary.text()
        and f"{result.baseline_tps:.1f}" in page.summary.text()
    )
    # the chart: the model's prediction for every K up to K max, the measured K values beside it
    assert page.charts.drawn
    window.save_charts(str(tmp_path / "tune.png"))  # Ctrl+S on the Tune page saves the Tune page's charts
    assert QImage(str(tmp_path / "tune.png")).size() == page.charts.size()
    xs, _ = page.charts.c_pred.getData()
    assert list(xs) == list(range(1, 7))
    assert len(page.charts.c_meas.getData()[0]) >= 1
    assert "round with" in page.log.toPlainText()

    # the history has it, as spectune tune records it
    from engine.measure.history import History

    with History() as h:
        latest = h.entries(limit=1, kind="tune")
    assert latest and latest[0].settings["spec"] == to_dict(result.best.spec)
    assert latest[0].results["best"]["setting"] == result.best.label
    history = window.history.table
    assert any(history.item(r, 2).text() == "tune" for r in range(history.rowCount()))

    # apply: the Lab's knobs now describe the best setting exactly
    assert page.apply_button.isEnabled()
    page.apply_button.click()
    assert to_dict(window.lab.controls.spec_settings()) == to_dict(result.best.spec)
    assert result.best.label in page.status.text() and "changed since" not in page.status.text()
    window.lab.controls.ctx.setValue(2048)  # a tune is only as good as the pair it measured
    page.apply_button.click()
    assert "changed since this tune" in page.status.text()
    window.lab.controls.ctx.setValue(4096)
    # export: the Export page shows the command for it
    window.lab.controls.k.setValue(1)
    page.export_button.click()
    assert window.current_page() == "Export"
    assert f"--spec-type {result.best.spec.spec_type}" in window.export.command.toPlainText()
    assert window.lab.controls.k.value() == result.best.spec.draft_n_max

    # nothing left behind: the thread has ended and the tune's worker process is gone
    assert page.runner is None
    qtbot.waitUntil(lambda: process_gone(pid), timeout=10_000)


@pytest.mark.slow
def test_cancel_is_prompt_and_the_lab_run_is_stopped_first(qtbot, window, pair):
    set_pair(window, pair)
    lab = window.lab
    lab.controls.max_tokens.setValue(100_000)
    with qtbot.waitSignal(window.controller.hello, timeout=WAIT):
        window.controller.start()
    lab.start()
    qtbot.waitUntil(lambda: lab.live.cycles >= 3, timeout=WAIT)

    window.show_page("Tune")
    page = window.tune
    set_tune(page, prompts=2, max_tokens=3000)
    window.activateWindow()
    page.workload.setFocus()
    qtbot.keyClick(page.workload, Qt.Key.Key_Return, Qt.KeyboardModifier.ControlModifier)
    assert page.mode == "running", "Ctrl+Return starts a tune"
    assert "Lab's run was stopped" in page.status.text()
    qtbot.waitUntil(lambda: lab.mode == "idle", timeout=WAIT)

    # the Lab does not start during the tune, and says why
    lab.start()
    qtbot.waitUntil(lambda: lab.mode == "idle" and not lab.banner.isHidden(), timeout=WAIT)
    assert "tune is running" in lab.banner.label.text()

    # wait until a long generation is under way, then Esc
    events = record_tune_events(page)
    qtbot.waitUntil(lambda: "cycle" in events, timeout=WAIT)
    pid = page.runner.client.pid
    page.kill_timer.setInterval(10 * WAIT)  # the kill is for a load or a measurement: here the cancel must do
    page.workload.setFocus()
    qtbot.keyClick(page.workload, Qt.Key.Key_Escape)
    assert page.mode == "stopping", "Esc cancels"
    qtbot.waitUntil(lambda: page.mode == "idle", timeout=WAIT)
    # the 3000-token generation was cancelled by the engine, not waited for, and the worker was not killed
    assert "done" not in events and events.count("cancelled") == 1, events[-5:]
    assert "did not stop by itself" not in page.log.toPlainText()
    assert "cancelled" in page.status.text() and page.result is None
    assert page.start_button.isEnabled() and not page.apply_button.isEnabled()
    qtbot.waitUntil(lambda: process_gone(pid), timeout=10_000)


@pytest.mark.slow
def test_on_a_gpu_the_labs_copy_is_freed_before_the_tune_loads(qtbot, window, pair, monkeypatch):
    """Two copies of a pair may not fit in VRAM. No GPU here, so the controller's GPU test is the
    stand-in; the unload, the wait and both engine processes are real."""
    from app.engine_controller import EngineController

    monkeypatch.setattr(EngineController, "uses_gpu", property(lambda self: self.loaded_info is not None))
    set_pair(window, pair)
    lab, controller = window.lab, window.controller
    lab.controls.max_tokens.setValue(100_000)
    with qtbot.waitSignal(controller.hello, timeout=WAIT):
        controller.start()
    lab.start()  # loads, then runs
    qtbot.waitUntil(lambda: lab.live.cycles >= 3, timeout=WAIT)
    events: list[str] = []
    controller.unloaded.connect(lambda: events.append("lab unloaded"))
    window.show_page("Tune")
    page = window.tune
    set_tune(page, prompts=2, max_tokens=16)
    page.start_button.click()
    page.runner.progress.connect(lambda m: events.append("tune loaded") if m.startswith("loaded (n_ctx") else None)
    assert "freed" in page.status.text() or "freed" in page.log.toPlainText()
    qtbot.waitUntil(lambda: page.mode == "idle", timeout=WAIT)
    assert page.result is not None, page.log.toPlainText()[-2000:]
    # the Lab's run was stopped, then its pair freed, and only then did the tune load its own
    assert events == ["lab unloaded", "tune loaded"], events
    assert controller.loaded_info is None and "not loaded" in lab.controls.badges.text()
    # the Lab loads its pair again when started
    lab.controls.max_tokens.setValue(8)
    lab.start()
    qtbot.waitUntil(lambda: controller.loaded_info is not None and lab.live.cycles >= 1, timeout=WAIT)
    lab.stop()
    qtbot.waitUntil(lambda: lab.mode == "idle", timeout=WAIT)


def test_the_gpu_test_needs_a_gpu_device_offloaded_layers_and_a_loaded_pair(pair):
    from app.engine_controller import EngineController
    from engine.core.settings import LoadSettings

    c = EngineController()
    c.hello_info = {"devices": [{"name": "CPU", "description": "x"}, {"name": "CUDA0", "description": "H200"}]}
    c.load_settings, c.loaded_info = LoadSettings(pair[0], pair[1], ngl=-1), {"event": "loaded"}
    assert c.uses_gpu
    c.load_settings = LoadSettings(pair[0], pair[1], ngl=0, ngl_draft=0)
    assert not c.uses_gpu  # everything on the CPU
    c.load_settings = LoadSettings(pair[0], pair[1], ngl=0, ngl_draft=-1)
    assert c.uses_gpu  # the draft is on the GPU
    c.load_settings, c.loaded_info = LoadSettings(pair[0], pair[1], ngl=-1), None
    assert not c.uses_gpu and not c.unload()  # nothing loaded: nothing to free
    c.hello_info, c.loaded_info = {"devices": [{"name": "CPU", "description": "x"}]}, {"event": "loaded"}
    assert not c.uses_gpu  # a CPU build


@pytest.mark.slow
def test_a_killed_tune_worker_is_an_error_and_the_page_stays_usable(qtbot, window, pair):
    set_pair(window, pair)
    window.show_page("Tune")
    page = window.tune
    set_tune(page, prompts=2, max_tokens=3000)
    page.start()
    qtbot.waitUntil(lambda: page.runner is not None and page.runner.runs >= 1, timeout=WAIT)
    os.kill(page.runner.client.pid, signal.SIGKILL)
    qtbot.waitUntil(lambda: page.mode == "idle", timeout=WAIT)
    assert page.last_error is not None and page.last_error[0] == "crashed"
    assert page.banner.isVisible() and "SIGKILL" in page.banner.label.text()
    assert page.result is None and page.start_button.isEnabled()
    assert window.controller.state == "stopped", "the Lab's engine is not involved"

    # the page works again at once: a small tune on the Lab's prompt finishes
    set_tune(page, prompts=1, max_tokens=8, k_max=3, workload=LAB_PROMPT)
    page.start()
    qtbot.waitUntil(lambda: page.mode == "idle", timeout=WAIT)
    assert page.result is not None, page.banner.label.text()
    assert not page.banner.isVisible() and page.table.rowCount() == len(page.result.candidates)


@pytest.mark.slow
def test_closing_the_window_mid_tune_ends_thread_and_worker(qtbot, tmp_path, monkeypatch, pair):
    w = make_window(qtbot, tmp_path, monkeypatch)
    set_pair(w, pair)
    page = w.tune
    set_tune(page, prompts=2, max_tokens=3000)
    page.start()
    events = record_tune_events(page)
    qtbot.waitUntil(lambda: "cycle" in events, timeout=WAIT)  # a 3000-token generation is under way
    runner, pid = page.runner, page.runner.client.pid
    w.close()
    assert not runner.isRunning() and page.runner is None and page.mode == "idle"
    assert "done" not in events, "closing does not wait for the generation under way"
    qtbot.waitUntil(lambda: process_gone(pid), timeout=10_000)


def test_bad_input_is_explained_without_starting(qtbot, window, tmp_path, incompatible_pair):
    window.show_page("Tune")
    page = window.tune
    page.start()  # no target chosen on the Lab page
    assert page.mode == "idle" and page.runner is None
    assert page.banner.isVisible() and "target" in page.banner.label.text()

    set_pair(window, incompatible_pair)
    page.start()
    assert page.mode == "idle" and "vocabulary" in page.banner.label.text()

    bad = tmp_path / "bad.json"
    bad.write_text("{not json", encoding="utf-8")
    set_pair(window, incompatible_pair)
    window.lab.controls.draft.set_path(None)  # a target alone is fine (n-gram methods)
    page.set_workload_file(bad)
    page.start()
    assert page.mode == "idle" and "not valid JSON" in page.banner.label.text()


@pytest.mark.slow
def test_tune_settings_persist(qtbot, tmp_path, monkeypatch):
    w = make_window(qtbot, tmp_path, monkeypatch, "p.ini")
    set_tune(w.tune, prompts=4, max_tokens=48, budget=30, k_max=9, workload="creative")
    w.save_settings()
    w.close()
    w2 = make_window(qtbot, tmp_path, monkeypatch, "p.ini")
    t = w2.tune
    assert (
        t.workload.currentText(),
        t.max_prompts.value(),
        t.max_tokens.value(),
        t.budget.value(),
        t.k_max.value(),
        t.seed.value(),
    ) == ("creative", 4, 48, 30, 9, 3)
    w2.close()


@pytest.mark.server
def test_a_tune_at_two_clients_pairs_each_setting_through_llama_server_and_sets_the_serve_slots(qtbot, window, pair):
    from app.pages.tune.concurrent_runner import ConcurrentTuneRunner
    from engine.measure.concurrent_tune import ConcurrentTuneResult

    set_pair(window, pair, k=2, method="draft-simple")
    window.show_page("Tune")
    page = window.tune
    set_tune(page, prompts=4, max_tokens=12)
    page.clients.setValue(2)
    page.start_button.click()
    assert page.mode == "running" and isinstance(page.runner, ConcurrentTuneRunner)
    assert not page.clients.isEnabled()
    qtbot.waitUntil(lambda: page.mode == "idle", timeout=2 * WAIT)
    result = page.result
    assert isinstance(result, ConcurrentTuneResult), page.log.toPlainText()[-2000:]
    assert result.clients == 2 and len(result.candidates) == 3  # draft-simple K=2 and K=4, ngram-mod
    assert all(c.ratio is not None and c.ratio.n == 4 for c in result.candidates)  # 2 batches x 2 rounds
    summary = page.summary.text()
    assert "2 clients at once" in summary and "Verdict:" in summary and "paired batches" in summary
    page.apply_button.click()
    assert window.serve.parallel.value() == 2  # served at the concurrency it was tuned at
    assert window.session.spec_settings() == page.picked_spec()
    assert (page.picked_spec().spec_type == "none") == (not result.beats_baseline)

    from engine.measure.history import History

    with History() as h:
        latest = h.entries(limit=1, kind="tune")
    assert latest and latest[0].results["clients"] == 2


@pytest.mark.slow
def test_a_recording_of_overlapping_requests_sets_the_tunes_clients(qtbot, window, tmp_path):
    from engine.serve.record import Recorder

    path = tmp_path / "traffic.jsonl"
    with Recorder(path) as rec:
        for n in (1, 3, 3, 2, 3):
            rec.record({"messages": [{"role": "user", "content": f"q{n}"}]}, in_flight=n)
    window.tune.set_workload_file(path)
    assert window.tune.clients.value() == 3 and window.tune.workload.currentText() == str(path)


def test_the_search_only_inputs_are_off_while_several_clients_are_tuned(qtbot, window):
    """Budget, K max and seed steer the one-client search; a tune of several clients measures a fixed list of
    settings fully, so those inputs are off (and say why) while clients is above 1."""
    page = window.tune
    search_only = (page.budget, page.k_max, page.seed)
    assert all(w.isEnabled() for w in search_only)
    page.clients.setValue(3)
    assert not any(w.isEnabled() for w in search_only)
    assert all("one-client" in w.statusTip() for w in search_only)
    assert page.max_tokens.isEnabled() and page.workload.isEnabled()
    page.clients.setValue(1)
    assert all(w.isEnabled() for w in search_only)


@pytest.mark.slow
def test_a_tune_through_llama_server_measures_k_and_says_the_costs_are_not_timed(qtbot, window, pair):
    """The Engine menu's llama-server: the Tune page's one-client tune runs through it too. llama-server
    cannot time forward passes, so K is measured at a few values rather than predicted, and the chart says so."""
    set_pair(window, pair, k=2, method="draft-simple")
    window.tune.engine = ("llama-server", None)
    window.show_page("Tune")
    page = window.tune
    set_tune(page, prompts=2, budget=5, k_max=4)
    page.start_button.click()
    qtbot.waitUntil(lambda: page.mode == "idle", timeout=WAIT)
    result = page.result
    assert result is not None, page.log.toPlainText()[-2000:]
    assert page.runner is None and result.costs is None
    measured_ks = sorted(c.spec.draft_n_max for c in result.candidates if c.spec.spec_type == "draft-simple")
    assert measured_ks == [2, 3, 4] and not result.predicted_by_k
    assert "cannot time forward passes" in page.log.toPlainText()
    assert "measured through llama-server" in page.charts.p_k.titleLabel.text
    assert result.to_dict()["verify_ms"] is None


@pytest.mark.slow
def test_a_tune_waits_for_the_apps_own_computing_work_and_esc_ends_the_wait(qtbot, window, pair):
    """The Lab's baseline waited for a ranking or a scan (a demo baseline read 180 tok/s beside one, 808 after);
    a tune, whose first measurements pick the settings it explores, did not. It waits now, says for what, and
    Esc ends the wait without a tune."""
    import threading

    from app.background import BackgroundJob, computing_jobs

    set_pair(window, pair)
    window.show_page("Tune")
    page = window.tune
    set_tune(page, prompts=1, max_tokens=8, budget=5)
    release = threading.Event()
    ranking = BackgroundJob("a-ranking", lambda _: release.wait(60), window, what="a ranking").start()
    qtbot.waitUntil(lambda: computing_jobs() == ["a ranking"], timeout=WAIT)  # the window's own first jobs end
    page.start()
    assert page.mode == "idle" and "The tune starts once a ranking is done" in page.banner.label.text()
    qtbot.wait(600)
    assert page.mode == "idle" and page.runner is None  # nothing measured while it computes
    page.cancel()  # Esc
    assert "Not tuned" in page.banner.label.text()
    qtbot.wait(600)
    assert page.mode == "idle" and page.runner is None
    page.start()
    assert "The tune starts once a ranking is done" in page.banner.label.text()
    release.set()
    qtbot.waitUntil(lambda: not ranking.running and page.mode == "running", timeout=WAIT)
    page.cancel()
    qtbot.waitUntil(lambda: page.mode == "idle", timeout=WAIT)
