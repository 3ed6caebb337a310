"""The Lab's "why" line: after a baseline, the running setting's measured parts in a sentence, and a new
sentence for a new K (the real engine worker, offscreen Qt)."""

from __future__ import annotations

import re

import pytest

pytest.importorskip("PySide6")


from .test_gui import WAIT, set_pair  # noqa: E402

pytestmark = pytest.mark.slow  # every test here starts the engine worker or llama-server


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


def test_a_baseline_is_dropped_when_the_pair_or_a_setting_changes(qtbot, window, pair):
    """Issue 51: the stats line names the baseline it divides by; a context change (or another pair) drops it and
    says so, and Ctrl+B shows its progress from the first tokens."""
    lab = window.lab
    set_pair(window, pair, k=4, max_tokens=200, ctx=2048)
    seen = []
    lab.baseline()
    qtbot.waitUntil(lambda: seen.append(lab.banner.label.text()) or "s so far" in seen[-1], timeout=WAIT)
    assert re.search(r"\d+ of 200 tokens, \d+ s so far(, about \d+ s left at this pace)?; Esc stops it", seen[-1])
    qtbot.waitUntil(lambda: lab.mode == "idle" and bool(lab.live.baseline_tps), timeout=WAIT)
    assert lab.baseline_record is not None and "tok/s at" in lab.banner.label.text()
    lab.start()
    qtbot.waitUntil(lambda: "speedup" in lab.summary.text(), timeout=WAIT)
    assert f"baseline {lab.baseline_record.tokens_per_s:.1f} ({lab.baseline_record.measured_at}" in lab.summary.text()
    lab.stop()
    qtbot.waitUntil(lambda: lab.mode == "idle", timeout=WAIT)
    lab.controls.ctx.setValue(1024)  # the pair loads again with another context at Start
    lab.start()
    qtbot.waitUntil(lambda: lab.mode == "running" and lab.live.cycles > 5, timeout=WAIT)
    assert lab.baseline_record is None and lab.live.baseline_tps is None
    assert "speedup" not in lab.summary.text() and "Measure the baseline" in lab.why.text()
    assert "measured another pair or other settings: measure again (Ctrl+B)" in lab.banner.label.text()
    lab.stop()
    qtbot.waitUntil(lambda: lab.mode == "idle", timeout=WAIT)


def test_a_baseline_measures_every_prompt_the_run_rotates_through(qtbot, window, pair):
    """The Lab's baseline was the first prompt alone while its runs (and spectune run --baseline) go through the
    whole set: it now runs each prompt once and keeps the set's tokens over its time."""
    lab = window.lab
    set_pair(window, pair, k=4, max_tokens=12, ctx=2048)
    lab.controls.workload.setCurrentText("code-completion")
    prompts = lab.session.collect_prompts()
    assert len(prompts) > 2
    seen: list[str] = []
    show = lab.banner.show_message
    lab.banner.show_message = lambda text, *a, **kw: seen.append(text) or show(text, *a, **kw)  # every message
    lab.baseline()
    qtbot.waitUntil(lambda: lab.mode == "idle" and lab.baseline_record is not None, timeout=WAIT)
    assert any(f"prompt 2 of {len(prompts)}, " in t and f" of {12 * len(prompts)} tokens" in t for t in seen)
    record = lab.baseline_record
    assert record.prompts == len(prompts) and 12 < record.tokens <= 12 * len(prompts)
    assert f"of {len(prompts)} prompts" in lab.banner.label.text() and lab.live.baseline_tps == record.tokens_per_s
    # the stats line, beside the run it divides, says so too
    lab.start()
    qtbot.waitUntil(lambda: "speedup" in lab.summary.text(), timeout=WAIT)
    assert f"{record.tokens} tokens of {len(prompts)} prompts), speedup" in lab.summary.text()
    lab.stop()
    qtbot.waitUntil(lambda: lab.mode == "idle", timeout=WAIT)


def test_esc_stops_a_run_while_the_method_box_has_the_focus(qtbot, window, pair):
    """Issue 51: the editable method box took Esc for itself; and K starts at 1 with a slider as long as the box."""
    from PySide6.QtCore import Qt

    lab = window.lab
    set_pair(window, pair, k=4, max_tokens=2000, ctx=2048)
    assert lab.controls.k.minimum() == 1 and lab.controls.k_slider.maximum() == lab.controls.k.maximum()
    lab.controls.k.setValue(40)
    assert lab.controls.k_slider.value() == 40 and lab.controls.k.value() == 40
    lab.controls.k.setValue(4)
    lab.start()
    qtbot.waitUntil(lambda: lab.mode == "running" and lab.live.cycles > 3, timeout=WAIT)
    lab.controls.method.setFocus()
    qtbot.waitUntil(lambda: lab.controls.method.lineEdit().hasFocus() or lab.controls.method.hasFocus(), timeout=WAIT)
    qtbot.keyClick(lab.controls.method.lineEdit(), Qt.Key.Key_Escape)
    qtbot.waitUntil(lambda: lab.mode == "idle", timeout=WAIT)


def test_another_pair_clears_the_last_pairs_figures_and_its_refusal(qtbot, window, pair, incompatible_pair):
    """Issue 51: a refusal banner, stats and charts of the last pair stayed after a compatible pair was picked."""
    lab = window.lab
    set_pair(window, incompatible_pair)
    lab.load()
    qtbot.waitUntil(lambda: lab.banner.isVisible() and lab.banner.level in ("error", "warning"), timeout=WAIT)
    qtbot.waitUntil(lambda: lab.mode == "idle", timeout=WAIT)
    set_pair(window, pair, max_tokens=2000)
    assert not lab.banner.isVisible()
    lab.start()
    qtbot.waitUntil(lambda: lab.mode == "running" and lab.live.cycles > 3, timeout=WAIT)
    lab.stop()
    qtbot.waitUntil(lambda: lab.mode == "idle" and "tokens/s" in lab.summary.text(), timeout=WAIT)
    lab.controls.target.set_path(pair[1])  # another target: the draft's file
    assert lab.live.cycles == 0 and lab.summary.text() == ""
