"""Every knob, mid-run, through the Lab page (issue 18, item 5).

A knob moved while the Lab runs reaches the worker after the page's settle timer; when the worker says
which cycle first used it, the page marks every chart there. For each knob of the Lab's panel these
tests move the widget during a run, wait for that answer, and check the cycles the page received (and
the counts its charts show) against what llama.cpp must do with the new value from that cycle on and
the old one before it, as tests/test_knobs_mid_run.py does at the worker: draft lengths that K, p-min,
n-min and the ngram-mod sizes bound, ngram-simple's drafts recomputed from the history, no drafts when a
knob forbids them, every draft of an identical draft accepted once sampling is greedy, and the tokens a
fresh run samples after a seed change. The Lab's panel has no min-p knob.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pytest

pytest.importorskip("PySide6")


from app.pages.lab.controls import LabControls  # noqa: E402
from engine.core.settings import LoadSettings  # noqa: E402
from engine.runtime.client import EngineClient  # noqa: E402

from .conftest import PROMPTS  # noqa: E402
from .test_knobs_mid_run import (  # noqa: E402
    Condition,
    Context,
    NgramModOracle,
    Phase,
    cycles,
    ngram_simple_draft,
    seen,
    tokenize,
)

pytestmark = pytest.mark.slow  # every test here starts the engine worker or llama-server

WAIT = 120_000  # ms; generous: CI machines are small and may be busy
K = 4
CTX = 4096  # the Lab's context in these runs: the room it leaves caps an n-gram draft
LIMIT = 1000  # cycles in one phase: one that has not shown what it waits for by then never will


@pytest.fixture
def window(window, qtbot):
    """The common window (tests/conftest.py), its Lab sending a knob 1 ms after it rests. The page sends once
    the knob has rested KNOB_SETTLE_MS (150 ms); on a machine where the tiny test models run a cycle in well
    under a millisecond, that is hundreds of cycles, and a few changes fill the context. The timer still
    decides when the page sends; it just waits less. The window's first look at the catalog (a scan and a
    ranking, in background threads) ends before the test starts: it holds the interpreter for seconds, and a
    GUI thread that falls behind the worker moves a knob hundreds of cycles late, with too little context left
    for what the test waits to see."""
    window.lab.knob_timer.setInterval(1)
    models = window.models
    qtbot.waitUntil(lambda: models._started and not models.background_busy, timeout=WAIT)
    return window


@pytest.fixture(scope="module")
def prompt_tokens(pair) -> dict[str, list[int]]:
    """The prompts' tokens, as the engine reads them (for recomputing ngram-simple's drafts)."""
    client = EngineClient()
    client.start()
    try:
        client.load(LoadSettings(pair[0], None, ctx=256, threads=1))
        return {p: tokenize(client, p) for p in PROMPTS}
    finally:
        client.close()


def set_up(w, pair, *, method="draft-simple", prompt=PROMPTS[1], ctx=CTX, max_tokens=1 << 16, **knobs) -> None:
    """The pair, one CPU thread, a custom prompt and a budget the runs here never reach (they end by Stop),
    then each knob widget named in ``knobs`` (k, p_min, size_n, temp, seed, ...)."""
    c = w.lab.controls
    c.target.set_path(pair[0])
    c.draft.set_path(pair[1])
    c.ctx.setValue(ctx)
    c.threads.setValue(1)
    c.method.setCurrentText(method)
    c.k.setValue(K)
    c.p_min.setValue(0.0)
    c.temp.setValue(0.0)
    c.seed.setValue(11)
    for name, value in knobs.items():
        getattr(c, name).setValue(value)
    c.workload.setCurrentText("custom prompt")
    c.prompt.setPlainText(prompt)
    c.max_tokens.setValue(max_tokens)


@dataclass
class Move:
    """A knob moved on the panel once the phase before it satisfies ``ready``; ``label`` is the marker the
    page must draw where the worker says the change took effect."""

    move: Callable[[LabControls], object]
    label: str
    ready: Condition = field(default=cycles(10))


@dataclass
class LabRun:
    cycles: list[dict]  # the first generation's cycles, as the page received them
    applied: list[dict]  # the worker's 'updated' events

    def phases(self) -> list[Phase]:
        bounds = [1] + [u["from_cycle"] for u in self.applied] + [len(self.cycles)]
        return [self.cycles[a:b] for a, b in zip(bounds, bounds[1:])]


def run_lab(qtbot, w, moves: list[Move], until: Condition | None = None) -> LabRun:
    """Start the Lab, make each move once the cycles since the previous change satisfy its ``ready`` (and the
    page got the worker's answer to it), wait for ``until`` on the last phase, Stop. Waits only on events;
    every wait also ends at LIMIT cycles, and the checks say which phase never showed what it waited for."""
    until = until or cycles(12)
    lab, controller = w.lab, w.controller
    n_ctx = lab.controls.ctx.value()
    got: list[dict] = []
    applied: list[dict] = []
    finished: list[dict] = []
    first_run: list = []

    def on_cycles(batch: list) -> None:
        for c in batch:
            if not first_run:
                first_run.append(c["run"])
            if c["run"] == first_run[0]:
                got.append(c)

    def phase() -> Phase:
        return got[applied[-1]["from_cycle"] if applied else 1 :]

    def over() -> bool:
        """The first generation ended, or it cannot go on long enough: stop waiting, the checks say why."""
        return bool(finished) or len(phase()) > LIMIT or bool(got) and got[-1]["n_past"] > n_ctx - 160

    controller.cycles.connect(on_cycles)
    controller.settingsApplied.connect(applied.append)
    controller.runFinished.connect(finished.append)
    try:
        lab.start()
        for n, m in enumerate(moves):
            qtbot.waitUntil(lambda m=m: m.ready(phase(), got, applied) or over(), timeout=WAIT)
            assert not finished and m.ready(phase(), got, applied), (
                f"the phase before move {n + 1} never showed what it waited for"
            )
            m.move(lab.controls)
            qtbot.waitUntil(lambda n=n: len(applied) > n or over(), timeout=WAIT)
            assert len(applied) > n, f"move {n + 1} ({m.label}) never reached the engine"
        qtbot.waitUntil(lambda: until(phase(), got, applied) or over(), timeout=WAIT)
        assert not finished and until(phase(), got, applied), "the last phase never showed what it waited for"
        lab.stop()
        qtbot.waitUntil(lambda: lab.mode == "idle", timeout=WAIT)
    finally:
        controller.cycles.disconnect(on_cycles)
        controller.settingsApplied.disconnect(applied.append)
        controller.runFinished.disconnect(finished.append)
    run = LabRun(got, applied)
    # the first generation ran until Stop, with one change per move, each taking effect where the worker says
    assert finished and finished[0]["event"] == "cancelled" and finished[0]["run"] == first_run[0]
    assert [c["i"] for c in got] == list(range(len(got)))
    assert len(applied) == len(moves) and all(u["run"] == first_run[0] for u in applied)
    for p in run.phases():
        assert len({c["epoch"] for c in p}) == 1
    for a, b in zip(run.phases(), run.phases()[1:]):
        assert b[0]["epoch"] == a[-1]["epoch"] + 1
    # the page marked each change at its cycle, with what moved, and its charts hold the same cycles
    assert [(mk.cycle, mk.label) for mk in lab.live.markers] == [
        (u["from_cycle"], m.label) for u, m in zip(applied, moves)
    ]
    series = lab.live.snapshot().series  # the ring keeps the last 2048 speculative cycles
    shown = got[1:][-len(series["drafted"]) :]
    assert np.array_equal(series["drafted"], [c["drafted"] for c in shown])
    assert np.array_equal(series["accepted"], [c["accepted"] for c in shown])
    return run


def drafts(c: dict) -> bool:
    return c["drafted"] > 0


def ngram_simple(ctx: Context, c: dict, sizes: tuple[int, int], n_ctx: int = CTX) -> int:
    """What ngram-simple drafts at cycle c (the room left in the context caps it, as in llama-server)."""
    tokens, sampled = ctx.at[c["i"]]
    return min(ngram_simple_draft(tokens, sampled, *sizes), n_ctx - len(tokens) - 2)


# -- the method, p-min, n-min -----------------------------------------------------------------------
def test_method_moved_while_running(qtbot, window, pair, prompt_tokens):
    """draft-simple -> ngram-simple -> none -> draft-simple: K every cycle, ngram-simple's drafts exactly,
    nothing, K again."""
    set_up(window, pair, size_n=1, size_m=3)
    run = run_lab(
        qtbot,
        window,
        [
            Move(lambda c: c.method.setCurrentText("ngram-simple"), "method draft-simple→ngram-simple"),
            Move(lambda c: c.method.setCurrentText("none"), "method ngram-simple→none", ready=seen(drafts)),
            Move(lambda c: c.method.setCurrentText("draft-simple"), "method none→draft-simple"),
        ],
    )
    simple, ngram, none, back = run.phases()
    assert all(c["drafted"] == K for c in simple + back)
    ctx = Context(prompt_tokens[PROMPTS[1]]).follow(run.cycles)
    assert [c["drafted"] for c in ngram] == [ngram_simple(ctx, c, (1, 3)) for c in ngram]
    assert all(c["drafted"] == 0 and c["emitted"] == 1 for c in none)


def test_p_min_and_n_min_moved_while_running(qtbot, window, pair):
    """p-min 0 -> 0.9: drafts cut short where the draft model is unsure; then n-min 0 -> 3: those of 1 or 2
    tokens are dropped whole."""
    set_up(window, pair)

    def short(c: dict) -> bool:
        return 0 < c["drafted"] < 3

    run = run_lab(
        qtbot,
        window,
        [
            Move(lambda c: c.p_min.setValue(0.9), "p-min 0→0.9"),
            Move(lambda c: c.n_min.setValue(3), "n-min 0→3", ready=seen(short)),
        ],
        until=lambda phase, run, applied: len(phase) >= 20 and sum(c["drafted"] >= 3 for c in phase) >= 3,
    )
    before, high, at_least_3 = run.phases()
    assert all(c["drafted"] == K for c in before)
    assert any(short(c) for c in high)
    assert all(c["drafted"] in (0, 3, 4) for c in at_least_3), [c["drafted"] for c in at_least_3]


# -- the n-gram knobs -----------------------------------------------------------------------------------
def test_ngram_sizes_moved_while_running(qtbot, window, pair, prompt_tokens):
    """ngram-simple with n 1, m 4 -> n 2 -> m 6: each cycle drafts exactly what its sizes find in the history;
    each phase runs until a cycle where the sizes before it would have drafted otherwise."""
    set_up(window, pair, method="ngram-simple", prompt=PROMPTS[2], size_n=1, size_m=4)
    ctx = Context(prompt_tokens[PROMPTS[2]])

    def predicted(c: dict, sizes: tuple[int, int], run: list[dict]) -> int:
        return ngram_simple(ctx.follow(run), c, sizes)

    def differs(old: tuple[int, int], new: tuple[int, int]) -> Condition:
        return lambda phase, run, applied: (
            len(phase) >= 10 and any(predicted(c, old, run) != predicted(c, new, run) for c in phase)
        )

    run = run_lab(
        qtbot,
        window,
        [
            Move(lambda c: c.size_n.setValue(2), "n 1→2", ready=seen(drafts)),
            Move(lambda c: c.size_m.setValue(6), "m 4→6", ready=differs((1, 4), (2, 4))),
        ],
        until=differs((2, 4), (2, 6)),
    )
    for phase, sizes in zip(run.phases(), [(1, 4), (2, 4), (2, 6)]):
        assert [c["drafted"] for c in phase] == [predicted(c, sizes, run.cycles) for c in phase], sizes


def test_min_hits_moved_while_running(qtbot, window, pair):
    """ngram-map-k4v min hits 1 -> 1000 -> 1: no key is seen 1000 times since the change rebuilt the
    speculators, so no drafts; then drafts again."""
    set_up(window, pair, method="ngram-map-k4v", size_n=1, size_m=4, min_hits=1)
    run = run_lab(
        qtbot,
        window,
        [
            Move(lambda c: c.min_hits.setValue(1000), "hits 1→1000", ready=seen(drafts)),
            Move(lambda c: c.min_hits.setValue(1), "hits 1000→1", ready=cycles(40)),
        ],
        until=seen(drafts),
    )
    before, never, again = run.phases()
    assert len(never) < 1000 and all(c["drafted"] == 0 for c in never)


MOD = {"ngram_mod_n_match": 2, "ngram_mod_n_min": 0, "ngram_mod_n_max": 64}


def test_ngram_mod_sizes_moved_while_running(qtbot, window, pair, prompt_tokens):
    """ngram-mod (match 2, min 0, max 64): match -> 1024 -> 2, then max -> 3. Every cycle drafts exactly what
    llama.cpp's speculator, replayed on the run's tokens and rebuilt at each change, drafts; each phase runs
    until a cycle where the knobs before it would have drafted otherwise."""
    set_up(window, pair, method="ngram-mod", mod_match=2, mod_min=0, mod_max=64)
    oracle = NgramModOracle(prompt_tokens[PROMPTS[1]], MOD, 4096)
    run = run_lab(
        qtbot,
        window,
        [
            Move(lambda c: c.mod_match.setValue(1024), "ngram_mod_n_match 2→1024", ready=seen(drafts)),
            Move(lambda c: c.mod_match.setValue(2), "ngram_mod_n_match 1024→2", ready=oracle.differs()),
            Move(lambda c: c.mod_max.setValue(3), "ngram_mod_n_max 64→3", ready=oracle.differs()),
        ],
        until=oracle.differs(),
    )
    assert [c["drafted"] for c in run.cycles] == oracle(run.cycles, run.applied)


def test_ngram_mod_min_moved_while_running(qtbot, window, pair, prompt_tokens):
    """ngram-mod (match 4) min 0 -> 64 (= max): as above, exactly the replayed speculator's drafts; a chain
    that ends before 64 tokens is dropped whole."""
    set_up(window, pair, method="ngram-mod", prompt=PROMPTS[2], mod_match=4, mod_min=0, mod_max=64)
    oracle = NgramModOracle(prompt_tokens[PROMPTS[2]], {**MOD, "ngram_mod_n_match": 4}, 4096)
    run = run_lab(
        qtbot,
        window,
        [Move(lambda c: c.mod_min.setValue(64), "ngram_mod_n_min 0→64", ready=seen(drafts))],
        until=oracle.differs(),
    )
    assert [c["drafted"] for c in run.cycles] == oracle(run.cycles, run.applied)
    assert all(c["drafted"] in (0, 64) for c in run.phases()[-1])


# -- sampling -------------------------------------------------------------------------------------------
def test_sampling_moved_while_running_on_an_identical_draft(qtbot, window, identical_pair):
    """The identical pair's draft proposes the target's likeliest tokens. Sampled at temperature 1.5 the
    target rejects some; temperature 0, then top-k 1, then top-p 0.01 (of at least 1/40 kept by top-k 40)
    each make it greedy, and from their cycle on it accepts every draft."""
    set_up(window, identical_pair, temp=1.5, top_k=40, top_p=1.0, seed=5)

    def rejected(c: dict) -> bool:
        return c["accepted"] < c["drafted"]

    run = run_lab(
        qtbot,
        window,
        [
            Move(lambda c: c.temp.setValue(0.0), "temp 1.5→0", ready=seen(rejected)),
            Move(lambda c: c.temp.setValue(1.5), "temp 0→1.5"),
            Move(lambda c: c.top_k.setValue(1), "top_k 40→1", ready=seen(rejected)),
            Move(lambda c: c.top_k.setValue(40), "top_k 1→40"),
            Move(lambda c: c.top_p.setValue(0.01), "top_p 1→0.01", ready=seen(rejected)),
        ],
        until=cycles(20),
    )
    phases = run.phases()
    for greedy in (phases[1], phases[3], phases[5]):
        assert all(c["drafted"] == K and c["accepted"] == K for c in greedy)
    for hot in (phases[0], phases[2], phases[4]):
        assert any(rejected(c) for c in hot)


N_AFTER = 40
PROMPT = PROMPTS[3]  # its greedy continuation reads back as the same tokens


def first_generation(qtbot, w, prompt: str, n: int, **knobs) -> tuple[dict, list[int]]:
    """Start the Lab on ``prompt`` for ``n`` tokens and Stop once its first generation is done: the prompt
    cycle, and the tokens generated."""
    c = w.lab.controls
    c.prompt.setPlainText(prompt)
    c.max_tokens.setValue(n)
    for name, value in knobs.items():
        getattr(c, name).setValue(value)
    got: list[dict] = []
    with qtbot.waitSignal(w.controller.runFinished, timeout=WAIT) as done:
        w.controller.cycles.connect(got.extend)
        w.lab.start()
    w.controller.cycles.disconnect(got.extend)
    w.lab.stop()
    qtbot.waitUntil(lambda: w.lab.mode == "idle", timeout=WAIT)
    run = done.args[0]["run"]
    mine = [cy for cy in got if cy["run"] == run]
    assert done.args[0]["event"] == "done"
    return mine[0], [t for cy in mine for t in cy["tokens"]]


def test_seed_moved_while_running(qtbot, window, pair):
    """Greedy (top-k 1, seed 11) then top-k 5 with seed 99 in one move, at temperature 3: from the worker's
    cycle on, the page gets the tokens a fresh Lab run samples with seed 99 from the same context (the prompt
    plus the text so far), and not those seed 11 samples there."""
    set_up(window, pair, method="none", prompt=PROMPT, temp=3.0, top_k=1, top_p=1.0, seed=11)

    def top_k_5_seed_99(c: LabControls) -> None:
        c.top_k.setValue(5)
        c.seed.setValue(99)  # within the settle time: one change

    run = run_lab(qtbot, window, [Move(top_k_5_seed_99, "top_k 1→5, seed 11→99")], until=cycles(N_AFTER))
    f = run.applied[0]["from_cycle"]
    assert run.applied[0]["sampling"]["seed"] == 99
    before = [t for c in run.cycles[:f] for t in c["tokens"]]
    after = [t for c in run.cycles[f:] for t in c["tokens"]][:N_AFTER]
    context = PROMPT + "".join(c["text"] for c in run.cycles[:f])
    prompt_cycle, fresh = first_generation(qtbot, window, context, N_AFTER)
    assert prompt_cycle["n_prompt"] == run.cycles[0]["n_prompt"] + len(before)  # the same context, read back
    assert after == fresh
    assert after != first_generation(qtbot, window, context, N_AFTER, seed=11)[1]


# -- a refused knob ------------------------------------------------------------------------------------------
def test_unknown_method_is_refused_and_the_run_goes_on(qtbot, window, pair):
    """A method llama.cpp does not know is not sent: the banner says why, the run goes on as it was, and
    the next valid method is sent with the change counted from the last one sent."""
    set_up(window, pair)
    lab = window.lab

    def typed_nonsense(c: LabControls) -> None:
        c.method.setCurrentText("ngram-nonsense")
        qtbot.waitUntil(lambda: lab.banner.isVisible(), timeout=WAIT)
        assert "unknown speculative type 'ngram-nonsense'" in lab.banner.label.text()
        mark = len(lab.live.markers), lab.live.cycles
        qtbot.waitUntil(lambda: lab.live.cycles >= mark[1] + 20, timeout=WAIT)  # running on, nothing sent
        assert len(lab.live.markers) == mark[0] and lab.mode == "running"
        c.method.setCurrentText("none")

    run = run_lab(qtbot, window, [Move(typed_nonsense, "method draft-simple→none")])
    before, none = run.phases()
    assert all(c["drafted"] == K for c in before) and all(c["drafted"] == 0 for c in none)
