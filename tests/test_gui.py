"""The desktop app under the offscreen platform, against the real engine worker."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

pytest.importorskip("PySide6")

from PySide6.QtCore import QSettings, QTimer  # noqa: E402
from PySide6.QtGui import QGuiApplication, QImage  # noqa: E402
from PySide6.QtWidgets import QPushButton  # noqa: E402

from app.engine_controller import CRASHED, LOADING, READY  # noqa: E402
from app.main_window import MainWindow  # noqa: E402

from .conftest import GUI_WAIT, PROMPTS  # noqa: E402

WAIT = GUI_WAIT


def set_pair(w, pair, k=4, max_tokens=64, ctx=1024):
    c = w.lab.controls
    c.target.set_path(pair[0])
    c.draft.set_path(pair[1])
    c.ctx.setValue(ctx)
    c.threads.setValue(1)
    c.method.setCurrentText("draft-simple")
    c.k.setValue(k)
    c.temp.setValue(0.0)
    c.workload.setCurrentText("custom prompt")
    c.prompt.setPlainText(PROMPTS[1])
    c.max_tokens.setValue(max_tokens)


@pytest.mark.slow
def test_run_reaches_the_charts(qtbot, window, pair, tmp_path, monkeypatch):
    set_pair(window, pair)
    lab = window.lab
    lab.start()
    qtbot.waitUntil(lambda: lab.live.cycles >= 20, timeout=WAIT)

    def curve_has_data():
        xs = lab.charts.c_tps.getData()[0]
        return lab.charts.frames_painted > 0 and xs is not None and len(xs) > 0

    qtbot.waitUntil(curve_has_data, timeout=WAIT)
    qtbot.waitUntil(lambda: len(lab.text.toPlainText()) > 0, timeout=WAIT)
    lab.stop()
    qtbot.waitUntil(lambda: lab.mode == "idle", timeout=WAIT)
    lab._repaint()
    # the charts set their own ranges (no per-frame auto-range): the data must lie inside them
    xs, ys = lab.charts.c_tps.getData()
    (x0, x1), (y0, y1) = lab.charts.p_tps.viewRange()
    assert x0 <= xs[0] and xs[-1] <= x1 and y0 <= 0 and max(ys) <= y1
    bars = lab.charts.b_pos.opts["x"]
    (b0, b1), _ = lab.charts.p_pos.viewRange()
    assert len(bars) == lab.controls.k.value() and b0 < 0 and len(bars) - 1 < b1
    # File > Save charts (Ctrl+S) on the Lab page saves the Lab's charts where the file dialog says
    from PySide6.QtWidgets import QFileDialog

    monkeypatch.setattr(QFileDialog, "getSaveFileName", lambda *a, **k: (str(tmp_path / "lab.png"), ""))
    window.save_action.trigger()
    assert QImage(str(tmp_path / "lab.png")).size() == lab.charts.view.size()
    qtbot.waitUntil(lambda: lab.mode == "idle", timeout=WAIT)
    snap = lab.live.snapshot()
    assert snap.totals["drafted"] > 0 and 0 < snap.totals["acceptance_rate"] <= 1
    # accepted draft tokens are coloured (the text timer flushes at 4 Hz)
    qtbot.waitUntil(lambda: lab.text.accepted_chars > 0, timeout=WAIT)
    assert "tokens/s" in lab.summary.text()
    assert window.history.table.rowCount() >= 1
    from engine.measure.history import History

    with History() as h:
        latest = h.entries(limit=1, kind="lab")
    assert latest and latest[0].settings["spec"]["spec_type"] == "draft-simple", window.history.status.text()
    assert latest[0].results["tokens_generated"] > 0 and latest[0].target == str(pair[0])


@pytest.mark.slow
def test_moving_k_while_running_is_used_by_the_next_cycles(qtbot, window, pair):
    set_pair(window, pair, k=6, max_tokens=900, ctx=2048)
    lab = window.lab
    applied = []
    window.controller.settingsApplied.connect(applied.append)
    lab.start()
    qtbot.waitUntil(lambda: lab.live.cycles >= 5, timeout=WAIT)
    lab.controls.k_slider.setValue(2)
    qtbot.waitUntil(lambda: bool(applied), timeout=WAIT)
    first = applied[0]["from_cycle"]
    qtbot.waitUntil(lambda: lab.live.cycles >= first + 10 or lab.mode == "idle", timeout=WAIT)
    lab.stop()
    qtbot.waitUntil(lambda: lab.mode == "idle", timeout=WAIT)
    k = lab.live.snapshot().series["k"]
    # the ring holds the speculative cycles in order; cycle index i sits at i - 1 (the prompt cycle is not in it)
    assert set(k[: first - 1]) == {6} and set(k[first - 1 :]) == {2}
    assert lab.live.markers and lab.live.markers[0].label == "K 6→2"
    # the chart timer draws the marker at its next tick
    qtbot.waitUntil(lambda: len(lab.charts._marker_items) == 1, timeout=WAIT)
    # the history keeps the setting in force at the end, and that it changed (issue 51), and its count follows
    from engine.measure.history import History

    with History() as h:
        latest = h.entries(limit=1, kind="lab")[0]
    assert latest.settings["spec"]["draft_n_max"] == 2 and latest.results["settings_changed"] == ["K 6→2"]
    n = window.history.table.rowCount()
    assert window.history.status.text().startswith(f"{n} run")
    methods = [window.history.table.item(r, 3).text() for r in range(n)]
    assert "draft-simple (changed during the run)" in methods


@pytest.mark.slow
def test_killed_engine_shows_crash_and_restarts(qtbot, window, pair):
    set_pair(window, pair, max_tokens=5000, ctx=2048)
    lab = window.lab
    lab.start()
    qtbot.waitUntil(lambda: lab.live.cycles >= 3, timeout=WAIT)
    os.kill(window.controller.pid, signal.SIGKILL)
    qtbot.waitUntil(lambda: window.controller.state == CRASHED, timeout=WAIT)
    qtbot.waitUntil(lambda: lab.banner.isVisible(), timeout=WAIT)
    assert "SIGKILL" in lab.banner.label.text() and lab.banner.button.text() == "Restart engine"
    assert "engine: crashed" in window.state_label.text()
    assert lab.mode == "idle" and lab.controls.start_button.isEnabled()
    cycles_before = lab.live.cycles
    with qtbot.waitSignal(window.controller.loaded, timeout=WAIT):
        lab.banner.button.click()  # restart, and the pair comes back by itself
    assert window.controller.state == READY
    assert lab.live.cycles == cycles_before, "the charts keep what they showed"
    lab.start()
    qtbot.waitUntil(lambda: lab.live.cycles >= 3, timeout=WAIT)
    lab.stop()
    qtbot.waitUntil(lambda: lab.mode == "idle", timeout=WAIT)


@pytest.mark.slow
def test_incompatible_pair_is_explained(qtbot, window, incompatible_pair):
    set_pair(window, incompatible_pair)
    window.lab.load()
    qtbot.waitUntil(lambda: window.lab.banner.isVisible(), timeout=WAIT)
    text = window.lab.banner.label.text()
    assert "vocab" in text.lower()
    qtbot.waitUntil(lambda: window.lab.mode == "idle", timeout=WAIT)


@pytest.mark.slow
def test_broken_file_is_explained_before_loading(qtbot, window, tmp_path):
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"GGUF" + os.urandom(100))
    window.lab.controls.target.set_path(bad)
    assert window.lab.load()  # the check runs off the GUI thread; its refusal arrives on the banner
    qtbot.waitUntil(lambda: "broken.gguf" in window.lab.banner.label.text(), timeout=WAIT)
    assert window.lab.banner.isVisible() and window.lab.mode == "idle" and window.controller.loaded_info is None


def test_knobs_and_window_state_persist(qtbot, tmp_path, monkeypatch):
    monkeypatch.setenv("SPECTUNE_CONFIG_DIR", str(tmp_path / "config"))
    ini = str(tmp_path / "persist.ini")
    w = MainWindow(settings=QSettings(ini, QSettings.Format.IniFormat))
    qtbot.addWidget(w)
    w.lab.controls.k.setValue(7)
    w.lab.controls.method.setCurrentText("ngram-mod")
    w.lab.controls.prompt.setPlainText("hello")
    w.show_page("Export")
    w.save_settings()
    w2 = MainWindow(settings=QSettings(ini, QSettings.Format.IniFormat))
    qtbot.addWidget(w2)
    assert w2.lab.controls.k.value() == 7
    assert w2.lab.controls.method.currentText() == "ngram-mod"
    assert w2.lab.controls.prompt.toPlainText() == "hello"
    assert w2.current_page() == "Export"


def test_export_page_follows_the_knobs(qtbot, tmp_path, pair, monkeypatch):
    monkeypatch.setenv("SPECTUNE_CONFIG_DIR", str(tmp_path / "config"))
    w = MainWindow(settings=QSettings(str(tmp_path / "e.ini"), QSettings.Format.IniFormat))
    qtbot.addWidget(w)
    w.show()
    w.show_page("Lab")
    set_pair(w, pair, k=5)
    w.show_page("Export")  # changes made while it was hidden show when it does
    cmd = w.export.command.toPlainText()
    assert "--spec-type draft-simple" in cmd and "--spec-draft-n-max 5" in cmd and str(pair[1]) in cmd
    w.lab.controls.k.setValue(3)
    assert "--spec-draft-n-max 3" in w.export.command.toPlainText()
    w.export.shell.setCurrentText("pwsh")
    pwsh = w.export.command.toPlainText()
    assert pwsh.startswith("& '") and "llama-server' " in pwsh  # the bundled binary, nothing set before it
    assert "since build b9131" in w.export.warnings.text() and "-np 1" in w.export.warnings.text()
    # Copy says it copied (issue 51)
    w.export.shell.setCurrentText("bash")
    copy = next(b for b in w.export.findChildren(QPushButton) if b.text() == "Copy")
    copy.click()
    assert w.export.copied.text().startswith("copied (") and "bash" in w.export.copied.text()
    assert QGuiApplication.clipboard().text() == w.export.command.toPlainText()


@pytest.mark.slow
def test_app_selftest_in_a_subprocess(tmp_path):
    """main() runs in its own process: a second QApplication in this one would crash."""
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen", SPECTUNE_CONFIG_DIR=str(tmp_path / "cfg"))
    r = subprocess.run(
        [sys.executable, "-m", "app", "--selftest"],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        cwd=Path(__file__).resolve().parent.parent,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    assert "selftest: ok" in r.stderr


@pytest.mark.slow
def test_hardware_page_with_two_gpus_and_without(qtbot, tmp_path, monkeypatch):
    from .fake_nvml import FakeNVML, h100, rtx4090

    monkeypatch.setenv("SPECTUNE_CONFIG_DIR", str(tmp_path / "config"))
    nvml = FakeNVML([rtx4090(0), h100(1)])
    w = MainWindow(settings=QSettings(str(tmp_path / "h.ini"), QSettings.Format.IniFormat), nvml=nvml)
    qtbot.addWidget(w)
    w.show()
    w.show_page("Hardware")
    page = w.hardware
    assert len(page.gpu_boxes) == 2
    assert "RTX 4090" in page.gpu_boxes[0].title() and "H100" in page.gpu_boxes[1].title()
    assert "GB/s" in page.gpu_boxes[0].details.text()
    assert "GPU0" in page.vram_summary() and "GPU1" in page.vram_summary()
    page.controller.hello.emit({"devices": [{"name": "CPU", "description": "x"}], "llama": "llama.cpp CPU"})
    assert "CPU build" in page.engine_label.text()
    # a build with a CUDA module that did not load: the page says why, and which CPU variant runs instead
    from engine.llama.backends import BackendDevice, BackendModule, BackendReport

    why = "CUDA backend present; no NVIDIA driver (libcuda.so.1: cannot open shared object file)"
    backends = BackendReport(
        "/x/bin",
        [
            BackendModule("libggml-cpu-haswell.so", "cpu", "haswell", True),
            BackendModule("libggml-cpu-zen4.so", "cpu", "zen4", False, "needs instructions this CPU lacks"),
            BackendModule("libggml-cuda.so", "cuda", "", False, why),
        ],
        [BackendDevice("CPU", "x", "CPU", "CPU")],
    )
    page.controller.hello.emit(
        {"devices": [{"name": "CPU", "description": "x"}], "llama": "", "backends": backends.to_dict()}
    )
    text = page.engine_label.text()
    assert "CUDA backend did not load:" in text and why in text
    assert "CPU: the haswell variant of 2" in text and "zen4" in text

    import pynvml

    from engine.planning.hardware import probe

    w.hardware._nvml = FakeNVML(init_error=pynvml.NVML_ERROR_DRIVER_NOT_LOADED)
    w.hardware.reprobe()
    assert not page.gpu_boxes and "No NVIDIA GPU" in page.status.text()
    assert "CPU only" in page.vram_summary()
    assert probe(FakeNVML([])).status == "no_gpu"
    # without a GPU and out of view, the page still re-reads the free RAM the status bar and the fit use
    from dataclasses import replace

    from engine.planning.hardware import ram

    w.show_page("Lab")
    page.report = replace(page.report, cpu=replace(page.report.cpu, ram_available_bytes=1))
    page._poll()
    assert abs(page.report.cpu.ram_available_bytes - ram()[1]) < 2**30 and "RAM free 0.0 GiB" not in page.vram_summary()
    assert not page.gpu_boxes and page.report.status != "ok"


def test_models_page_checks_the_pair_before_loading(qtbot, tmp_path, monkeypatch, pair, incompatible_pair):
    monkeypatch.setenv("SPECTUNE_CONFIG_DIR", str(tmp_path / "config"))
    w = MainWindow(settings=QSettings(str(tmp_path / "m.ini"), QSettings.Format.IniFormat))
    qtbot.addWidget(w)
    set_pair(w, pair)
    qtbot.waitUntil(lambda: "✓ compatible" in w.models.compat_badge.text(), timeout=WAIT)  # checked in a thread
    assert "fits" in w.models.fit_badge.text() and "target kv_cache" in w.models.plan_label.text()
    set_pair(w, incompatible_pair)
    qtbot.waitUntil(lambda: "incompatible" in w.models.compat_badge.text(), timeout=WAIT)
    w.lab.load()
    qtbot.waitUntil(lambda: "vocabulary" in w.lab.banner.label.text(), timeout=WAIT)
    assert w.lab.mode == "idle" and w.controller.loaded_info is None


@pytest.mark.slow
def test_illegal_instruction_while_loading_retries_without_repacking(qtbot, window, pair):
    """On a CPU that reports AMX the system does not enable, the pinned llama.cpp dies of SIGILL while it
    repacks weights. Here the test delivers that signal: the worker is stopped as the Lab's load begins and
    gets SIGILL once the request is written (the next turn of the event loop), so it dies mid-load."""
    set_pair(window, pair, max_tokens=16)
    lab, controller = window.lab, window.controller
    assert lab.controls.repack.isChecked()
    first_pid = controller.pid
    seen: dict = {}

    def on_state(state, message):
        if state == LOADING and "stopped" not in seen:
            seen["stopped"] = first_pid
            os.kill(first_pid, signal.SIGSTOP)
            QTimer.singleShot(0, lambda: (os.kill(first_pid, signal.SIGILL), os.kill(first_pid, signal.SIGCONT)))
        elif state == CRASHED:  # the Lab has handled it by now (it connected first)
            seen["crash"] = (message, lab.banner.isVisible(), lab.banner.label.text(), lab.controls.repack.isChecked())

    controller.stateChanged.connect(on_state)
    lab.start()  # loads first, then runs
    qtbot.waitUntil(lambda: lab.live.cycles >= 1, timeout=WAIT)
    message, banner_shown, banner, repack_ticked = seen["crash"]
    assert "SIGILL" in message
    assert banner_shown and "illegal instruction" in banner and "repacking off" in banner
    assert not repack_ticked and not lab.controls.repack.isChecked()
    # a fresh worker loaded the pair with repacking off, and the run is on it
    assert controller.pid != first_pid and controller.loaded_info["settings"]["repack"] is False
    assert controller.load_settings.repack is False
    lab.stop()
    qtbot.waitUntil(lambda: lab.mode == "idle", timeout=WAIT)


@pytest.mark.slow
def test_history_table_keeps_the_newest_rows_however_sorted(qtbot, window, monkeypatch, tmp_path):
    from app.pages import history as history_page
    from app.pages.history import HistoryPage

    monkeypatch.setenv("SPECTUNE_DATA_DIR", str(tmp_path / "data"))  # an empty history

    page = HistoryPage(window.lab, limit=3)
    qtbot.addWidget(page)
    import time as real_time
    from types import SimpleNamespace

    clock = iter(range(1000, 2000))  # the page's own clock only, not the process's time.time
    monkeypatch.setattr(
        history_page,
        "time",
        SimpleNamespace(time=lambda: float(next(clock)), strftime=real_time.strftime, localtime=real_time.localtime),
    )

    def run(tokens):
        page.add_run(
            {
                "event": "done",
                "summary": {"tokens_generated": tokens, "tokens_per_s": 100.0},
                "spec": {"spec_type": "draft-simple", "draft_n_max": 4},
                "sampling": {"temp": 0.0},
            }
        )

    tokens_col = history_page.COLUMNS.index("tokens")
    start = page.table.rowCount()
    for tokens in (11, 12, 13):
        run(tokens)
    page.table.sortItems(tokens_col)  # by tokens, ascending: the oldest row is now first, then move it
    page.table.sortItems(tokens_col, history_page.Qt.SortOrder.DescendingOrder)
    for tokens in (14, 15):
        run(tokens)
    kept = sorted(page.table.item(r, tokens_col).data(0) for r in range(page.table.rowCount()))
    assert start == 0 and kept == [13, 14, 15]
    assert "newest only" in page.status.text()


@pytest.mark.slow
def test_a_lab_run_is_one_history_row_however_many_prompts_it_ran(qtbot, window, monkeypatch, tmp_path):
    """Issue 51: the history kept one row per prompt (247 rows for a few runs). A run's generations now add
    up in one row and one entry, written as each ends; the next Start opens the next row."""
    from app.pages import history as history_page
    from app.pages.history import HistoryPage
    from engine.core.settings import LoadSettings
    from engine.core.stats import RunStats
    from engine.measure.history import History

    monkeypatch.setenv("SPECTUNE_DATA_DIR", str(tmp_path / "data"))  # an empty history
    lab = SimpleNamespace(runFinished=window.lab.runFinished, loaded_settings=LoadSettings(Path(__file__), None))
    page = HistoryPage(lab)
    qtbot.addWidget(page)

    def generation(run, tokens, drafted, accepted, k, changes=()):
        one = RunStats(tokens_generated=tokens, wall_ms=100.0, steps=10, drafted=drafted, accepted=accepted)
        page.add_run(
            {
                "event": "done",
                "summary": one.summary(),
                "spec": {"spec_type": "draft-simple", "draft_n_max": k},
                "sampling": {"temp": 0.0},
                "settings_changed": list(changes),
                "lab_run": run,
            }
        )

    generation(1, 41, 40, 20, 4)
    generation(1, 41, 40, 30, 4, ["K 4→6"])
    generation(1, 41, 60, 30, 6)
    generation(2, 21, 30, 15, 6)
    assert page.table.rowCount() == 2 and page.status.text().startswith("2 runs")
    col = {name: history_page.COLUMNS.index(name) for name in ("generations", "tokens", "acceptance", "method", "K")}
    rows = sorted(range(2), key=lambda r: page.table.item(r, 1).data(history_page.CREATED_ROLE))
    first = {name: page.table.item(rows[0], i).data(0) for name, i in col.items()}
    assert first["generations"] == 3 and first["tokens"] == 123 and first["acceptance"] == round(80 / 140, 3)
    assert first["method"] == "draft-simple (changed during the run)" and first["K"] == 6
    with History() as h:
        entries = h.entries(kind="lab")
    assert len(entries) == 2
    newest, oldest = entries
    assert oldest.results["generations"] == 3 and oldest.results["drafted"] == 140
    assert oldest.results["settings_changed"] == ["K 4→6"] and oldest.settings["spec"]["draft_n_max"] == 6
    assert newest.results["tokens_generated"] == 21 and "generations" not in newest.results


@pytest.mark.slow
def test_loading_shows_progress_and_esc_cancels_it(qtbot, window, pair):
    set_pair(window, pair)
    lab = window.lab
    seen = []
    window.controller.loadProgress.connect(
        lambda stage, f: seen.append((stage, f, window.load_bar.isVisible(), window.load_bar.format()))
    )
    assert lab.load()
    qtbot.waitUntil(lambda: window.controller.loaded_info is not None, timeout=WAIT)
    assert {s for s, *_ in seen} == {"target", "draft"} and seen[-1][1] == 1.0
    assert all(visible for *_, visible, _ in seen) and seen[-1][3] == "draft 100 %"
    assert not window.load_bar.isVisible()  # gone once loaded

    lab.controls.ctx.setValue(2048)  # another load; Esc right away stops it, during its pre-load check
    assert lab.load()
    lab.stop()
    qtbot.waitUntil(lambda: lab.mode == "idle", timeout=WAIT)
    assert "Loading cancelled" in lab.banner.label.text(), lab.banner.label.text()
    # stopped before the worker was asked: the pair loaded before stays as it was, the new settings unloaded
    assert window.controller.state == READY and window.controller.load_settings != lab.controls.load_settings()
    assert lab.controls.start_button.isEnabled() and "n_ctx 1024" in lab.controls.badges.text()  # what is loaded
    lab.controls.max_tokens.setValue(8)
    lab.start()  # loads again and runs
    qtbot.waitUntil(lambda: lab.live.cycles >= 1 and window.controller.loaded_info is not None, timeout=WAIT)
    lab.stop()
    qtbot.waitUntil(lambda: lab.mode == "idle", timeout=WAIT)


@pytest.mark.slow
def test_a_pair_that_does_not_fit_is_explained_and_can_be_loaded_anyway(qtbot, tmp_path, monkeypatch, pair):
    """A stand-in NVML with a nearly full GPU, and an engine taken for a CUDA build (a CPU build plans in
    RAM); the plan, the refusal and the load are real."""
    from app.engine_controller import EngineController

    from .fake_nvml import FakeNVML, rtx4090

    monkeypatch.setattr(EngineController, "gpu_backend", property(lambda self: True))
    monkeypatch.setenv("SPECTUNE_CONFIG_DIR", str(tmp_path / "config"))
    full = rtx4090(0, used=24 * 2**30 - 2**20)  # 1 MiB free
    w = MainWindow(settings=QSettings(str(tmp_path / "f.ini"), QSettings.Format.IniFormat), nvml=FakeNVML([full]))
    qtbot.addWidget(w)
    w.show()
    w.show_page("Lab")  # a first start opens on the Start page
    with qtbot.waitSignal(w.controller.hello, timeout=WAIT):
        w.controller.start()
    set_pair(w, pair, max_tokens=8)
    lab = w.lab
    lab.start()  # needs a load first: its check refuses it, with the reason
    qtbot.waitUntil(lambda: lab.banner.button.text() == "Load anyway", timeout=WAIT)
    text = lab.banner.label.text()
    assert lab.mode == "idle" and w.controller.loaded_info is None
    assert "does not fit on CUDA0" in text and "1.0 MiB free" in text and "smaller context" in text, text
    assert lab.banner.button.isVisible() and lab.banner.button.text() == "Load anyway"
    qtbot.waitUntil(lambda: "does not fit in VRAM" in w.models.fit_badge.text(), timeout=WAIT)
    lab.banner.button.click()  # loads (a CPU build here: it does fit) and then runs
    qtbot.waitUntil(lambda: lab.live.cycles >= 1, timeout=WAIT)
    lab.stop()
    qtbot.waitUntil(lambda: lab.mode == "idle", timeout=WAIT)
    # with room on the GPU there is nothing to explain
    w.hardware._nvml = FakeNVML([rtx4090(0)])
    w.hardware.reprobe()
    lab.controls.ctx.setValue(2048)
    assert lab.preflight(lab.controls.load_settings()).too_big is None
    w.close()


@pytest.mark.slow
def test_a_load_the_worker_refuses_leaves_the_lab_usable(qtbot, window, pair, tmp_path, monkeypatch):
    """The pre-load checks are skipped here so that the worker itself meets the broken file."""
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(pair[0].read_bytes()[:4096])  # a truncated target
    set_pair(window, (broken, pair[1]), max_tokens=8)
    lab = window.lab
    from engine.planning.advice.preflight import Preflight

    monkeypatch.setattr("app.pages.lab.page._check_pair", lambda settings, budget: (Preflight(), None))
    lab.start()
    qtbot.waitUntil(lambda: lab.mode == "idle", timeout=WAIT)
    assert window.controller.state == "error" and window.controller.loaded_info is None
    assert "broken.gguf" in lab.banner.label.text() and not window.load_bar.isVisible()
    assert lab.controls.start_button.isEnabled()
    lab.controls.target.set_path(pair[0])  # fixed: Start loads and runs
    lab.start()
    qtbot.waitUntil(lambda: lab.live.cycles >= 1, timeout=WAIT)
    lab.stop()
    qtbot.waitUntil(lambda: lab.mode == "idle", timeout=WAIT)


@pytest.mark.slow
def test_a_pair_chosen_in_the_lab_brings_a_workload_unless_a_prompt_is_typed(window, pair, tmp_path):
    """Issue 30 #3 for every way a pair arrives (here the Lab's own file boxes): with neither a workload set
    nor a typed prompt, the set that suits the target is chosen, so Start runs at once; a typed prompt stays."""
    from app.session import CUSTOM_PROMPT
    from engine.core.workloads import suggested_workload

    session, controls = window.session, window.lab.controls
    session.set_pair(None, None)
    session.set_workload(CUSTOM_PROMPT)
    session.set_custom_prompt("")
    controls.target.set_path(str(pair[0]))
    assert session.workload() == suggested_workload(str(pair[0])) and session.collect_prompts()
    session.set_workload(CUSTOM_PROMPT)
    session.set_custom_prompt("my own prompt")
    controls.draft.set_path(str(pair[1]))
    assert session.workload() == CUSTOM_PROMPT and session.custom_prompt() == "my own prompt"


@pytest.mark.slow
def test_a_native_engine_that_cannot_load_leaves_a_banner_and_the_lab_runs_through_llama_server(
    qtbot, tmp_path, monkeypatch, pair
):
    """SpecTune's own engine dies in dlopen (a libspecrt whose constructor crashes, as on the H200): the window
    says so once, above every page, and the Lab measures through llama-server, its restarts marked."""
    from tests.test_server_engine import write_crashing_library

    monkeypatch.setenv("SPECTUNE_SPECRT", str(write_crashing_library(tmp_path)))
    monkeypatch.setenv("SPECTUNE_CONFIG_DIR", str(tmp_path / "config"))
    w = MainWindow(settings=QSettings(str(tmp_path / "test.ini"), QSettings.Format.IniFormat))
    qtbot.addWidget(w)
    w.show()
    w.show_page("Lab")
    with qtbot.waitSignal(w.controller.hello, timeout=WAIT) as hello:
        w.controller.start()
    assert hello.args[0]["engine_kind"] == "llama-server" == w.controller.engine_kind
    banner = w.engine_banner.label.text()
    assert w.engine_banner.isVisible() and "SIGSEGV while loading its native library" in banner
    assert "through llama-server" in banner and not w.lab.banner.isVisible()  # no crash told as a crash
    set_pair(w, pair, k=3, max_tokens=24)
    lab = w.lab
    lab.start()
    qtbot.waitUntil(lambda: lab.live.cycles >= 40, timeout=WAIT)  # a few prompts' worth
    lab.controls.k.setValue(5)  # llama-server takes it at its next start: the next prompt
    qtbot.waitUntil(lambda: any("llama-server restarted" in m.label for m in lab.live.markers), timeout=WAIT)
    lab.stop()
    qtbot.waitUntil(lambda: lab.mode == "idle", timeout=WAIT)
    totals = lab.live.snapshot().totals
    assert totals["drafted"] >= totals["accepted"] > 0
    assert "MiB as llama.cpp reports it" in lab.controls.badges.text()  # read from llama-server's log
    w.close()


@pytest.mark.slow
def test_the_engine_menu_switches_to_llama_server_and_back_and_the_choice_persists(qtbot, window, pair, tmp_path):
    set_pair(window, pair, k=3, max_tokens=16)
    lab = window.lab
    lab.load()
    qtbot.waitUntil(lambda: window.controller.loaded_info is not None, timeout=WAIT)
    with qtbot.waitSignal(window.controller.loaded, timeout=WAIT):  # the pair comes back in the new engine
        window.engine_actions["llama-server"].trigger()
    assert window.controller.engine_kind == "llama-server" and window.engine_actions["llama-server"].isChecked()
    assert window.engine_banner.isVisible() and "Measuring through llama-server" in window.engine_banner.label.text()
    assert window.settings.value("engine/kind") == "llama-server" and window.tune.engine == ("llama-server", None)
    with qtbot.waitSignal(window.controller.hello, timeout=WAIT):
        window.engine_actions["native"].trigger()
    assert window.controller.engine_kind == "native" and not window.engine_banner.isVisible()
