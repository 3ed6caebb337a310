"""The Export page: the llama-server command for the Lab's current settings in
the dialect of the chosen llama-server binary (default: the bundled one),
quoted for bash, PowerShell or cmd, with the pitfalls spelled out; it follows
the knobs as they move. vLLM / SGLang commands are on the CLI (spectune export
--format vllm|sglang), since they need Hugging Face repositories, not GGUF files.

**Validate** checks the command against a real server, as ``spectune validate``
does: the bundled llama-server runs the exported argv on the Lab's prompts, the
lab runs them too, and the two are shown side by side (drafted and accepted
counts must agree at temperature 0 or with a fixed seed; speeds within about 10 %). It runs on a
QThread (app.pages.export.runner) with progress and Cancel (Esc), and the
result goes to the history as kind "validate". Like a tune it measures with an
engine of its own, so it asks the coordinator of measuring jobs (app.jobs)
first, which stops the Lab's run and frees its GPU copy of the pair.

The settings come from the session the pages share (app.session).
"""

from __future__ import annotations

import time

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QFontDatabase, QGuiApplication
from PySide6.QtWidgets import (
    QComboBox,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QProgressBar,
    QVBoxLayout,
    QWidget,
)

from app.header_reads import header_reads
from app.jobs import MeasuringJobs
from app.pages.export.runner import ValidateRunner
from app.quiet_wait import QuietWait
from app.session import LabSession
from app.widgets.forms import PathPicker, push_button, spin_box
from app.widgets.needs_pair import NeedsPairBar
from app.widgets.pace import pace_text
from app.widgets.page_shortcuts import add_page_shortcuts
from app.widgets.style import error_text
from engine.core.settings import SettingsError

JOB = "validation"  # the name this page asks app.jobs with
# what the chosen llama-server's flag dialect means for the command (engine.llama.dialect)
DIALECT_TEXT = {
    "current": "flags as llama-server spells them since build b9131 (this one's --help lists them)",
    "renamed": "flags as llama-server spelled them from b8955 to b9131 (the old type names draft, eagle3)",
    "pre-rename": "flags as llama-server spelled them before b8955 (--draft-max, --draft-min; -md turns drafting on)",
}


def ratio_text(ratio: float | None) -> str:
    """A validation's speed ratio, said with what it means."""
    if not ratio:
        return ""
    if ratio >= 0.95:
        return f", llama-server at {ratio:.2f}x the Lab's speed: the export runs as fast as the tuning measured"
    return (
        f", llama-server at {ratio:.2f}x the Lab's speed: the same steps ran slower through the server (its HTTP "
        "and per-request work; on a small CPU the two also shared the cores), so expect the server's figure"
    )


SHELLS = ("bash", "pwsh", "cmd")
_STRAY_RUNNERS: list[ValidateRunner] = []  # threads still ending when their page went away


class ExportPage(QWidget):
    validationRecorded = Signal(int)  # history entry id of a finished validation

    def __init__(self, session: LabSession, jobs: MeasuringJobs, parent: QWidget | None = None):
        super().__init__(parent)
        self.session = session
        self.jobs = jobs
        self.runner: ValidateRunner | None = None
        self._validate_started = 0.0  # time.monotonic() at Validate, for the estimate
        self.last_report: dict | None = None
        self.last_error: str | None = None
        self._stale = False

        col = QVBoxLayout(self)
        self.needs_pair = NeedsPairBar(session, "exports")
        col.addWidget(self.needs_pair)
        col.addWidget(QLabel("<h3>llama-server command</h3>"))
        self._build_command(col)
        col.addWidget(QLabel("<h3>Validation</h3>"))
        self._build_validation(col)
        add_page_shortcuts(self, (("Ctrl+Shift+V", self.start_validation), (Qt.Key.Key_Escape, self.cancel_validation)))

        self.shell.currentTextChanged.connect(self.refresh)
        self.server.changed.connect(self.refresh)
        # the Lab's knobs move many times a second while it runs; the command is rebuilt (its dialect, memory
        # warnings and all) only while it is on screen, and on showing when something changed meanwhile
        for changed in (session.pairChanged, session.loadChanged, session.knobsChanged):
            changed.connect(self._lab_changed)
        # a bound method, not a lambda: Qt drops the connection when this page is deleted (the reader is shared)
        header_reads().ready.connect(self._headers_read)
        # a validation measures with an engine of its own: nothing else measures beside it
        jobs.register(JOB, lambda: self.validating, "a validation is running on the Export page", "llama-server's")
        # its speed comparison waits for the app's own computing work (a ranking, a scan, the CPU probe)
        self.quiet = QuietWait(self, self._quiet_said)
        self._quiet_warning = ""  # "measuring beside ...": the wait ran out, said with the start
        self.refresh()

    def _build_command(self, col: QVBoxLayout) -> None:
        """The shell and the server binary, the command, its warnings and Copy."""
        self.shell = QComboBox()
        self.shell.addItems(SHELLS)
        self.server = PathPicker("llama-server binary (empty: the bundled one)")
        self.command = QPlainTextEdit()
        self.command.setReadOnly(True)
        self.warnings = QLabel()
        self.warnings.setWordWrap(True)
        copy = push_button("Copy", self._copy, "copy the command to the clipboard")
        self.copied = QLabel("")  # says the copy happened (issue 51: Copy gave no sign)
        row = QHBoxLayout()
        row.addWidget(QLabel("shell"))
        row.addWidget(self.shell)
        row.addWidget(QLabel("server"))
        row.addWidget(self.server, 1)
        col.addLayout(row)
        col.addWidget(self.command, 1)
        col.addWidget(self.warnings)
        copy_row = QHBoxLayout()
        copy_row.addWidget(copy)
        copy_row.addWidget(self.copied, 1)
        col.addLayout(copy_row)

    def _build_validation(self, col: QVBoxLayout) -> None:
        """Validate and Cancel with their inputs, the progress, the status line and the report."""
        self.validate_button = push_button(
            "Validate against llama-server",
            self.start_validation,
            (
                "run this command in the bundled llama-server and the same settings in the "
                "lab, on the Lab's prompts, and compare counts and speed (Ctrl+Shift+V)"
            ),
        )
        self.cancel_button = push_button(
            "Cancel", self.cancel_validation, "stop the validation now (Esc)", enabled=False
        )
        self.max_tokens = spin_box(8, 4096, 128, "tokens generated per prompt, on each side")
        self.passes = spin_box(1, 9, 1, "repeat everything and compare the medians: steadier speeds on a busy machine")
        self.progress = QProgressBar()
        self.progress.setRange(0, 1)
        self.progress.hide()
        self.validate_status = QLabel("Checks the command against a real server on the Lab's prompts.")
        self.validate_status.setWordWrap(True)
        self.report = QPlainTextEdit()
        self.report.setReadOnly(True)
        self.report.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        self.report.setPlaceholderText("the validation report: lab and llama-server side by side")
        row = QHBoxLayout()
        row.addWidget(self.validate_button)
        row.addWidget(self.cancel_button)
        row.addWidget(QLabel("tokens per prompt"))
        row.addWidget(self.max_tokens)
        row.addWidget(QLabel("passes"))
        row.addWidget(self.passes)
        row.addStretch(1)
        col.addLayout(row)
        col.addWidget(self.progress)
        col.addWidget(self.validate_status)
        col.addWidget(self.report, 2)  # the report has more lines than the command

    def _lab_changed(self) -> None:
        if self.isVisible():
            self.refresh()
        else:
            self._stale = True

    def _headers_read(self) -> None:
        if self._stale:
            self._lab_changed()

    def showEvent(self, event) -> None:
        if self._stale:
            self.refresh()
        super().showEvent(event)

    def refresh(self) -> None:
        from engine.deploy.export import ExportError, export_llama_server
        from engine.llama.dialect import DialectError

        self._stale = False
        s = self.session
        try:
            load = s.load_settings()
            if not header_reads().warm(s.target(), s.draft()):  # read off the GUI thread; then this runs again
                self.warnings.setText("reading the files' headers…")
                self._stale = True
                return
            exported = export_llama_server(load, s.spec_settings(), s.sampling_settings(), self.server.path())
        except (SettingsError, ExportError, DialectError, OSError) as exc:
            self.command.setPlainText("")
            self.warnings.setText(f"Nothing to export: {exc}")
            return
        self.command.setPlainText(exported.line(self.shell.currentText()))
        notes = [DIALECT_TEXT.get(str(exported.dialect), f"flags as llama-server {exported.dialect} spells them")]
        notes += exported.warnings
        self.warnings.setText("<br>".join(f"• {n}" for n in notes))

    def _copy(self) -> None:
        text = self.command.toPlainText()
        if not text:
            self.copied.setText("nothing to copy: the command above is empty")
            return
        QGuiApplication.clipboard().setText(text)
        self.copied.setText(f"copied ({len(text)} characters, {self.shell.currentText()})")

    # -- validation ---------------------------------------------------------------------------------
    @property
    def validating(self) -> bool:
        """A validation runs, or waits for the app's own computing work to end (app.quiet_wait)."""
        return self.runner is not None or self.quiet.waiting

    def start_validation(self) -> bool:
        """Validate the Lab's current settings; False (with the reason shown) when it cannot start. It compares the
        two engines' speeds, so it starts once the app's own computing work is done (the wait shows, Esc ends it)."""
        if self.validating:
            return False
        if self.jobs.refuse(JOB, lambda why: self._say(why, error=True)):
            return False
        s = self.session
        try:
            load, spec, sampling = s.checked_settings()
            prompts = s.collect_prompts()
        except (SettingsError, ValueError, OSError) as exc:  # WorkloadError is a ValueError
            self._say(f"Cannot validate: {exc}", error=True)
            return False
        self._quiet_warning = ""
        if not self.quiet.ready("validation", self._validate_when_quiet):
            self._set_running(True)  # Cancel (and Esc) end the wait
            return True
        notes = [self._quiet_warning] if self._quiet_warning else []
        if self.server.path() is not None:
            notes.append("validation runs the bundled llama-server, not the binary chosen above")
        self.last_report, self.last_error = None, None
        self.report.setPlainText("")
        self._run_settings = (load, spec, sampling)
        self.runner = ValidateRunner(
            load, spec, sampling, prompts, self.max_tokens.value(), self.passes.value(), parent=self
        )
        notes += self.jobs.make_room(JOB, self.runner.lab_freed)  # the Lab's run stopped, its GPU copy freed
        runner = self.runner
        runner.progress.connect(self._on_progress)
        runner.succeeded.connect(self._on_succeeded)
        runner.failed.connect(self._on_failed)
        runner.cancelled.connect(self._on_cancelled)
        runner.finished.connect(self._on_thread_finished)
        self._set_running(True)
        self._validate_started = time.monotonic()
        self._say(f"Validating on {len(prompts)} prompt(s) of {s.workload()}" + "".join(f"; {n}" for n in notes) + ".")
        self.runner.start()
        return True

    def _quiet_said(self, text: str, level: str) -> None:
        """The wait's banner: its progress at once; its warning (measuring beside work that did not end) with the
        start line, which would hide it."""
        if level == "warning":
            self._quiet_warning = text.rstrip(".")
        else:
            self._say(text)

    def _validate_when_quiet(self) -> None:
        """The app's own work ended (or the wait ran out): start the validation that waited, if it still can."""
        self._set_running(False)
        self.start_validation()

    def cancel_validation(self) -> None:
        if self.quiet.cancel():
            self._set_running(False)
            self._say("Validation cancelled before it started.")
            return
        if self.runner is None:
            return
        self.cancel_button.setEnabled(False)
        self._say("Cancelling: stopping llama-server and the lab's engine ...")
        self.runner.request_stop()

    def shutdown(self, timeout_ms: int = 15000) -> None:
        """The window is closing: stop a validation and wait for its thread (its processes stop with it)."""
        self.quiet.cancel()
        runner = self.runner
        if runner is None:
            return
        runner.request_stop()
        if not runner.wait(timeout_ms):
            runner.setParent(None)  # never destroy a running QThread: Qt would abort the process
            _STRAY_RUNNERS.append(runner)
        self.runner = None

    def _set_running(self, running: bool) -> None:
        self.validate_button.setEnabled(not running)
        self.cancel_button.setEnabled(running)
        self.progress.setVisible(running)
        if running:
            self.progress.setRange(0, 0)  # busy until the first count arrives

    def _say(self, text: str, error: bool = False) -> None:
        self.validate_status.setText(error_text(text, bold=False) if error else text)

    def _on_progress(self, done: int, total: int, what: str) -> None:
        if total:
            self.progress.setRange(0, total)
            self.progress.setValue(done)
            self.progress.setFormat(f"{done} of {total} runs")
        pace = pace_text(done, total, time.monotonic() - self._validate_started)
        self._say(f"Validating: {what} ... ({pace})")

    def _on_succeeded(self, report: dict) -> None:
        from engine.measure.validate import format_report

        self.last_report = report
        text = format_report(report)
        if report.get("warnings"):
            text += "\n\nwarnings:\n" + "\n".join(f"- {w}" for w in report["warnings"])
        self.report.setPlainText(text)
        verdict = (
            "counts agree"
            if report["agree"]
            else "COUNTS DIFFER"
            if report["agree"] is False
            else "counts not compared (a random seed above temperature 0)"
        )
        ratio = ratio_text(report.get("ratio"))
        saved = self._record(report)
        self._say(
            f"Validated: {verdict}{ratio}" + (", saved to the history." if saved else "."),
            error=report["agree"] is False,
        )

    def _record(self, report: dict) -> bool:
        """As ``spectune validate`` does."""
        from engine.measure.history import HistoryError
        from engine.measure.validate import record_validation

        try:
            entry = record_validation(report, *self._run_settings)
        except (HistoryError, OSError, ValueError) as exc:
            self.report.appendPlainText(f"\nnot saved to the history: {exc}")
            return False
        self.validationRecorded.emit(entry)
        return True

    def _on_failed(self, message: str) -> None:
        self.last_error = message
        self.report.setPlainText(message)
        self._say("Validation failed: " + message.splitlines()[0], error=True)

    def _on_cancelled(self) -> None:
        self._say("Validation cancelled; llama-server and the lab's engine were stopped.")

    def _on_thread_finished(self) -> None:
        self.runner = None
        self._set_running(False)
