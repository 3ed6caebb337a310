"""The Start page's demo and `spectune gui --demo`: a pair into the Lab, its baseline, the quick check of which
setting pays here (engine.measure.quick_check, the same check `spectune demo` runs), then a live run with the
best until the user stops it.

It follows the Lab's signals (the engine's hello, the baseline's end, an engine failure) rather than polling, and
says what it is doing from the first moment: on a busy machine the engine's start alone has taken 30 s, with the
page showing "no run yet" meanwhile (issue 51). The screenshot and self-test script (app.scripted) is another
thing: it stops the run, tunes and validates, for pictures and tests.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

STARTING = (
    "The demo: starting the engine, loading the pair, then a baseline and a check of which setting pays here "
    "before the live run (seconds on a quiet machine; Esc stops it)"
)


def set_demo_knobs(session) -> None:
    """What every demo measures (this one and app.scripted's): draft-simple at K 4 on the code-completion set,
    or a short code prompt where the shipped sets cannot be read; the prompt `spectune demo` checks on."""
    session.set_spec_settings(replace(session.spec_settings(), spec_type="draft-simple", draft_n_max=4))
    if not session.set_workload("code-completion") and not session.custom_prompt().strip():
        session.set_custom_prompt("def the value of the data is")


class DemoRun:
    """One demo, from begin() until the live run starts (finished) or something ends it first."""

    def __init__(self, window, pair: tuple[Path, Path] | None = None):
        """window: the app.main_window.MainWindow (not imported: the window imports this module)."""
        self.w = window
        self.lab = window.lab
        self.pair = pair  # a pair the Start page downloaded; None: the bundled demo pair
        self._step = "new"  # new | wait-engine | baseline | done

    @property
    def finished(self) -> bool:
        """The live run is started, or the demo ended before it (a stopped baseline, an engine failure)."""
        return self._step == "done"

    def begin(self) -> None:
        session = self.w.session
        if self.pair is not None:
            session.set_pair(*self.pair)
        else:
            self.w.models.use_demo_pair()
        self.w.show_page("Lab")
        self.lab.banner.show_message(STARTING, "info")
        set_demo_knobs(session)
        self._step = "wait-engine"
        self.w.controller.hello.connect(self._on_hello)
        self.w.controller.failed.connect(self._on_failed)
        self.lab.baselineEnded.connect(self._on_baseline)
        if self.w.controller.hello_info is not None:
            self._on_hello(self.w.controller.hello_info)

    def _on_hello(self, _ev: dict) -> None:
        if self._step != "wait-engine":
            return
        self._step = "baseline"
        self.lab.baseline()

    def _on_baseline(self, kept: bool) -> None:
        if self._step != "baseline":
            return
        if kept:
            # the live run starts from the setting measured to pay here, not from an assumed one
            self.lab.quick_check(then_start=True)
        self._end()

    def _on_failed(self, ev: dict) -> None:
        if ev.get("kind") != "busy" and self._step != "done":
            self._end()  # the Lab's banner says what failed

    def _end(self) -> None:
        self._step = "done"
        for signal, slot in (
            (self.w.controller.hello, self._on_hello),
            (self.w.controller.failed, self._on_failed),
            (self.lab.baselineEnded, self._on_baseline),
        ):
            try:
                signal.disconnect(slot)
            except (RuntimeError, TypeError):
                pass  # already gone with the window
