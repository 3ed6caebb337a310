"""The Lab places a pair that does not fit the GPUs as llama.cpp would place it: on an NVML stand-in with
two GPUs of different sizes, the pre-load check finds the arrangement that fits, says so, and "Place it"
sets the Lab's placement knobs; the plan, the check and the load are real (the engine here is a CPU build,
so it refuses the GPU it does not have, clearly, and the Lab stays usable)."""

from __future__ import annotations

import pytest

pytest.importorskip("PySide6")

from PySide6.QtCore import QSettings  # noqa: E402

from app.main_window import MainWindow  # noqa: E402

from .conftest import GUI_WAIT  # noqa: E402
from .fake_nvml import FakeNVML, rtx4090  # noqa: E402
from .test_placement import _two_gpu_stand_in, mid_pair  # noqa: E402, F401  (the fixture is used by name)

pytestmark = pytest.mark.slow  # every test here starts the engine worker or llama-server


def test_a_pair_too_big_for_the_default_split_is_placed_with_one_click(qtbot, tmp_path, monkeypatch, mid_pair):  # noqa: F811
    from app.engine_controller import EngineController

    target, draft = mid_pair
    gpus, (placement, _plan) = _two_gpu_stand_in(target, draft, 2048)
    monkeypatch.setattr(EngineController, "gpu_backend", property(lambda self: True))
    monkeypatch.setenv("SPECTUNE_CONFIG_DIR", str(tmp_path / "config"))
    nvml = FakeNVML([rtx4090(i, total=g.free_bytes + 2**30, used=2**30) for i, g in enumerate(gpus)])
    w = MainWindow(settings=QSettings(str(tmp_path / "p.ini"), QSettings.Format.IniFormat), nvml=nvml)
    qtbot.addWidget(w)
    w.show()
    w.show_page("Lab")
    with qtbot.waitSignal(w.controller.hello, timeout=GUI_WAIT):
        w.controller.start()
    lab, c = w.lab, w.lab.controls
    c.set_gpu_devices([g.name for g in gpus])  # what a CUDA build's engine reports in its hello
    c.set_pair(target, draft)
    c.ctx.setValue(2048)
    c.threads.setValue(1)
    assert lab.load()  # the check runs off the GUI thread; what it finds arrives on the banner
    qtbot.waitUntil(lambda: lab.banner.button.text() == "Place it", timeout=GUI_WAIT)
    text = lab.banner.label.text()
    assert "It fits placed otherwise" in text and placement.describe() in text, text
    assert lab.banner.button.text() == "Place it"
    lab.banner.button.click()
    settings = c.load_settings()
    placed = placement.apply(settings)
    assert (settings.device, settings.device_draft, settings.ngl_draft, settings.n_cpu_moe) == (
        placed.device,
        placed.device_draft,
        placed.ngl_draft,
        placed.n_cpu_moe,
    )
    assert lab.preflight(settings).too_big is None
    # the CPU build has no such GPU: the engine says so, and the Lab is ready for the next try
    qtbot.waitUntil(lambda: lab.mode == "idle", timeout=GUI_WAIT)
    if settings.device or settings.device_draft:
        qtbot.waitUntil(lambda: "no GPU device named" in lab.banner.label.text(), timeout=GUI_WAIT)
    # the choice is kept with the Lab's state
    state = c.save_state()
    c.set_draft_on("")
    c.restore_state(state)
    assert c.load_settings() == settings
    w.close()
