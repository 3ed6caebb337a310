"""The Tune page: find the fastest speculation setting for the Lab's pair.

The auto-tuner (engine.measure.tuner: a cost model from measured verify times proposes,
successive halving over real runs decides) runs on a TuneRunner thread against
an engine worker of its own, so the GUI never waits and a crash of that worker
costs the tune, not the window. The pair, context, threads and sampling come
from the session the pages share (app.session), set on the Lab page; the prompts
from a workload set, the Lab's prompt or a file.

While a tune runs the Lab's own runs are stopped (app.jobs): two engines sharing
the CPU (or GPU) would each measure the other's load, and the tuner's numbers
would be wrong. The result is a ranked table, a chart of predicted against measured
tokens/s by K, and two ways out: Apply to Lab, and Export (the Lab's knobs set
to the best setting, then the Export page). Every finished tune goes to the
history as kind "tune", as ``spectune tune`` does.

Keys (while the page is in view): Ctrl+Return start, Esc cancel.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QFontDatabase
from PySide6.QtWidgets import (
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QProgressBar,
    QSplitter,
    QVBoxLayout,
    QWidget,
)

from app.jobs import MeasuringJobs
from app.pages.tune.concurrent_runner import ConcurrentTuneRunner
from app.pages.tune.runner import TuneRunner, TuneThread
from app.quiet_wait import QuietWait
from app.session import PICK_FILE, LabSession, shipped_workloads
from app.widgets.banner import Banner
from app.widgets.forms import push_button, spin_box
from app.widgets.needs_pair import NeedsPairBar
from app.widgets.page_shortcuts import add_page_shortcuts
from app.widgets.style import error_text, ok_text
from app.widgets.timers import make_timer
from app.widgets.tune_charts import TuneCharts
from app.widgets.tune_table import TuneTable
from app.widgets.workload_box import WorkloadBox
from engine.core.chat import Prompt
from engine.core.settings import LoadSettings, SamplingSettings, SettingsError, SpecSettings
from engine.measure.concurrent_tune import ConcurrentTuneResult
from engine.measure.tuner import TuneResult

JOB = "tune"  # the name this page asks app.jobs with
LAB_PROMPT = "the Lab's prompt"
KILL_AFTER_MS = 3000  # a cancel not honoured by then (loading, measuring) ends the tune's worker
PROGRESS_INTERVAL_MS = 500  # the progress line's refresh (elapsed time, runs)
LOG_LINES = 5000
_STRAY_RUNNERS: list[TuneThread] = []  # runners that outlived a shutdown; kept so Qt never deletes them running


class TunePage(QWidget):
    tuneRecorded = Signal(int)  # history entry id of a finished tune
    exportRequested = Signal()  # the best setting is in the session; show the Export page
    clientsTuned = Signal(int)  # a concurrency tune's pick was applied: the server slots it was measured at

    def __init__(self, session: LabSession, jobs: MeasuringJobs, parent: QWidget | None = None):
        super().__init__(parent)
        self.session = session
        self.jobs = jobs
        self.mode = "idle"  # idle | running | stopping
        self.runner: TuneRunner | ConcurrentTuneRunner | None = None
        self.result: TuneResult | ConcurrentTuneResult | None = None
        self.last_error: tuple[str, str] | None = None
        self._started_at = 0.0
        self._run_load: LoadSettings | None = None
        self._run_sampling: SamplingSettings | None = None
        self._last_message = "starting"
        # the engine a one-client tune measures with: (auto | native | llama-server, server binary or None), set
        # by the main window's Engine menu
        self.engine: tuple[str, str | None] = ("auto", None)

        self._build_layout()
        self._build_timers()
        self._connect()
        self.set_workloads(shipped_workloads())
        self._set_running(False)
        self.refresh_lab_summary()

    # -- building ----------------------------------------------------------------------------------
    def _build_layout(self) -> None:
        """Top to bottom: what is tuned, the inputs, the actions and what they said, the results."""
        lab_summary = self._build_lab_summary()
        inputs = self._build_inputs()
        actions = self._build_actions()
        results = self._build_results()
        col = QVBoxLayout(self)
        col.addWidget(QLabel("<h3>Auto-tune</h3>"))
        self.needs_pair = NeedsPairBar(self.session, "tunes")
        col.addWidget(self.needs_pair)
        col.addWidget(lab_summary)
        col.addLayout(inputs)
        col.addLayout(actions)
        col.addWidget(self.status)
        col.addWidget(self.banner)
        col.addWidget(self.summary)
        col.addWidget(results, 1)

    def _build_lab_summary(self) -> QLabel:
        """What is tuned: the session's pair and settings, changed on the Lab page."""
        self.lab_summary = QLabel()
        self.lab_summary.setWordWrap(True)
        self.lab_summary.setTextFormat(Qt.TextFormat.RichText)
        return self.lab_summary

    def _build_inputs(self) -> QHBoxLayout:
        """One row of inputs: the page's height belongs to the table and the charts."""
        self.workload = WorkloadBox(files_before=PICK_FILE, title="Choose a workload file")
        self.workload.setToolTip("the prompts the candidates are measured on")
        self.workload.setMinimumWidth(180)
        self.max_prompts = spin_box(
            0,
            1000,
            0,
            "use at most this many of the set's prompts (0: all); fewer prompts tune faster but trust one prompt more",
        )
        self.max_prompts.setSpecialValueText("all")
        self.budget = spin_box(
            5,
            24 * 3600,
            120,
            "stop confirming candidates after the round that passes this time (measuring the pair comes first)",
            suffix=" s",
        )
        self.max_tokens = spin_box(4, 4096, 128, "tokens generated per prompt and candidate")
        self.k_max = spin_box(1, 32, 12, "the largest K the cost model considers for draft-simple")
        self.seed = spin_box(0, 2**31 - 1, 0, "prompt order and tie-breaks (the same seed replays the same plan)")
        self.clients = spin_box(
            1,
            16,  # the Serve page's most slots
            1,
            "how many requests your tools send at once. 1: the search in SpecTune's engine. Above 1: each of a "
            "few settings served by llama-server at -np N with N requests at once, against no speculation at "
            "the same N (speculation that pays for one client can cost for four)",
        )
        # the spin boxes by the key each is saved under (save_state, restore_state); all but clients (beside
        # Start, below) stand in this row, labelled by their key unless named here
        self._spins = {
            "max_prompts": self.max_prompts,
            "budget": self.budget,
            "max_tokens": self.max_tokens,
            "k_max": self.k_max,
            "seed": self.seed,
            "clients": self.clients,
        }
        labels = {"max_prompts": "prompts", "max_tokens": "max tokens", "k_max": "K max"}
        row = [(labels.get(key, key), spin) for key, spin in self._spins.items() if key != "clients"]
        inputs = QHBoxLayout()
        for label, widget in [("workload", self.workload), *row]:
            inputs.addWidget(QLabel(label))
            inputs.addWidget(widget)
            inputs.addSpacing(8)
        inputs.addStretch(1)
        return inputs

    def _build_actions(self) -> QHBoxLayout:
        """The buttons and the progress line; the status line and the banner (placed by the caller)."""
        self.start_button = push_button(
            "Start tune", tip="measure the pair, predict, confirm with real runs (Ctrl+Return)"
        )
        self.cancel_button = push_button("Cancel", tip="stop the tune (Esc)")
        self.apply_button = push_button("Apply to Lab", tip="set the Lab's method and knobs to the best setting")
        self.export_button = push_button("Export…", tip="apply the best setting to the Lab and open the Export page")
        self.progress_bar = QProgressBar()
        self.progress_bar.setMaximumWidth(160)
        self.progress_bar.setTextVisible(False)
        self.progress_line = QLabel("no tune yet")
        # the tuner's messages are long; wrapped, they never widen the window past a scaled laptop screen
        self.progress_line.setWordWrap(True)
        self.status = QLabel("")
        self.status.setWordWrap(True)
        self.banner = Banner()
        self.quiet = QuietWait(self, self.banner.show_message)  # a tune waits for the app's own computing work
        buttons = QHBoxLayout()
        buttons.addWidget(QLabel("clients"))  # beside Start: it decides which tune Start runs
        buttons.addWidget(self.clients)
        for b in (self.start_button, self.cancel_button, self.apply_button, self.export_button):
            buttons.addWidget(b)
        buttons.addWidget(self.progress_bar)
        buttons.addWidget(self.progress_line, 1)
        return buttons

    def _build_results(self) -> QSplitter:
        """The ranked table and the tuner's log side by side (the table's seven columns need about 700 px),
        the charts under them at full width, where a K axis of up to 32 points stays readable; the summary
        line above them is placed by the caller."""
        self.summary = QLabel("")
        self.summary.setTextFormat(Qt.TextFormat.RichText)
        self.summary.setWordWrap(True)
        self.table = TuneTable()
        self.charts = TuneCharts()
        self.log = QPlainTextEdit()
        self.log.setReadOnly(True)
        self.log.setMaximumBlockCount(LOG_LINES)
        self.log.setPlaceholderText("the tuner's progress appears here")
        self.log.setLineWrapMode(QPlainTextEdit.LineWrapMode.NoWrap)  # the tuner aligns its columns
        self.log.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        top = QSplitter(Qt.Orientation.Horizontal)
        top.addWidget(self.table)
        top.addWidget(self.log)
        top.setStretchFactor(0, 3)
        top.setStretchFactor(1, 2)
        top.setSizes([720, 480])
        body = QSplitter(Qt.Orientation.Vertical)
        body.addWidget(top)
        body.addWidget(self.charts)
        body.setStretchFactor(0, 1)
        body.setStretchFactor(1, 1)
        body.setSizes([330, 300])
        return body

    def _build_timers(self) -> None:
        self.progress_timer = make_timer(self, PROGRESS_INTERVAL_MS, self._show_progress)
        self.kill_timer = make_timer(self, KILL_AFTER_MS, self._kill_if_still_running, single_shot=True)

    def _connect(self) -> None:
        self.start_button.clicked.connect(self.start)
        self.cancel_button.clicked.connect(self.cancel)
        self.apply_button.clicked.connect(self.apply_to_lab)
        self.export_button.clicked.connect(self.export_best)
        for changed in (self.session.pairChanged, self.session.loadChanged, self.session.knobsChanged):
            changed.connect(self.refresh_lab_summary)
        add_page_shortcuts(self, (("Ctrl+Return", self.start), ("Ctrl+Enter", self.start), ("Esc", self.cancel)))
        self.clients.valueChanged.connect(self._clients_changed)
        # a tune measures with an engine of its own: nothing else measures beside it
        self.jobs.register(JOB, lambda: self.mode != "idle", "a tune is running on the Tune page", "the tune's")

    # -- inputs -------------------------------------------------------------------------------------
    def set_workloads(self, names: list[str]) -> None:
        self.workload.set_sets(names, [LAB_PROMPT])

    def set_workload_file(self, path: str | Path) -> None:
        """Use a workload file (a set's JSON, or chat requests as JSONL); it joins the list before 'a file…'.
        A recording from the Serve page that saw several requests at once sets the clients to that many."""
        from engine.serve.record import recorded_concurrency

        self.workload.add_file(path)
        seen = recorded_concurrency(path) if str(path).endswith(".jsonl") else None
        if seen is not None and seen > 1:
            self.clients.setValue(seen)
            self._log(f"{Path(path).name}: the recording saw {seen} requests at once; the tune runs {seen} clients")

    def collect_prompts(self) -> list[Prompt]:
        """The chosen set's prompts, as the Lab runs them (raw text, or conversations in chat mode)."""
        name = self.workload.currentText()
        if name == LAB_PROMPT:
            if not self.session.custom_prompt().strip():
                raise SettingsError("the Lab's prompt is empty: write one on the Lab page, or choose a workload set")
            prompts = self.session.custom_prompts()
        elif name == PICK_FILE:
            raise SettingsError("choose a workload file first")
        else:
            prompts = self.session.prompts_of(name)
        limit = self.max_prompts.value()
        return prompts[:limit] if limit else prompts

    def refresh_lab_summary(self) -> None:
        self.lab_summary.setText(self.session.summary_html())

    # -- actions ------------------------------------------------------------------------------------
    def start(self) -> None:
        if self.mode != "idle":
            return
        if self.jobs.refuse(JOB, lambda why: self.banner.show_message(why, "warning")):
            return
        try:
            load = self.session.load_settings()
            sampling = self.session.sampling_settings().validate()
            prompts = self.collect_prompts()
        except (SettingsError, ValueError, OSError) as exc:  # WorkloadError is a ValueError
            self.banner.show_message(str(exc), "warning")
            return
        problem = self.session.load_refusal(load)
        if problem:
            self.banner.show_message(problem, "error")
            return
        self.banner.hide()
        if not self.quiet.ready("tune", self.start):  # its first measurements would read the app's own work
            return

        self.result = None
        self.table.clear_rows()
        self.charts.clear()
        self.summary.setText("")
        self.log.clear()
        self.last_error = None
        self._run_load, self._run_sampling = load, sampling
        clients = self.clients.value()
        self.runner = (
            TuneRunner(
                load,
                prompts,
                self.max_tokens.value(),
                sampling,
                float(self.budget.value()),
                self.seed.value(),
                self.k_max.value(),
                parent=self,
                engine=self.engine,
            )
            if clients == 1
            else ConcurrentTuneRunner(
                load, prompts, clients, self.max_tokens.value(), sampling, self.session.spec_settings(), parent=self
            )
        )
        notes = self.jobs.make_room(JOB, self.runner.lab_freed)  # the Lab's run stopped, its GPU copy freed
        self.runner.progress.connect(self._on_progress)
        self.runner.succeeded.connect(self._on_succeeded)
        self.runner.failed.connect(self._on_failed)
        self.runner.cancelled.connect(self._on_cancelled)
        self.runner.finished.connect(self._on_thread_finished)
        self.mode = "running"
        self._started_at = time.monotonic()
        self._set_running(True)
        self.status.setText("Tuning " + load.target.name + (f"; {notes[0]}." if notes else "."))
        self._log(
            f"tune of {load.target.name}"
            + (f" with {load.draft.name}" if load.draft else "")
            + f" on {len(prompts)} prompt(s) of {self.workload.currentText()}"
            + (f", {clients} clients at once through llama-server -np {clients}" if clients > 1 else "")
        )
        for note in notes:
            self._log(note)
        self.runner.start()
        self.progress_timer.start()
        self._show_progress()

    def cancel(self) -> None:
        if self.quiet.cancel():
            self.banner.show_message("Not tuned: cancelled while it waited for the app's own work.", "info")
            return
        if self.mode != "running" or self.runner is None:
            return
        self.mode = "stopping"
        self.cancel_button.setEnabled(False)
        self.status.setText("Cancelling the tune ...")
        self._log("cancel requested")
        self.runner.request_stop()
        self.kill_timer.start()

    def _kill_if_still_running(self) -> None:
        if self.runner is not None and self.runner.isRunning():
            self._log("the engine did not stop by itself (loading or measuring); ending its process")
            self.runner.kill_worker()

    def apply_to_lab(self) -> bool:
        if self.result is None:
            return False
        self.session.set_spec_settings(self.picked_spec())
        try:
            same_pair = self.session.load_settings() == self._run_load
        except SettingsError:
            same_pair = False
        if isinstance(self.result, ConcurrentTuneResult):
            self.clientsTuned.emit(self.result.clients)  # the Serve page's slots
        self.status.setText(
            f"The Lab now uses {self.picked_label()}."
            + (
                ""
                if same_pair
                else " Note: the Lab's models or their settings changed since this tune, so it may "
                "not be the best there."
            )
        )
        return True

    def picked_spec(self) -> SpecSettings:
        """What the last tune says to run: its best; after a concurrency tune whose best does not beat no
        speculation, no speculation."""
        assert self.result is not None
        if isinstance(self.result, ConcurrentTuneResult) and not self.result.beats_baseline:
            return SpecSettings("none")
        return self.result.best.spec

    def picked_label(self) -> str:
        assert self.result is not None
        return "no speculation" if self.picked_spec().spec_type == "none" else self.result.best.label

    def save_charts(self, path: str) -> None:
        """File > Save charts on this page (MainWindow.save_charts)."""
        self.charts.save_png(path)

    def export_best(self) -> None:
        if self.apply_to_lab():
            self.exportRequested.emit()

    def shutdown(self, timeout_ms: int = 15000) -> None:
        """Stop a running tune and its worker now (the window is closing); returns when the thread has ended."""
        self.progress_timer.stop()
        self.kill_timer.stop()
        runner = self.runner
        if runner is None:
            return
        for _ in range(2):  # a second kill covers a worker that was spawned just after the first
            if not runner.isRunning():
                break
            runner.request_stop()
            runner.kill_worker()
            runner.wait(timeout_ms // 2)
        if runner.isRunning():
            # never destroy a running QThread (Qt aborts the process): let it go without a parent
            runner.setParent(None)
            _STRAY_RUNNERS.append(runner)
            self.runner = None
        self._on_thread_finished()

    # -- runner events ------------------------------------------------------------------------------
    def _on_progress(self, message: str) -> None:
        self._log(message)
        self._show_progress(message.strip())

    def _on_succeeded(self, result: TuneResult | ConcurrentTuneResult) -> None:
        if isinstance(result, ConcurrentTuneResult):
            self._on_concurrent_result(result)
            return
        self.result = result
        self.table.show_result(result)
        self.charts.show_result(result)
        best = result.best
        # one figure for one result: the verdict's ratio, paired prompt by prompt; the search's own tokens/s
        # ratio read high (the best was picked for being high) and sat beside a verdict of x1.00 (issue 30 #9)
        self.summary.setText(
            f"The search picked <b>{best.label}</b> ({best.measured_tps:.1f} tokens/s there; baseline "
            f"{result.baseline_tps:.1f} tokens/s without speculation, same prompts) in {result.elapsed_s:.0f} s "
            f"with {result.runs} runs.<br>"
            + (ok_text if result.beats_baseline else error_text)("Verdict:")
            + f" {result.verdict_text()}"
            + "".join(f"<br><small>{t}.</small>" for t in (result.search_vs_verdict(), result.raise_k_hint()) if t)
        )
        self._log(f"picked: {best.label} at {best.measured_tps:.1f} tokens/s; {result.verdict_text()}")
        saved = self._record(result)
        self.status.setText(
            f"Tune finished in {result.elapsed_s:.0f} s" + (", saved to the history." if saved else ".")
        )

    def _on_concurrent_result(self, result: ConcurrentTuneResult) -> None:
        """The table and the charts are the search's; a concurrency tune's few settings go in the summary."""
        self.result = result
        rows = []
        for c in result.candidates:
            acc = f", acceptance {c.acceptance:.0%}" if c.acceptance is not None else ""
            verdict = c.ratio.describe() if c.ratio is not None else "not measured"
            rows.append(
                f"{c.label}: {c.aggregate_tps:.1f} tokens/s in aggregate against {c.baseline_tps:.1f}; "
                f"per client {c.per_client_tps:.1f} against {c.baseline_per_client_tps:.1f}{acc}; {verdict}"
            )
            self._log(rows[-1])
        self.summary.setText(
            f"{result.clients} clients at once, each setting against no speculation at -np {result.clients}, "
            f"in {result.elapsed_s:.0f} s:<br>"
            + "<br>".join(f"• {r}" for r in rows)
            + "<br>"
            + (ok_text if result.beats_baseline else error_text)("Verdict:")
            + f" {result.verdict_text()}. Apply sets the Lab to "
            + f"{self.picked_label()} and the Serve page's slots to {result.clients}."
        )
        self._log(result.verdict_text())
        saved = self._record(result)
        self.status.setText(
            f"Tune finished in {result.elapsed_s:.0f} s" + (", saved to the history." if saved else ".")
        )

    def _record(self, result: TuneResult | ConcurrentTuneResult) -> bool:
        """As ``spectune tune`` does; the best's tokens/s as tokens_per_s so the History page shows it."""
        from engine.measure.history import HistoryError, record_summary

        out: dict[str, Any] = dict(result.to_dict())
        if isinstance(result, ConcurrentTuneResult):
            out["tokens_per_s"] = result.best.aggregate_tps
            hello = None  # measured through llama-server: no engine worker to name the build
        else:
            out["tokens_per_s"] = out["best"]["measured_tps"]
            hello = self.runner.client.hello if isinstance(self.runner, TuneRunner) else None
        try:
            entry = record_summary(
                "tune",
                self._run_load,
                result.best.spec,
                self._run_sampling,
                out,
                llama_build=hello.get("llama") if hello else None,
            )
        except (HistoryError, OSError, ValueError) as exc:
            self._log(f"not saved to the history: {exc}")
            self.banner.show_message(f"The tune was not saved to the history: {exc}", "warning")
            return False
        self.tuneRecorded.emit(entry)
        return True

    def _on_failed(self, kind: str, message: str) -> None:
        self.last_error = (kind, message)
        self._log(f"failed ({kind}): {message}")
        if kind == "crashed":
            text = (
                "The tune's engine process stopped, so the tune ended without a result: "
                + message
                + "\nThe Lab's engine is not affected; start the tune again when ready."
            )
        else:
            text = f"The tune failed: {message} ({kind})"
        self.banner.show_message(text, "error")
        self.status.setText("Tune failed.")

    def _on_cancelled(self) -> None:
        runs = self.runner.runs if self.runner is not None else 0
        self._log(f"cancelled after {runs} run(s)")
        self.status.setText(
            f"Tune cancelled after {time.monotonic() - self._started_at:.1f} s and {runs} run(s); "
            "no setting was chosen."
        )

    def _on_thread_finished(self) -> None:
        runner, self.runner = self.runner, None
        self.progress_timer.stop()
        self.kill_timer.stop()
        # finished() comes from the thread just before it ends: wait for the end before deleting it
        if runner is not None and runner.wait(5000):
            runner.deleteLater()
        self.mode = "idle"
        self._set_running(False)
        self._show_progress()

    # -- display ------------------------------------------------------------------------------------
    def _clients_changed(self, _clients: int) -> None:
        self._set_running(self.mode != "idle")

    def _set_running(self, running: bool) -> None:
        self.start_button.setEnabled(not running)
        self.cancel_button.setEnabled(running)
        has_result = self.result is not None and not running
        self.apply_button.setEnabled(has_result)
        self.export_button.setEnabled(has_result)
        for w in (self.workload, self.max_prompts, self.max_tokens, self.clients):
            w.setEnabled(not running)
        # the search's own inputs: a tune of several clients measures a few settings fully, in a fixed order
        single = self.clients.value() == 1
        for w in (self.budget, self.k_max, self.seed):
            w.setEnabled(not running and single)
            w.setStatusTip("" if single else "used by the one-client search only")
        # a busy indicator while running (the tuner cannot say how many runs are left); full when done; not
        # shown before the first tune, where it was an empty box beside "no tune yet"
        self.progress_bar.setRange(0, 0 if running else 1)
        self.progress_bar.setValue(1 if has_result else 0)
        self.progress_bar.setVisible(running or has_result)

    def _show_progress(self, message: str | None = None) -> None:
        if message:
            self._last_message = message
        if self.mode == "idle" or self.runner is None:
            if isinstance(self.result, ConcurrentTuneResult):
                self.progress_line.setText(f"done: {self.result.clients} clients in {self.result.elapsed_s:.0f} s")
            elif self.result is not None:
                self.progress_line.setText(f"done: {self.result.runs} runs in {self.result.elapsed_s:.0f} s")
            else:
                self.progress_line.setText("idle")
            return
        elapsed = time.monotonic() - self._started_at
        if isinstance(self.runner, ConcurrentTuneRunner):  # no budget: every setting is measured fully
            self.progress_line.setText(f"{elapsed:.0f} s · {self.runner.runs} batches · {self._last_message}")
            return
        over = elapsed > self.budget.value()
        # past the budget the tune finishes the least it must run (the log says why and for how long)
        budget = f"past the {self.budget.value()} s budget, finishing" if over else f"of {self.budget.value()} s budget"
        self.progress_line.setText(f"{elapsed:.0f} s {budget} · {self.runner.runs} runs · {self._last_message}")

    def _log(self, line: str) -> None:
        self.log.appendPlainText(f"[{time.strftime('%H:%M:%S')}] {line}")

    # -- persistence ----------------------------------------------------------------------------------
    def save_state(self) -> dict:
        return {"workload": self.workload.currentText(), **{key: spin.value() for key, spin in self._spins.items()}}

    def restore_state(self, state: dict) -> None:
        def get(key, default):
            try:
                return int(state.get(key, default))
            except (TypeError, ValueError):
                return default

        workload = str(state.get("workload", ""))
        if workload and workload not in (PICK_FILE,):
            if not self.workload.choose(workload) and Path(workload).is_file():
                self.set_workload_file(workload)
        for key, spin in self._spins.items():
            spin.setValue(get(key, spin.value()))
