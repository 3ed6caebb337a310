"""The quick check (engine.measure.quick_check): which setting pays here, measured in alternating rounds
against no speculation; and the Lab running it on the real engine."""

from __future__ import annotations

import pytest

from engine.core.settings import SpecSettings
from engine.measure.quick_check import BASELINE, CANDIDATES, schedule, summary, verdict

A, B = SpecSettings("draft-simple", draft_n_max=2), SpecSettings("ngram-mod")
NGRAM = {"ngram_mod_n_match": 8, "ngram_mod_n_min": 2, "ngram_mod_n_max": 16}


def test_every_round_runs_every_setting_and_no_speculation_in_alternating_order():
    plan = schedule((A, B), rounds=3)
    assert [spec for r, spec in plan if r == 0] == [BASELINE, A, B]
    assert [spec for r, spec in plan if r == 1] == [B, A, BASELINE]
    assert len(plan) == 9 and {r for r, _ in plan} == {0, 1, 2}


def test_each_ratio_comes_from_its_own_round_and_a_round_without_baseline_does_not_count():
    results = [(0, BASELINE, 10.0), (0, A, 8.0), (0, B, 12.0), (1, B, 26.0), (1, A, 16.0), (1, BASELINE, 20.0)]
    results.append((2, A, 99.0))  # stopped before round 2's baseline ran
    out = verdict(results)
    assert [o.spec for o in out] == [B, A]
    assert out[0].by_round == (1.2, 1.3) and out[0].speedup == pytest.approx(1.25)
    assert out[1].by_round == (0.8, 0.8)
    # two rounds both above x1.00: it pays, with the rounds' spread as the interval
    assert out[0].pays is True and (out[0].ratio.low, out[0].ratio.high) == (1.2, 1.3)
    assert "ngram-mod pays best: x1.25 against no speculation (x1.20 to x1.30, 50% interval over 2 rounds" in summary(
        out
    )
    slow = verdict([(0, BASELINE, 10.0), (0, A, 8.0)])
    assert slow[0].pays is False and summary(slow).startswith("No setting beat no speculation")


def test_a_median_above_one_whose_rounds_reach_one_is_not_shown_to_pay():
    """issue 30: the check said "x1.16 pays best" on rounds that a live run then measured at x0.91."""
    results = [(r, BASELINE, 10.0) for r in range(3)] + [(0, A, 12.0), (1, A, 9.5), (2, A, 11.6)]
    out = verdict(results)
    assert out[0].speedup == pytest.approx(1.16) and out[0].pays is None
    text = summary(out)
    assert "not shown to pay" in text and "x0.95 to x1.20" in text and "pays best" not in text


@pytest.mark.slow
def test_the_lab_checks_on_the_real_engine_sets_the_best_and_can_be_stopped(qtbot, window, pair):
    pytest.importorskip("PySide6")
    from .conftest import GUI_WAIT
    from .test_gui import set_pair

    set_pair(window, pair, max_tokens=32)
    lab = window.lab
    done: list = []
    lab.quickCheckDone.connect(done.append)
    lab.quick_check()
    qtbot.waitUntil(lambda: bool(done), timeout=GUI_WAIT)
    outcomes = done[0]
    assert {o.spec for o in outcomes} == set(CANDIDATES)  # the synthetic pair has a draft: all of them
    assert lab.mode == "idle" and lab.controls.spec_settings() == outcomes[0].spec
    assert any(t in lab.banner.label.text() for t in ("measured just now", "No setting beat", "not shown to pay"))
    # stopped half-way: nothing changes
    lab.controls.k.setValue(7)
    before = lab.controls.spec_settings()
    lab.quick_check()
    assert lab.mode == "checking" and "run 1 of" in lab.banner.label.text()
    lab.stop()  # the first run is under way: whether the cancel or its end arrives first, the check stops
    qtbot.waitUntil(lambda: lab.mode == "idle", timeout=GUI_WAIT)
    assert "Quick check stopped" in lab.banner.label.text() and lab.controls.spec_settings() == before
    # then_start: the live run goes on with the measured best
    lab.quick_check(then_start=True)
    qtbot.waitUntil(lambda: lab.mode == "running" and lab.live.cycles > 0, timeout=GUI_WAIT)
    assert lab.controls.spec_settings() == lab.last_check[0].spec
    lab.stop()
    qtbot.waitUntil(lambda: lab.mode == "idle", timeout=GUI_WAIT)


@pytest.mark.slow
def test_the_interactive_demo_starts_with_the_setting_measured_to_pay_here(qtbot, window):
    """`spectune gui --demo` and the Start page: the demo pair, a baseline, the quick check, then the live run
    with its best (app.demo_run, on the Lab's signals)."""
    pytest.importorskip("PySide6")
    from .conftest import GUI_WAIT

    window.lab.controls.threads.setValue(1)
    window.run_demo()
    lab = window.lab
    qtbot.waitUntil(lambda: lab.mode == "running" and bool(lab.last_check) and lab.live.cycles > 0, timeout=GUI_WAIT)
    assert window._demo is not None and window._demo.finished
    assert lab.live.baseline_tps and lab.controls.spec_settings() == lab.last_check[0].spec
    text = lab.banner.label.text()
    assert any(t in text for t in ("measured just now", "No setting beat", "not shown to pay")), text
    lab.stop()
    qtbot.waitUntil(lambda: lab.mode == "idle", timeout=GUI_WAIT)


def test_a_check_runs_only_what_the_pair_can_and_walks_its_schedule():
    """QuickCheckRun: the Lab's check loop, typed; without a draft model the n-gram candidate alone runs."""
    from engine.measure.quick_check import QuickCheckRun, candidates_for

    no_draft = {"draft-simple": "draft-simple needs a draft model"}
    assert [s.spec_type for s in candidates_for(no_draft)] == ["ngram-mod"]
    assert candidates_for({}) == CANDIDATES
    check = QuickCheckRun.for_pair(no_draft, ["the prompt"], {}, 64, then_start=True)
    assert {spec for _, spec in check.plan} == {BASELINE, SpecSettings("ngram-mod", **NGRAM)}
    measured, prompts = [], []
    while True:
        _, spec = check.next_run
        measured.append(spec)
        prompts.append(check.prompt)
        if not check.record(10.0 if spec == BASELINE else 12.0):
            break
    assert measured == [spec for _, spec in check.plan] and len(measured) == 2 * 3
    assert prompts == ["the prompt"] * 6 and check.max_tokens == 64
    (best,) = check.outcomes()
    assert best.speedup == pytest.approx(1.2) and best.pays is True and best.ratio.n == 3


def test_each_round_takes_the_next_prompt_of_the_set_the_live_run_goes_through():
    """A check on one short prompt said x0.79 where the live run on the whole set, right after it, showed x1.5:
    the rounds now go through the live run's prompts, at its length."""
    from engine.measure.quick_check import QuickCheckRun

    check = QuickCheckRun.for_pair({}, ["p0", "p1"], {}, 256, then_start=False)
    seen = []
    while True:
        seen.append((check.next_run[0], check.prompt))
        if not check.record(10.0):
            break
    assert {(r, p) for r, p in seen} == {(0, "p0"), (1, "p1"), (2, "p0")}


@pytest.mark.slow
def test_the_baseline_and_the_check_wait_for_the_apps_own_computing_work(qtbot, window, pair):
    """A demo baseline measured beside the Start page's first ranking read 180 tok/s, 808 after it: the Lab
    waits for computing background jobs (not for downloads), says so, and Esc cancels the wait."""
    import threading

    from app.background import BackgroundJob, computing_jobs

    from .conftest import GUI_WAIT
    from .test_gui import set_pair

    set_pair(window, pair, max_tokens=16)
    lab = window.lab
    release = threading.Event()
    download = BackgroundJob("a-download", lambda _: release.wait(60), window, computing=False).start()
    ranking = BackgroundJob("a-ranking", lambda _: release.wait(60), window, what="a ranking").start()
    qtbot.waitUntil(lambda: computing_jobs() == ["a ranking"], timeout=5000)  # the download does not count
    lab.baseline()
    qtbot.waitUntil(lambda: lab.controller.loaded_info is not None, timeout=GUI_WAIT)  # the pair loads first
    qtbot.waitUntil(lambda: "starts once a ranking is done" in lab.banner.label.text(), timeout=GUI_WAIT)
    qtbot.wait(600)
    assert lab.mode == "idle" and not lab.live.baseline_tps  # nothing measured while it computes
    lab.stop()  # Esc: the wait ends, nothing is measured
    assert "Not measured" in lab.banner.label.text()
    qtbot.wait(600)
    assert lab.mode == "idle" and not lab.live.baseline_tps
    lab.baseline()
    assert "starts once a ranking is done" in lab.banner.label.text()
    release.set()
    qtbot.waitUntil(lambda: not ranking.running and not download.running, timeout=5000)
    qtbot.waitUntil(lambda: bool(lab.live.baseline_tps) and lab.mode == "idle", timeout=GUI_WAIT)
