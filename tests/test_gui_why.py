"""The Lab's "why" line: after a baseline, the running setting's measured parts in a sentence, and a new
sentence for a new K (the real engine worker, offscreen Qt)."""

from __future__ import annotations

import pytest

pytest.importorskip("PySide6")


from .test_gui import WAIT, set_pair  # noqa: E402


def test_after_a_baseline_the_lab_says_why_and_follows_k(qtbot, window, pair):
    lab = window.lab
    set_pair(window, pair, k=4, max_tokens=2000, ctx=4096)
    assert "Measure the baseline" in lab.why.text()
    lab.baseline()
    qtbot.waitUntil(lambda: lab.mode == "idle" and bool(lab.live.baseline_tps), timeout=WAIT)
    lab.start()
    qtbot.waitUntil(lambda: "at K=4)" in lab.why.text(), timeout=WAIT)
    assert "Speculation" in lab.why.text() and "verifying 5 tokens costs" in lab.why.text()
    lab.controls.k.setValue(2)
    qtbot.waitUntil(lambda: "(since K 4→2)" in lab.why.text() and "at K=2)" in lab.why.text(), timeout=WAIT)
    assert "verifying 3 tokens costs" in lab.why.text()
    lab.stop()
    qtbot.waitUntil(lambda: lab.mode == "idle", timeout=WAIT)
