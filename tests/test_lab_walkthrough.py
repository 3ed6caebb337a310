"""The Lab as a new user meets it (issue 51), driven offscreen through one window: the demo, then the real Qwen
pair loaded over it, a run whose K and method move, the baseline, a run against it, and a short tune.

At every chart update (the Lab's 25 Hz timer) and every stats-line update the figures on screen are checked
against what the run itself allows:

- a baseline-relative figure (the speedup, the why line) uses a baseline measured on the pair, load settings and
  sampling on screen now, never the demo's or another setting's;
- no speedup is shown above what the run's tokens a step allow (engine.measure.baseline.speedup_ceiling); past it
  the stats line says "out of date" instead of a number;
- the mean accepted length lies within the histogram of tokens kept per step, and within K + 1 while only
  K-bounded methods ran;
- the why line's parts (drafting, verifying, the rest) add up to the step it explains.

The tune at the end must keep the table and the verdict on one figure or name the difference.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np
import pytest

from engine.measure.baseline import file_identity, speedup_ceiling
from engine.measure.why import explain

from .conftest import GUI_WAIT
from .test_gui_tune import set_tune
from .test_real_models import real_pair  # noqa: F401 (the fixture)

pytestmark = [pytest.mark.real_models]

WAIT = 4 * GUI_WAIT  # the real 1.5B on a busy 2-core machine
SPEEDUP = re.compile(r"speedup (\d+\.\d+)x")


@dataclass
class Checks:
    """Counts what was checked, so that a walk that checked nothing fails."""

    frames: int = 0
    speedups: int = 0
    out_of_date: int = 0
    whys: int = 0
    k_bound: int = 0
    problems: list[str] = field(default_factory=list)

    def fail(self, what: str) -> None:
        if len(self.problems) < 20:
            self.problems.append(what)


def install_checks(lab) -> Checks:
    """Wrap the Lab's repaint and stats line so that every figure they put on screen is checked first."""
    checks = Checks()
    methods_seen: set[str] = set()  # of the run on screen (a Start begins a new LiveSession)
    k_seen: list[int] = []
    session: list[object] = [None]
    paint, summary = lab.charts.refresh, lab._update_summary

    def check_baseline() -> None:
        s = lab.live
        if not s.baseline_tps:
            return
        record = lab.baseline_record
        c = lab.controls
        if record is None:
            checks.fail(f"a baseline of {s.baseline_tps:.1f} tok/s in use with no record of what it measured")
            return
        if record.tokens_per_s != s.baseline_tps:
            checks.fail(f"the run divides by {s.baseline_tps} where the kept baseline is {record.tokens_per_s}")
        on_screen = (file_identity(c.target.path()), file_identity(c.draft.path()))
        if lab.mode == "running" and record.key[:2] != on_screen:
            checks.fail(f"the baseline measured {record.key[:2]}, the pair on screen is {on_screen}")
        if lab.mode == "running" and not record.matches(lab.controller.load_settings, lab._sent_sampling):
            checks.fail("the baseline measured other load settings or sampling than the run's")

    def check_stats_line() -> None:
        s = lab.live
        text = lab.summary.text()
        m = SPEEDUP.search(text)
        if m:
            checks.speedups += 1
            shown, ceiling = float(m.group(1)), speedup_ceiling(s.stats.mean_accepted_length)
            if s.steps and shown > ceiling + 0.005:
                checks.fail(f"speedup {shown}x shown past the ceiling {ceiling:.2f} of this run: {text}")
        if "out of date" in text:
            checks.out_of_date += 1

    def check_lengths(snapshot) -> None:
        s = lab.live
        if not s.steps:
            return
        if s is not session[0]:
            session[0] = s
            methods_seen.clear()
            k_seen.clear()
        mean = s.stats.mean_accepted_length
        hist = np.asarray(snapshot.length_histogram)
        if hist.size and hist.sum():
            longest_bin = 1 + int(np.flatnonzero(hist)[-1])  # the bar of a step that kept 1 + accepted tokens
            if mean > longest_bin + 1e-9:
                checks.fail(f"mean accepted length {mean:.2f} past the histogram's last bar {longest_bin}")
        methods_seen.add(str(lab._sent_spec.get("spec_type") or "draft-simple"))
        k_seen.append(int(lab._sent_spec.get("draft_n_max") or 0))
        if methods_seen == {"draft-simple"} and k_seen:
            checks.k_bound += 1
            if mean > max(k_seen) + 1 + 1e-9:
                checks.fail(f"mean accepted length {mean:.2f} past K + 1 = {max(k_seen) + 1}")

    def check_why(snapshot) -> None:
        s = lab.live
        if not s.baseline_tps:
            return
        method = str(lab._sent_spec.get("spec_type") or "draft-simple")
        why = explain(snapshot, s.current.tokens_per_s if s.current.steps else None, method=method)
        if why is None:
            return
        checks.whys += 1
        total = why.draft_part + why.verify_part + why.rest_part
        if abs(total - why.step_ratio) > 0.01 * max(why.step_ratio, 1e-9) + 0.005:
            checks.fail(f"the why line's parts add to {total:.3f} where its step costs {why.step_ratio:.3f}")

    def checked_paint(snapshot, *args, **kwargs):
        checks.frames += 1
        check_baseline()
        check_lengths(snapshot)
        check_why(snapshot)
        return paint(snapshot, *args, **kwargs)

    def checked_summary() -> None:
        summary()
        check_baseline()
        check_stats_line()

    lab.charts.refresh = checked_paint
    lab._update_summary = checked_summary
    return checks


def test_the_lab_from_the_demo_through_a_real_pair_to_a_tune_shows_only_figures_its_run_allows(
    qtbot,
    window,
    real_pair,  # noqa: F811 (the fixture)
):
    lab = window.lab
    checks = install_checks(lab)

    # 1. the demo: its own pair, its baseline, a live run
    window.start_page.demo_button.click()
    qtbot.waitUntil(lambda: lab.live.baseline_tps is not None and lab.live.cycles >= 5, timeout=WAIT)
    demo_baseline = lab.baseline_record
    assert demo_baseline is not None
    lab.stop()
    qtbot.waitUntil(lambda: lab.mode == "idle", timeout=WAIT)
    qtbot.waitUntil(lambda: window._demo is None or window._demo.finished, timeout=WAIT)

    # 2. the real pair over it: nothing of the demo's stays on screen
    c = lab.controls
    c.target.set_path(real_pair[0])
    c.draft.set_path(real_pair[1])
    c.ctx.setValue(2048)
    c.threads.setValue(0)
    c.method.setCurrentText("draft-simple")
    c.k.setValue(3)
    c.temp.setValue(0.0)
    c.workload.setCurrentText("code-completion")
    c.max_tokens.setValue(48)
    assert lab.summary.text() == "" and lab.live.baseline_tps is None

    # 3. a run without a baseline, K and the method moved while it runs
    lab.start()
    qtbot.waitUntil(lambda: lab.live.steps >= 8, timeout=WAIT)
    assert lab.baseline_record is None, "the demo's baseline measured another pair"
    assert "speedup" not in lab.summary.text() and "baseline" not in lab.summary.text()
    c.k.setValue(6)
    steps = lab.live.steps
    qtbot.waitUntil(lambda: lab.live.steps >= steps + 8, timeout=WAIT)
    c.method.setCurrentText("ngram-mod")
    steps = lab.live.steps
    qtbot.waitUntil(lambda: lab.live.steps >= steps + 8, timeout=WAIT)
    lab.stop()
    qtbot.waitUntil(lambda: lab.mode == "idle", timeout=WAIT)

    # 4. the baseline of this pair, then a run against it
    c.method.setCurrentText("draft-simple")
    c.k.setValue(4)
    lab.baseline()
    qtbot.waitUntil(lambda: lab.mode == "idle" and lab.baseline_record is not None, timeout=WAIT)
    assert lab.baseline_record is not demo_baseline
    assert lab.baseline_record.key[0] == file_identity(real_pair[0])
    lab.start()
    qtbot.waitUntil(lambda: lab.live.steps >= 12 and bool(lab.why.text()), timeout=WAIT)
    qtbot.waitUntil(lambda: checks.speedups + checks.out_of_date > 0 and checks.whys > 0, timeout=WAIT)
    lab.stop()
    qtbot.waitUntil(lambda: lab.mode == "idle", timeout=WAIT)

    # 5. a short tune: the table's figure and the verdict agree or the page says why they differ
    window.show_page("Tune")
    page = window.tune
    set_tune(page, prompts=2, max_tokens=24, budget=60, k_max=4)
    page.start_button.click()
    qtbot.waitUntil(lambda: page.mode == "idle", timeout=3 * WAIT)
    result = page.result
    assert result is not None, page.log.toPlainText()[-2000:]
    note = result.search_vs_verdict()  # "" when the table's figure is the verdict's
    assert not note or "is the search's" in page.summary.text(), page.summary.text()

    print(
        f"walkthrough: {checks.frames} chart updates, {checks.speedups} speedups shown, "
        f"{checks.out_of_date} 'out of date', {checks.whys} why lines, {checks.k_bound} K-bound checks"
    )
    assert not checks.problems, "\n".join(checks.problems)
    assert checks.frames > 20 and checks.whys > 0 and checks.k_bound > 0
