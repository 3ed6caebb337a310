"""The Lab: run a pair live while the knobs move.

Start loops over the chosen prompts until Stop, one engine generation per
prompt, all cycles feeding one engine.measure.live.LiveSession. A knob moved while a
run is going is sent to the worker after a short pause (so a dragged slider
sends one change, not thirty), and when the worker says which cycle first used
it, every chart gets a labelled marker there. Baseline measures tokens/s with
no speculation on the same loaded models. Charts repaint from a 25 Hz timer,
the text from a 4 Hz one; neither repaints per event.

The page's controls are the widgets of the session the pages share
(app.session); before it loads or runs it asks the coordinator of measuring
jobs (app.jobs), which stops it when a tune or a validation starts.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Literal, TypeAlias

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QHBoxLayout, QLabel, QScrollArea, QSplitter, QVBoxLayout, QWidget

from app.engine_controller import CRASHED, ERROR, LOADING, READY, EngineController
from app.header_reads import header_reads
from app.jobs import LAB, MeasuringJobs
from app.pages.lab.controls import LabControls
from app.quiet_wait import QuietWait
from app.session import LabSession, shipped_workloads
from app.widgets.banner import Banner
from app.widgets.live_charts import LiveCharts
from app.widgets.pace import pace_text
from app.widgets.page_shortcuts import add_page_shortcuts
from app.widgets.style import error_text, ok_text
from app.widgets.timers import make_timer
from app.widgets.token_text import TokenText
from engine.core.chat import Prompt
from engine.core.settings import LoadSettings, SamplingSettings, SettingsError, SpecSettings, from_dict, to_dict
from engine.core.stats import RunSummary
from engine.measure.baseline import Baseline, plausible_speedup
from engine.measure.live import LiveSession
from engine.measure.why import explain
from engine.planning.advice.preflight import Preflight, preflight_and_place, preflight_load
from engine.planning.memory.budget import Budget
from engine.runtime.events import ErrorEvent, FinishedEvent, HelloEvent, LoadedEvent, StartedEvent, UpdatedEvent

if TYPE_CHECKING:  # for annotations: the page imports these modules where it uses them
    from engine.measure.quick_check import QuickCheckRun
    from engine.planning.hardware import HardwareReport

CHART_INTERVAL_MS = 40  # 25 Hz
TEXT_INTERVAL_MS = 250  # 4 Hz
KNOB_SETTLE_MS = 150  # a knob must rest this long before it is sent

# what to do once the pair is loaded: "start", "baseline", "quick_check", or "reload" (at the next engine's
# hello); ("quick_check", then_start) for a check asked for while it loaded; ("reload", what the load was for)
# when a crashed load is tried again
_Pending: TypeAlias = str | tuple[Literal["quick_check"], bool] | tuple[Literal["reload"], "_Pending"] | None


class LabPage(QWidget):
    runFinished = Signal(dict)  # a summary, for history and other pages
    quickCheckDone = Signal(object)  # list[engine.measure.quick_check.Outcome], best first
    baselineEnded = Signal(bool)  # a baseline run ended: True where one was kept

    def __init__(
        self,
        controller: EngineController,
        parent: QWidget | None = None,
        *,
        session: LabSession | None = None,
        jobs: MeasuringJobs | None = None,
    ):
        """session: the one the other pages share (its widgets are this page's controls); jobs: the
        coordinator of measuring jobs, which this page asks before it loads or runs and gives way to."""
        super().__init__(parent)
        self.controller = controller
        self._init_run_state()
        self.controls = LabControls()
        self.controls.set_workloads(shipped_workloads())
        self.session = session if session is not None else LabSession(self)
        self.session.bind(self.controls)
        self.jobs = jobs if jobs is not None else MeasuringJobs()
        self.jobs.attach_lab(self, controller)
        self._build_layout()
        self._start_timers()
        self._connect_signals(controller)
        self.controls.set_running(False)
        self._update_why()
        self._update_chat_hint()
        self._add_shortcuts()

    def _init_run_state(self) -> None:
        """What the page keeps between events: the live statistics, the run's mode and prompts, what was sent."""
        self.live = LiveSession()
        self.mode = "idle"  # idle | loading | running | baseline | stopping
        self._pending: _Pending = None  # what to do once the pair is loaded
        self._check: QuickCheckRun | None = None  # the quick check under way: its schedule, results and prompt
        self._prompts: list[Prompt] = []
        self._prompt_index = 0
        self._sent_spec: dict = {}
        self._sent_sampling: dict = {}
        self._pending_labels: list[str] = []
        self._run_changes: list[str] = []  # the knob changes during the generation under way, for the history
        self.run_number = 0  # counts Starts: the history adds a run's generations into one row
        self._dirty = False
        self._bars_due = False  # the next repaint brings the bar charts up to date as well
        self.last_summary: RunSummary | None = None
        self.last_check: list = []  # the last quick check's outcomes, best first
        self.last_error: ErrorEvent | None = None
        # the last baseline and what it measured (engine.measure.baseline): figures use it only while it matches
        self.baseline_record: Baseline | None = None
        self._baseline_tokens = 0  # tokens of the baseline under way, for its progress
        self._baseline_started = 0.0  # when it began (time.monotonic), for its estimate
        self._baseline_parts: list[tuple[int, float]] = []  # (tokens, seconds) of its finished generations
        self._stopped_mode = ""  # what Stop interrupted ("baseline", ...), until its generation ends
        self._baseline_note = ""  # why the baseline was dropped, said once
        self.hardware_report: Callable[[], HardwareReport] | None = None  # set by the main window
        self._fit_override: LoadSettings | None = None  # "Load anyway" was chosen for exactly these settings
        # what the banner's button does now (restart, load anyway)
        self._banner_handler: Callable[[], object] | None = None

    def _build_layout(self) -> None:
        """The controls in a scroll area on the left; on the right the run buttons, the banner, the summary,
        why, the charts and, under a splitter, the generated text."""
        scroll = QScrollArea()
        scroll.setWidget(self.controls)
        scroll.setWidgetResizable(True)
        scroll.setMinimumWidth(440)
        scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.banner = Banner()
        self.charts = LiveCharts()
        self.summary = QLabel("no run yet")
        self.summary.setWordWrap(True)  # one line where there is room; never wider than a scaled laptop screen
        self.summary.setTextFormat(Qt.TextFormat.RichText)
        # why the current setting is as fast as it is (engine.measure.why), in a sentence
        self.why = QLabel("")
        self.why.setWordWrap(True)
        self.why.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.text = TokenText()
        right = QSplitter(Qt.Orientation.Vertical)
        top = QWidget()
        top_col = QVBoxLayout(top)
        top_col.setContentsMargins(0, 0, 0, 0)
        top_col.addWidget(self.controls.run_bar)  # Start, Stop, Baseline, Quick check: always in sight
        top_col.addWidget(self.banner)
        top_col.addWidget(self.summary)
        top_col.addWidget(self.why)
        top_col.addWidget(self.charts, 1)
        right.addWidget(top)
        right.addWidget(self.text)
        right.setStretchFactor(0, 4)
        right.setStretchFactor(1, 1)
        row = QHBoxLayout(self)
        row.addWidget(scroll)
        row.addWidget(right, 1)

    def _start_timers(self) -> None:
        """The charts repaint at 25 Hz and the text at 4 Hz; a moved knob is sent once it has rested."""
        self.chart_timer = make_timer(self, CHART_INTERVAL_MS, self._repaint)
        self.text_timer = make_timer(self, TEXT_INTERVAL_MS, self._flush_text)
        self.knob_timer = make_timer(self, KNOB_SETTLE_MS, self._send_knobs, single_shot=True)
        # a baseline or a quick check waits for the app's own computing work (app.quiet_wait)
        self.quiet = QuietWait(self, self.banner.show_message)
        self.chart_timer.start()
        self.text_timer.start()

    def _connect_signals(self, controller: EngineController) -> None:
        """The controls' requests and the engine's events, to the page's handlers."""
        c = self.controls
        c.startRequested.connect(self.start)
        c.stopRequested.connect(self.stop)
        c.baselineRequested.connect(self.baseline)
        c.checkRequested.connect(self.quick_check)
        c.loadRequested.connect(self.load)
        c.knobsChanged.connect(self._knobs_moved)
        c.pairChanged.connect(self._update_chat_hint)
        c.pairChanged.connect(self._pair_changed)
        c.chatModeChanged.connect(self._update_chat_hint)
        header_reads().ready.connect(self._update_chat_hint)
        self.banner.actionClicked.connect(self._banner_action)
        controller.cycles.connect(self._on_cycles)
        controller.loaded.connect(self._on_loaded)
        controller.runFinished.connect(self._on_run_finished)
        controller.runStarted.connect(self._on_run_started)
        controller.settingsApplied.connect(self._on_settings_applied)
        controller.failed.connect(self._on_failed)
        controller.stateChanged.connect(self._on_state)
        controller.hello.connect(self._on_hello)
        controller.unloaded.connect(self._on_unloaded)

    def _add_shortcuts(self) -> None:
        """The run's keys, wherever the focus is on the page."""
        add_page_shortcuts(
            self,
            (
                ("Ctrl+Return", self.start),
                ("Ctrl+Enter", self.start),
                ("Esc", self.stop),
                ("Ctrl+B", self.baseline),
                ("Ctrl+Shift+Q", self.quick_check),
                ("Ctrl+L", self.load),
            ),
        )

    # -- actions ----------------------------------------------------------
    def _refused_while_busy(self) -> bool:
        """A tune or a validation measures speed with an engine of its own: the Lab refuses to load or run
        beside it (and says so) until it ends."""
        return self.jobs.refuse(LAB, lambda why: self.banner.show_message(why, "warning"))

    def load(self) -> bool:
        """Check the pair in the controls (engine.planning.advice.preflight: its files, llama.cpp's vocabulary rule,
        the memory plan) off the GUI thread, then load it (_checked). False when nothing starts: a run or a
        load under way, a measuring job, invalid knobs; a refusal the check finds arrives later, on the
        banner. The 1.5B hub model's header alone holds 151936 tokens: read on the GUI thread, it froze the
        window (issue 30 #7)."""
        if self.mode != "idle":
            return False  # a run, a baseline or a load is under way: its end comes first
        # a refused load drops what it was for (a start, a baseline), lest the next load do it unasked
        if self._refused_while_busy():
            self._pending = None
            return False
        try:
            settings = self.controls.load_settings()
        except SettingsError as exc:
            self.banner.show_message(str(exc), "warning")
            self._pending = None
            return False
        with_memory = settings != self._fit_override
        report = self.hardware_report() if self.hardware_report else None
        budget = Budget.from_report(report, **self.controller.fit_context()) if report is not None else None
        self.mode = "loading"
        self.controls.set_running(True)
        self.banner.show_message("Checking the pair before it loads: its files, vocabularies and memory…", "info")
        from app.background import BackgroundJob

        job = BackgroundJob("lab-preflight", lambda _: _check_pair(settings, budget if with_memory else None), self)
        self._preflight_job = job.on(done=lambda r: self._checked(settings, *r), failed=self._check_failed).start()
        return True

    def _settings_now(self) -> LoadSettings | None:
        try:
            return self.controls.load_settings()
        except SettingsError:
            return None

    def _check_failed(self, exc: BaseException) -> None:
        self.mode = "idle"
        self.controls.set_running(False)
        self._pending = None
        self.banner.show_message(f"The pair could not be checked: {exc}", "error")

    def _checked(self, settings: LoadSettings, check: Preflight, placed) -> None:
        """The pre-load check's answer, in the GUI thread: load, or say why not and offer what would fit."""
        if self.mode != "loading" or self.controller.state == LOADING:
            return  # stopped while it ran (or a load is under way after all): the answer is not wanted
        moved = self._settings_now() != settings
        if check.refusal or check.too_big or moved:
            self.mode = "idle"
            self.controls.set_running(False)
        if moved:
            self._pending = None  # the knobs moved while the check ran: it checked another pair
            self.banner.show_message("The knobs changed during the check; load again to check them.", "info")
            return
        if check.refusal:
            self.banner.show_message(check.refusal, "error")
            self._pending = None
            return
        too_big = check.too_big
        if too_big:
            self._offer_what_fits(settings, too_big, placed)
            return
        self.banner.hide()
        self.controller.load(settings)

    def _offer_what_fits(self, settings: LoadSettings, too_big: str, placed) -> None:
        """A pair the memory plan says does not fit: "Place it" where another placement fits, else "Load
        anyway"; what the load was for waits on the answer."""
        pending, self._pending = self._pending, None
        if placed is not None:

            def place_it() -> None:
                self.controls.apply_placement(placed)
                self._pending = pending
                if not self.load():
                    self._pending = None

            self._banner_handler = place_it
            flags = " ".join(placed.flags(with_draft=settings.draft is not None))
            self.banner.show_message(
                f"{too_big}\nIt fits placed otherwise: {placed.describe()} ({flags}).", "warning", "Place it"
            )
            return

        def load_anyway() -> None:
            self._fit_override, self._pending = settings, pending
            if not self.load():
                self._pending = None

        self._banner_handler = load_anyway
        self.banner.show_message(too_big, "error", "Load anyway")

    def preflight(self, settings: LoadSettings, with_memory: bool = True) -> Preflight:
        """The one pre-load check (engine.planning.advice.preflight), in this thread: the files, llama.cpp's
        vocabulary rule and, with_memory, the memory plan against the free VRAM (or RAM) the Hardware page
        sees. The Lab's own loaded pair is freed before a load, so its memory counts as free."""
        report = self.hardware_report() if with_memory and self.hardware_report else None
        budget = Budget.from_report(report, **self.controller.fit_context()) if report is not None else None
        return preflight_load(settings, budget)

    @property
    def loaded_settings(self) -> LoadSettings | None:
        """The settings of the pair the Lab's engine loaded last: what its runs ran on."""
        return self.controller.load_settings

    def _ready_for(self, action: str) -> bool:
        """True when the pair in the controls is loaded; otherwise start loading it and remember the action."""
        try:
            settings = self.controls.load_settings()
        except SettingsError as exc:
            self.banner.show_message(str(exc), "warning")
            return False
        if self.controller.loaded_info is not None and self.controller.load_settings == settings:
            return True
        if self.controller.state not in (READY, ERROR):
            self.banner.show_message(f"the engine is {self.controller.state}; try again when it is ready", "warning")
            return False
        self._pending = action
        self.load()
        return False

    def _update_chat_hint(self) -> None:
        if self.session.chat_mode() == "auto" and not header_reads().warm(self.session.target()):
            return  # "auto" reads the target's header for its template: off the GUI thread, then again here
        self.controls.chat_hint.setText(self.session.chat_summary())

    def start(self) -> None:
        if self.mode not in ("idle",) or self._refused_while_busy():
            return
        try:
            self._prompts = self.session.collect_prompts()
            spec, sampling = self.controls.spec_settings(), self.controls.sampling_settings().validate()
            spec.validate(has_draft=bool(self.controls.draft.path()), unavailable=self.controls.unavailable_methods())
        except (SettingsError, ValueError) as exc:
            self.banner.show_message(str(exc), "warning")
            return
        if not self._ready_for("start"):
            return
        self.live = LiveSession(baseline_tps=self._current_baseline_tps(to_dict(sampling)))
        self.run_number += 1
        self.charts.clear()
        self.text.clear_text()
        self.summary.setText("")  # the last run's figures until this run's first text arrives would mislead
        self._update_why()
        self._generate("running", spec, sampling)
        self._say_baseline_dropped()

    def _generate(self, mode: str, spec: SpecSettings, sampling: SamplingSettings) -> None:
        """Start the loop of generations (a run or the baseline) over self._prompts with these settings."""
        self.banner.hide()
        self.mode = mode
        self.controls.set_running(True)
        self._sent_spec, self._sent_sampling = to_dict(spec), to_dict(sampling)
        self._prompt_index = 0
        self._next_generation()

    def _next_generation(self) -> None:
        if self._prompt_index:
            self.live._pending_text.append(("\n\n", False))  # one paragraph per generation
        prompt = self._prompts[self._prompt_index % len(self._prompts)]
        self._prompt_index += 1
        self.controller.generate(
            prompt,
            self.controls.max_tokens.value(),
            self._sent_spec,
            self._sent_sampling,
            baseline=self.mode == "baseline",
        )

    def stop(self) -> None:
        if self.quiet.cancel():  # a measurement waiting for the app's own work: not started at all
            self.banner.show_message("Not measured: stopped while it waited for the app's own work.", "info")
            return
        if self.mode in ("running", "baseline", "checking"):
            self._stopped_mode = self.mode
            self.mode = "stopping"
            self.controller.cancel()
        elif self.mode == "loading" and self.controller.state == LOADING:
            self._pending = None
            self.controller.cancel()  # llama.cpp stops reading at its next progress report
        elif self.mode == "loading":  # the pre-load check is under way: its answer will be dropped
            self._pending = None
            self.mode = "idle"
            self.controls.set_running(False)
            self.banner.show_message("Loading cancelled during the check before it; nothing was loaded.", "info")

    def baseline(self) -> None:
        if self.mode != "idle" or self._refused_while_busy():
            return
        try:
            # every prompt the run rotates through, each once: a prompt's length moves plain speed, and a baseline of
            # the first prompt alone divided a run over all of them
            self._prompts = self.session.collect_prompts()
        except (SettingsError, ValueError) as exc:
            self.banner.show_message(str(exc), "warning")
            return
        if not self._ready_for("baseline") or not self.quiet.ready("baseline", self.baseline):
            return
        self._baseline_tokens, self._baseline_started = 0, time.monotonic()
        self._baseline_parts = []
        self._generate("baseline", self.controls.spec_settings(), self.controls.sampling_settings())
        self.banner.show_message("Measuring the baseline (no speculation): starting; Esc stops it", "info")

    # -- knobs while running ----------------------------------------------
    def _knobs_moved(self) -> None:
        if self.mode == "running":
            self.knob_timer.start()  # restarts: sends once the knob rests

    def _send_knobs(self) -> None:
        if self.mode != "running":
            return
        try:
            spec = self.controls.spec_settings().validate(
                has_draft=bool(self.controls.draft.path()), unavailable=self.controls.unavailable_methods()
            )
            sampling = self.controls.sampling_settings().validate()
        except SettingsError as exc:
            self.banner.show_message(str(exc), "warning")
            return
        new_spec, new_sampling = to_dict(spec), to_dict(sampling)
        spec_changes = {k: v for k, v in new_spec.items() if self._sent_spec.get(k) != v}
        sampling_changes = {k: v for k, v in new_sampling.items() if self._sent_sampling.get(k) != v}
        if not spec_changes and not sampling_changes:
            return
        label = ", ".join(
            f"{_short(k)} {_fmt(self._sent_spec.get(k, self._sent_sampling.get(k)))}→{_fmt(v)}"
            for k, v in list(spec_changes.items()) + list(sampling_changes.items())
        )
        self._pending_labels.append(label)
        self._run_changes.append(label)
        self._sent_spec, self._sent_sampling = new_spec, new_sampling
        self.controller.update(spec=spec_changes, sampling=sampling_changes)

    # -- engine events ----------------------------------------------------
    def reload_after_hello(self) -> None:
        """Load the pair again when the next engine says hello (the Engine menu switched engines)."""
        self._pending = "reload"

    def _on_hello(self, ev: HelloEvent) -> None:
        names = [str(d.get("name", "")) for d in ev.get("devices", [])]
        gpus = [n for n in names if n and not n.upper().startswith("CPU")]
        self.controls.set_gpu_devices(gpus)
        # after a restart, bring back the pair that was loaded before the crash
        if isinstance(self._pending, tuple) and self._pending[0] == "reload":
            self._pending = self._pending[1]  # then do what the load was for
            self.load()
        elif self._pending == "reload":
            self._pending = None
            self.load()

    def _on_loaded(self, ev: LoadedEvent) -> None:
        self.controls.refresh_methods()  # the files may have changed on disk since the pair was chosen
        if self.mode == "loading":
            self.mode = "idle"
            self.controls.set_running(False)
        mem = sum(m["model_bytes"] + m["context_bytes"] + m["compute_bytes"] for m in ev.get("memory", []))
        # a llama-server build whose log does not give its buffer sizes reports none
        held = f"{mem / 2**20:.0f} MiB as llama.cpp reports it" if ev.get("memory") else "memory not reported"
        self.controls.badges.setText(
            f"loaded: n_ctx {ev.get('n_ctx')}, {held}, {'with' if ev.get('has_draft') else 'no'} draft model"
        )
        action, self._pending = self._pending, None
        if action == "start":
            self.start()
        elif action == "baseline":
            self.baseline()
        elif isinstance(action, tuple) and action[0] == "quick_check":
            self.quick_check(then_start=action[1])

    def _on_unloaded(self) -> None:
        self.controls.badges.setText(
            "not loaded: the pair was freed for the copy of a tune or a validation; Start or Load loads it again"
        )

    def _on_cycles(self, batch: list) -> None:
        if self.mode == "baseline":  # its progress, from the first token
            self._baseline_tokens += sum(int(ev.get("emitted", 0) or 0) for ev in batch if not ev.get("prompt"))
            n = len(self._prompts)
            total = self.controls.max_tokens.value() * n
            pace = pace_text(self._baseline_tokens, total, time.monotonic() - self._baseline_started)
            which = f"prompt {self._prompt_index} of {n}, " if n > 1 else ""
            self.banner.show_message(
                f"Measuring the baseline (no speculation): {which}{self._baseline_tokens} of {total} tokens, {pace}; "
                "Esc stops it",
                "info",
            )
            return
        if self.mode not in ("running", "stopping"):
            return
        for ev in batch:
            if ev.get("run") == self.controller.running_run:
                self.live.add_cycle(ev)
                self._dirty = True

    def _on_run_started(self, ev: StartedEvent) -> None:
        """Through llama-server a changed setting restarts the server at the next generation: marked there."""
        if ev.get("server_restarted") and self.mode == "running" and self._prompt_index > 1:
            label = from_dict(SpecSettings, ev.get("spec") or {}).label()
            self.live.mark(f"llama-server restarted: {label} ({ev.get('server_start_s', 0):.1f} s)")
            self._dirty = True

    def _on_settings_applied(self, ev: UpdatedEvent) -> None:
        label = self._pending_labels.pop(0) if self._pending_labels else "settings changed"
        from_cycle = ev["from_cycle"]
        if from_cycle is not None:
            self.live.mark(label, cycle=from_cycle)
            self._dirty = True

    # -- the quick check ----------------------------------------------------
    def quick_check(self, then_start: bool = False) -> None:
        """Measure which of a few settings pays on this machine (engine.measure.quick_check), set the knobs
        to the best, say what was measured, and (then_start) start the live run with it."""
        if self.mode != "idle" or self._refused_while_busy():
            return
        try:
            prompts = self.session.collect_prompts()
            sampling = to_dict(self.controls.sampling_settings().validate())
        except (SettingsError, ValueError) as exc:
            self.banner.show_message(str(exc), "warning")
            return
        if not self._ready_for("quick_check"):
            if self._pending == "quick_check":
                self._pending = ("quick_check", then_start)
            return
        if not self.quiet.ready("quick check", lambda: self.quick_check(then_start)):
            return
        from engine.measure.quick_check import QuickCheckRun

        self._check = QuickCheckRun.for_pair(
            self.controls.unavailable_methods(), prompts, sampling, self.controls.max_tokens.value(), then_start
        )
        self.mode = "checking"
        self.controls.set_running(True)
        self._next_check_run()

    def _next_check_run(self) -> None:
        from engine.measure.quick_check import BASELINE

        check = self._check
        assert check is not None
        spec, n = check.next_run[1], len(check.plan)
        self.banner.show_message(
            f"Checking which setting pays on this machine: run {len(check.done) + 1} of {n} "
            f"({'no speculation' if spec == BASELINE else spec.spec_type}); Esc stops it",
            "info",
        )
        self.controller.generate(
            check.prompt, check.max_tokens, to_dict(spec), check.sampling, baseline=spec == BASELINE
        )

    def _check_run_finished(self, ev: FinishedEvent) -> None:
        from engine.measure.quick_check import summary

        check = self._check
        assert check is not None
        if ev.get("event") != "done" or self.mode == "stopping":  # stopped (the last run may have ended first)
            self._check, self.mode = None, "idle"
            self.controls.set_running(False)
            self.banner.show_message("Quick check stopped; the knobs are as they were.", "info")
            return
        if check.record(float(ev.get("summary", {}).get("tokens_per_s") or 0.0)):
            self._next_check_run()
            return
        outcomes = check.outcomes()
        self._check, self.mode = None, "idle"
        self.controls.set_running(False)
        self.last_check = outcomes
        if outcomes:
            self.session.set_spec_settings(outcomes[0].spec)
        starts = bool(check.then_start and outcomes)
        # the engine's sentence says what was measured; the Lab says what happens next, and does it
        text = summary(outcomes) + (f" {_check_next_step(outcomes[0], starts)}" if outcomes else "")
        self.banner.show_message(text, "info")
        self.quickCheckDone.emit(outcomes)
        if starts:
            self.start()
            self.banner.show_message(text, "info")

    def _baseline_generation_ended(self, ev: FinishedEvent) -> None:
        """One prompt of the baseline ended: the next one starts, or the set's figure is kept; a stopped baseline
        keeps nothing, says so, and leaves no Lab run in the history."""
        summary = ev.get("summary", {})
        self._stopped_mode = ""
        tps, tokens = summary.get("tokens_per_s") or None, int(summary.get("tokens_generated", 0))
        done = ev.get("event") == "done" and self.mode == "baseline"
        if done and tps and tokens:
            self._baseline_parts.append((tokens, tokens / tps))
        if done and self._prompt_index < len(self._prompts):
            self._next_generation()  # the next prompt of the set
            return
        load = self.controller.load_settings
        if done and load is not None and self._baseline_parts:
            # the set's tokens over its time: every prompt weighs by the tokens it generated, as in the run
            tokens = sum(t for t, _ in self._baseline_parts)
            seconds = sum(sec for _, sec in self._baseline_parts)
            self.baseline_record = Baseline.measured(
                tokens / seconds, tokens, load, self._sent_sampling, prompts=len(self._baseline_parts)
            )
        self.live.baseline_tps = self._current_baseline_tps(self._sent_sampling)
        self.mode = "idle"
        self.controls.set_running(False)
        self._dirty = True
        self._update_summary()  # every figure against the baseline at once
        done = self.baseline_record is not None and self.live.baseline_tps is not None
        self.banner.show_message(
            f"baseline: {self.baseline_record.describe()} without speculation on the loaded models"
            if done and self.baseline_record is not None
            else "baseline stopped before its end: nothing kept",
            "info",
        )
        self.baselineEnded.emit(done)

    def _on_run_finished(self, ev: FinishedEvent) -> None:
        if self.mode == "checking" or (self.mode == "stopping" and self._check is not None):
            self._dirty = True
            self._check_run_finished(ev)
            return
        summary = ev.get("summary", {})
        self._dirty = self._bars_due = True  # the bars show the run's last cycles too
        if self.mode == "baseline" or (self.mode == "stopping" and self._stopped_mode == "baseline"):
            self._baseline_generation_ended(ev)  # a stopped baseline ends here too
            return
        self.last_summary = summary
        # what the history stores: the setting in force when the generation ended, in SpecTune's terms whatever
        # the engine (issue 51: a run moved from K 2 to 6, then to ngram-mod, was stored as its start), and the
        # changes made during it
        changes, self._run_changes = self._run_changes, []
        self.runFinished.emit(
            {
                **ev,
                "spec": dict(self._sent_spec),
                "sampling": dict(self._sent_sampling),
                "settings_changed": changes,
                "lab_run": self.run_number,
            }
        )
        if self.mode == "running" and ev.get("event") == "done":
            self._next_generation()
            return
        self.mode = "idle"
        self.controls.set_running(False)

    def _on_failed(self, ev: ErrorEvent) -> None:
        self.last_error = ev
        if ev.get("kind") == "busy":
            return
        if ev.get("kind") == "cancelled" and self.mode == "loading":
            self.mode = "idle"
            self.controls.set_running(False)
            self.controls.badges.setText("not loaded: loading was cancelled")
            self.banner.show_message(
                "Loading cancelled; no model is loaded. Load or Start loads the pair again.", "info"
            )
            return
        self.banner.show_message(f"{ev.get('message')} ({ev.get('kind')})", "error")
        if self.mode in ("loading", "stopping", "baseline", "checking") or (
            self.mode == "running" and self.controller.state == ERROR
        ):
            self._pending = None
            self._check = None
            self.mode = "idle"
            self.controls.set_running(False)

    def _on_state(self, state: str, message: str) -> None:
        if (
            state == CRASHED
            and self.mode == "loading"
            and "SIGILL" in (message or "")
            and self.controls.repack.isChecked()
        ):
            # a CPU that reports AMX the system will not run: load again without repacking, once, and say so where
            # the setting is (issue 51: it was unticked without a word that stayed)
            self.controls.repack.setChecked(False)
            self.controls.repack.setText(
                "repack weights for this CPU (AMX / AVX-512): off, loading died of an illegal instruction (SIGILL) "
                "while repacking"
            )
            self.mode = "idle"
            self._pending = ("reload", self._pending)
            self.banner.show_message(
                "Loading stopped with an illegal instruction while llama.cpp repacked the "
                "weights for this CPU; loading again with repacking off.",
                "warning",
            )
            self.controller.restart()
            return
        if state == CRASHED:
            had_pair = self.controller.load_settings is not None
            self.mode = "idle"
            self.controls.set_running(False)
            self._pending = "reload" if had_pair else None
            self._banner_handler = self.controller.restart
            self.banner.show_message(
                "The engine process stopped: " + (message or "no message") + "\nYour settings and the charts are kept.",
                "error",
                "Restart engine",
            )
        elif state == ERROR and self.mode == "loading":
            self.mode = "idle"
            self.controls.set_running(False)

    def _banner_action(self) -> None:
        handler, self._banner_handler = self._banner_handler, None
        self.banner.hide()
        (handler or self.controller.restart)()

    # -- painting ---------------------------------------------------------
    def _repaint(self) -> None:
        if self._dirty and self.charts.refresh(self.live.snapshot(), bars=self._bars_due):
            self._dirty = self._bars_due = False

    def _pair_changed(self) -> None:
        """Another target or draft: the last pair's figures (stats, charts, a refusal about it) describe nothing on
        screen any more. A run under way keeps its own until it stops."""
        if self.mode != "idle":
            return
        self.live = LiveSession()
        self.charts.clear()
        self.last_summary = None
        self.summary.setText("")
        self._update_why()
        if self.banner.isVisible() and self.banner.level in ("error", "warning"):
            self.banner.hide()

    def _current_baseline_tps(self, sampling: dict) -> float | None:
        """The kept baseline's tokens/s while it measured the pair and settings loaded now, else None (and the
        record is dropped: another pair, a changed setting, a file replaced on disk)."""
        b = self.baseline_record
        if b is None:
            return None
        if not b.matches(self.controller.load_settings, sampling):
            self.baseline_record = None
            self._baseline_note = (
                f"The baseline ({b.describe()}) measured another pair or other settings: measure again (Ctrl+B)"
            )
            return None
        return b.tokens_per_s

    def _say_baseline_dropped(self) -> None:
        if self._baseline_note:
            self.banner.show_message(self._baseline_note, "info")
            self._baseline_note = ""

    def _baseline_text(self) -> str:
        """The stats line's part about the baseline: which one, and the speedup against it where the run's own
        accepted length allows it (engine.measure.baseline.plausible_speedup)."""
        s = self.live
        if self.mode == "running" and s.baseline_tps is not None:
            s.baseline_tps = self._current_baseline_tps(self._sent_sampling)  # a sampling knob moved mid-run
            self._say_baseline_dropped()
        b = self.baseline_record
        if not s.baseline_tps or b is None or not s.tokens_per_s:
            return ""
        speedup = s.tokens_per_s / s.baseline_tps
        if s.steps and not plausible_speedup(speedup, s.stats.mean_accepted_length):
            return (
                f", baseline {b.describe()} {error_text('out of date: measure again (Ctrl+B)')} "
                f"(x{speedup:.2f} is more than {s.stats.mean_accepted_length:.2f} tokens a step allow)"
            )
        of = f" of {b.prompts} prompts" if b.prompts > 1 else ""  # the run rotates through them too
        return f", baseline {b.tokens_per_s:.1f} ({b.measured_at}, {b.tokens} tokens{of}), speedup {speedup:.2f}x"

    def _update_summary(self) -> None:
        s = self.live
        base = self._baseline_text()
        rate, length = s.stats.acceptance_rate, s.stats.mean_accepted_length
        self.summary.setText(
            f"<b>{s.tokens_per_s:.1f}</b> tokens/s{base} &nbsp; acceptance <b>{rate:.3f}</b> "
            f"({s.accepted}/{s.drafted}) &nbsp; mean accepted length {length:.2f} &nbsp; "
            f"{s.tokens} tokens, {s.steps} steps"
        )
        self._update_why()

    def _update_why(self) -> None:
        s = self.live
        implausible = bool(s.baseline_tps and s.tokens_per_s and s.steps) and not plausible_speedup(
            s.tokens_per_s / (s.baseline_tps or 1.0), s.stats.mean_accepted_length
        )
        if implausible:
            self.why.setText(
                "<small>The baseline does not describe this run (the speedup exceeds what its accepted tokens "
                "allow): measure it again (Ctrl+B) and SpecTune explains here why speculation pays.</small>"
            )
            return
        if not s.baseline_tps:
            self.why.setText(
                "<small>Measure the baseline (Ctrl+B) and SpecTune explains here why speculation pays on this "
                "machine, or why not.</small>"
            )
            return
        method = str(self._sent_spec.get("spec_type") or "draft-simple")
        why = explain(s.snapshot(), s.current.tokens_per_s if s.current.steps else None, method=method)
        if why is None:
            self.why.setText("")
            return
        since = f" (since {s.current_since})" if s.current_since else ""
        head = (ok_text if why.pays else error_text)(f"Why{since}:")
        self.why.setText(f"{head} {why.sentence()}")

    def _flush_text(self) -> None:
        pieces = self.live.take_text()
        if pieces:
            self.text.append_pieces(pieces)
            self._update_summary()

    def shutdown(self) -> None:
        """The window is closing: no timer fires into a page being deleted."""
        self.chart_timer.stop()
        self.text_timer.stop()
        self.knob_timer.stop()

    def save_charts(self, path: str) -> None:
        """File > Save charts on this page (MainWindow.save_charts), the bars brought up to date first."""
        self.charts.refresh(self.live.snapshot(), bars=True)  # the bars may be a few frames behind
        self.charts.save_png(path)


def _short(key: str) -> str:
    return {
        "draft_n_max": "K",
        "draft_n_min": "n-min",
        "draft_p_min": "p-min",
        "spec_type": "method",
        "ngram_size_n": "n",
        "ngram_size_m": "m",
        "ngram_min_hits": "hits",
        "temp": "temp",
    }.get(key, key)


def _fmt(v) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


def _check_next_step(best, starts: bool) -> str:
    """What follows a quick check whose best setting (an engine.measure.quick_check.Outcome) the knobs now
    hold: the live run starting with it, or how to start one."""
    if starts:
        return f"The live run starts with {best.label()} so you can watch why, against the baseline."
    return f"The knobs are set to {best.label()}; Start (Ctrl+Return) runs it live against the baseline."


def _check_pair(settings: LoadSettings, budget: Budget | None):
    """The pre-load check and, for a pair that does not fit, a placement that does (engine.planning.advice.placement;
    None: no GPU, a file that cannot be read, or no arrangement fits). Runs in a background thread: pure
    engine work, no widget touched."""
    check, placed = preflight_and_place(settings, budget)
    return check, None if placed is None or placed[0].is_default else placed[0]
