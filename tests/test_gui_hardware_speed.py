"""The Hardware page's speed figures: the GPU table beside NVML's bandwidth, and the CPU probe run from
the page (a real engine worker timing llama.cpp), cached, and refused while a tune runs."""

from __future__ import annotations

import time

import pytest
from PySide6.QtCore import QSettings

from app.main_window import MainWindow
from engine.planning.speed.device_speed import PROBE_QUANTS

from .fake_nvml import FakeNVML, rtx4090

WAIT = 120_000
PROBE_WAIT = 700_000  # the probe writes, quantizes and times five 0.37B models and the rows pairs: 5.7 minutes here


@pytest.fixture
def window(qtbot, tmp_path, monkeypatch):
    monkeypatch.setenv("SPECTUNE_CONFIG_DIR", str(tmp_path / "config"))
    w = MainWindow(settings=QSettings(str(tmp_path / "t.ini"), QSettings.Format.IniFormat), nvml=FakeNVML([rtx4090(0)]))
    qtbot.addWidget(w)
    w.hardware.probe_cache = tmp_path / "device-speed"
    w.show()
    w.show_page("Hardware")
    with qtbot.waitSignal(w.controller.hello, timeout=WAIT):
        w.controller.start()
    yield w
    w.close()


@pytest.mark.slow
def test_a_gpu_shows_its_fp16_throughput_from_the_table(window):
    # NVIDIA's dense FP16 tensor rate with FP16 accumulate (resources/catalog/gpus.json)
    assert "~330 TFLOPs FP16" in window.hardware.gpu_boxes[0].details.text()


@pytest.mark.slow
def test_the_cpu_probe_runs_from_the_page_and_is_remembered(window, qtbot, tmp_path):
    page = window.hardware
    assert "not measured yet" in page.speed_label.text()
    said = []
    page.measure_cpu()
    assert not page.measure_button.isEnabled()
    qtbot.waitUntil(lambda: not page._probing() and page.measure_button.isEnabled(), timeout=PROBE_WAIT)
    said.append(page.speed_label.text())
    assert page.cpu_speed is not None and "GB/s" in said[-1] and "GFLOPs" in said[-1], said
    assert page.measure_button.text() == "Measure again"
    assert list((tmp_path / "device-speed").glob("cpu-*.json")), "the result is cached"
    # a second window of the same machine reads the cached measurement when its engine says hello
    other = MainWindow(settings=QSettings(str(tmp_path / "u.ini"), QSettings.Format.IniFormat))
    qtbot.addWidget(other)
    other.hardware.probe_cache = tmp_path / "device-speed"
    with qtbot.waitSignal(other.controller.hello, timeout=WAIT):
        other.controller.start()
    assert other.hardware.cpu_speed == page.cpu_speed
    other.close()


@pytest.mark.slow
def test_the_probe_waits_while_another_measuring_job_runs(window):
    page = window.hardware
    window.jobs.register("a-test-job", lambda: True, "a tune is running", "the tune's")
    page.measure_cpu()
    assert page.probe_job is None and "Not now: a tune is running" in page.speed_label.text()


@pytest.mark.slow
def test_an_unmeasured_cpu_ranks_on_an_assumption_until_the_start_page_measures_it(qtbot, tmp_path, monkeypatch):
    """Without a GPU and before any probe, the pairs are ranked for a CPU assumed from its core count, and the
    Start page says so beside a Measure button; the probe it starts (the Hardware page's) ranks them anew
    on what it measured."""
    from engine.runtime.native_build import library_path

    monkeypatch.setenv("SPECTUNE_CONFIG_DIR", str(tmp_path / "config"))
    # a user cache of its own: a probe this machine's user took must not stand in for "not measured yet"
    monkeypatch.setenv("SPECTUNE_SPECRT", str(library_path()))
    monkeypatch.setenv("SPECTUNE_CACHE_DIR", str(tmp_path / "cache"))
    w = MainWindow(settings=QSettings(str(tmp_path / "c.ini"), QSettings.Format.IniFormat), nvml=FakeNVML([]))
    qtbot.addWidget(w)
    w.hardware.probe_cache = tmp_path / "device-speed"
    try:
        with qtbot.waitSignal(w.models.ranked, timeout=WAIT) as first:
            w.show()
            w.show_page("Start")
        start = w.start_page
        device = first.args[0].recommendation.device
        assert device is not None and "assumed" in device.source
        assert "not measured yet" in start.device_label.text() and start.measure_button.isVisible()
        said = []
        w.hardware.probeMessage.connect(said.append)
        with qtbot.waitSignal(w.models.ranked, timeout=PROBE_WAIT) as again:
            start.measure_button.click()
        assert said and said[0].startswith("measuring")
        device = again.args[0].recommendation.device
        assert device == w.hardware.cpu_speed and device.source.startswith("measured")
        assert not start.measure_button.isVisible() and "measured" in start.device_label.text()
    finally:
        w.close()


@pytest.mark.slow
def test_closing_the_app_stops_a_probe_at_its_next_step(window, qtbot, tmp_path):
    """The probe takes a few minutes; a user closing the window meanwhile waits for one step at most,
    and no half-measured figures are cached."""
    page = window.hardware
    page.measure_cpu()
    qtbot.waitUntil(lambda: "writing" in page.speed_label.text(), timeout=WAIT)
    job = page.probe_job
    started = time.monotonic()
    page.shutdown()
    assert job is not None and not job.running and time.monotonic() - started < 30
    assert not list((tmp_path / "device-speed").glob("cpu-*.json"))


@pytest.mark.slow
def test_the_probe_counts_its_steps_and_stop_ends_it_at_the_next(window, qtbot, tmp_path):
    """Issue 51: every long action shows progress and an estimate and can be cancelled; the probe said what it
    was doing but not how far it was, and only closing the app stopped it."""
    page = window.hardware
    assert not page.stop_probe_button.isEnabled()
    page.measure_cpu()
    assert page.stop_probe_button.isEnabled() and not page.measure_button.isEnabled()
    qtbot.waitUntil(lambda: "step 1 of " in page.speed_label.text(), timeout=WAIT)
    # a fresh folder: the F16 write, four timings, and a write and a timing for each quantization class
    assert f"step 1 of {5 + 2 * len(PROBE_QUANTS)}: writing" in page.speed_label.text()
    assert "s so far" in page.speed_label.text()
    page.stop_probe_button.click()
    assert "stopping after the current step" in page.speed_label.text()
    qtbot.waitUntil(lambda: not page._probing(), timeout=WAIT)
    assert "stopped; nothing was kept" in page.speed_label.text()
    assert page.measure_button.isEnabled() and not page.stop_probe_button.isEnabled()
    assert not list((tmp_path / "device-speed").glob("cpu-*.json"))


def test_the_probes_pace_is_an_estimate_from_its_steps_so_far():
    from app.pages.hardware import probe_pace

    assert probe_pace("step 1 of 9: writing", 12.0) == "12 s so far"
    assert probe_pace("step 4 of 9: timing", 90.0) == "1.5 min so far, about 3 min left at this pace"
    assert probe_pace("something else", 5.0) == "5 s so far"
    from app.widgets.pace import pace_text  # the same text for a validation's runs and a baseline's tokens

    assert pace_text(1, 2, 30.0) == "30 s so far, about 30 s left at this pace"
    assert pace_text(10, 200, 3.0) == "3 s so far, about 57 s left at this pace"
    assert pace_text(2, 2, 40.0) == "40 s so far"
