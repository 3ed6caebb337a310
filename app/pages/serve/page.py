"""The Serve page: the Lab's settings served to the user's own tools, and each of their requests watched.

Start runs llama-server with the command the Export page shows (the bundled binary, or the one chosen
there) behind SpecTune's proxy on 127.0.0.1 (engine.serve.session); the page shows the base URL to
give an IDE or a chat client, each request's tokens/s and acceptance as it comes (charts and a table),
the rolling figures over the last requests, and the server's log. Recording (opt-in) appends each chat
request to a JSONL file on this machine; "Tune on this traffic" hands that file to the Tune page.

When acceptance over the last requests falls well below what the tune measured for these settings, the
page says so and offers the retune. A llama-server that dies is reported with its log's tail and offered
a restart; the proxy answers 503 with the reason meanwhile, and nothing recorded is lost.

Starting, stopping and restarting run off the GUI thread (app.background): a model loads for seconds to
minutes. Serving counts as a measuring job (app.jobs): while it runs, the Lab, a tune and a validation
wait, since they would compete with the user's own requests for the machine.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtGui import QFontDatabase, QGuiApplication
from PySide6.QtWidgets import (
    QCheckBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QSplitter,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.background import BackgroundJob
from app.jobs import MeasuringJobs
from app.pages.serve.charts import ServeCharts
from app.session import LabSession
from app.widgets.forms import push_button, spin_box
from app.widgets.needs_pair import NeedsPairBar
from app.widgets.page_shortcuts import add_page_shortcuts
from app.widgets.style import error_text
from app.widgets.timers import make_timer
from engine.core.paths import data_dir
from engine.core.settings import SettingsError
from engine.serve.watch import ROLLING, RequestRecord, ServerCounters, acceptance_alert

if TYPE_CHECKING:
    from engine.serve.session import ServeSession  # for annotations: start() imports it when it serves

JOB = "serving"
LAB_FREE_TIMEOUT_S = 60.0
TABLE_ROWS = 200
COLUMNS = ("#", "time", "status", "prompt", "tokens", "tok/s", "accepted", "in flight", "s")
COLUMN_TIPS = (
    "the request's number, in the order they arrived",
    "when it arrived",
    "llama-server's HTTP status and, for an error, its message (all of it in the cell's tooltip)",
    "prompt tokens, the part llama-server had cached included",
    "tokens generated",
    "llama-server's own generation speed for this request",
    "drafted tokens the target accepted: the share, then accepted/drafted",
    "the most requests in flight at once while this one ran, itself included",
    "seconds until the answer's last byte was passed on",
)
STATUS_COLUMN = COLUMNS.index("status")
# an error's first characters in the table (all of it in the cell's tooltip and the log): issue 51 saw a
# 400's message push the tok/s column off the screen
STATUS_CHARS = 32


def _clipped(text: str) -> str:
    return text if len(text) <= STATUS_CHARS else text[: STATUS_CHARS - 1].rstrip() + "…"


def default_recording() -> Path:
    return data_dir() / "recordings" / f"traffic-{time.strftime('%Y-%m-%d')}.jsonl"


class _Bridge(QObject):
    """Carries the monitor's events (its thread) to the GUI thread. Requests need no signal: the page's
    timer reads the watch once a second, so a burst of requests costs one repaint."""

    serveEvent = Signal(object)  # not "event": that would hide QObject.event(), which Qt calls


class ServePage(QWidget):
    tuneRequested = Signal(str)  # the recording's path: the window hands it to the Tune page

    def __init__(
        self,
        session: LabSession,
        jobs: MeasuringJobs,
        tuned_acceptance: Callable[[], float | None] = lambda: None,
        server_binary: Callable[[], Path | None] = lambda: None,
        parent: QWidget | None = None,
    ):
        super().__init__(parent)
        self.session = session
        self.jobs = jobs
        self.tuned_acceptance = tuned_acceptance  # the tune's acceptance for the settings served, if one ran
        self.server_binary = server_binary  # the Export page's chosen llama-server (None: the bundled one)
        self.serving: ServeSession | None = None  # while it serves
        self._job: BackgroundJob | None = None  # a start, a stop or a restart under way
        self._starting: ServeSession | None = None  # the session being started (a Stop aborts it)
        self._shown = 0  # requests on the charts and in the table
        self._counters_shown: ServerCounters | None = None  # llama-server's counters last summed up
        self._log_shown = ""  # the server log's text last put on screen
        self._tuned: float | None = None
        self._abort_start = threading.Event()
        self.last_error = ""
        self._bridge = _Bridge(self)
        self._bridge.serveEvent.connect(self._on_event, Qt.ConnectionType.QueuedConnection)

        col = QVBoxLayout(self)
        self.needs_pair = NeedsPairBar(session, "serves")
        col.addWidget(self.needs_pair)
        col.addWidget(QLabel("<h3>Serve the Lab's settings to your own tools</h3>"))
        # what Start serves, kept current as the Lab's knobs move (a running server keeps what it started with)
        self.lab_summary = QLabel()
        self.lab_summary.setWordWrap(True)
        self.lab_summary.setTextFormat(Qt.TextFormat.RichText)
        col.addWidget(self.lab_summary)
        for changed in (session.pairChanged, session.loadChanged, session.knobsChanged):
            changed.connect(self.refresh_lab_summary)
        self.refresh_lab_summary()
        self._build_settings(col)
        self._build_actions(col)
        self._build_watch(col)
        add_page_shortcuts(self, (("Ctrl+Shift+S", self.start), (Qt.Key.Key_Escape, self.stop)))
        jobs.register(JOB, lambda: self.busy, "a server is running on the Serve page", "the server's")
        self.timer = make_timer(self, 1000, self._tick)
        self._set_state("idle")

    def refresh_lab_summary(self) -> None:
        self.lab_summary.setText(self.session.summary_html(spec=True))

    # -- layout -----------------------------------------------------------------------------------
    def _build_settings(self, col: QVBoxLayout) -> None:
        self.port = spin_box(1, 65535, 8080, "the port your tools connect to, on 127.0.0.1 (this machine only)")
        self.parallel = spin_box(1, 16, 1, "server slots (-np): how many requests llama-server runs at once")
        self.api_key = QLineEdit()
        self.api_key.setPlaceholderText("none")
        self.api_key.setEchoMode(QLineEdit.EchoMode.PasswordEchoOnEdit)
        self.api_key.setToolTip("optional: a key your tools must send (Authorization: Bearer KEY)")
        self.record = QCheckBox("record requests to")
        self.record.setToolTip(
            "append each chat request to a JSONL file on this machine (nothing leaves it), to tune on your own "
            "traffic later"
        )
        self.record_path = QLineEdit(str(default_recording()))
        self.record_path.setToolTip("the recording: a workload file the Tune page and `spectune tune` read")
        row = QHBoxLayout()
        for label, widget in (("port", self.port), ("slots", self.parallel), ("API key", self.api_key)):
            row.addWidget(QLabel(label))
            row.addWidget(widget)
        row.addWidget(self.record)
        row.addWidget(self.record_path, 1)
        col.addLayout(row)

    def _build_actions(self, col: QVBoxLayout) -> None:
        self.start_button = push_button(
            "Start serving", self.start, "start llama-server with the Lab's settings behind the proxy (Ctrl+Shift+S)"
        )
        self.stop_button = push_button("Stop", self.stop, "stop the server and the proxy (Esc)")
        self.restart_button = push_button(
            "Restart server",
            self.restart,
            "start llama-server again on the same settings; the proxy and recording go on",
        )
        self.url = QLineEdit()
        self.url.setReadOnly(True)
        self.url.setToolTip("the OpenAI-compatible base URL to give your IDE or chat client")
        self.copy_button = push_button("Copy URL", lambda: QGuiApplication.clipboard().setText(self.url.text()))
        row = QHBoxLayout()
        for w in (self.start_button, self.stop_button, self.restart_button):
            row.addWidget(w)
        row.addWidget(QLabel("base URL"))
        row.addWidget(self.url, 1)
        row.addWidget(self.copy_button)
        col.addLayout(row)
        self.status = QLabel()
        self.status.setWordWrap(True)
        col.addWidget(self.status)

    def _build_watch(self, col: QVBoxLayout) -> None:
        self.summary = QLabel("No requests yet.")
        self.summary.setWordWrap(True)
        self.tune_button = push_button(
            "Tune on this traffic",
            self._tune_on_traffic,
            "open the Tune page on the recording: the setting that pays on your own requests",
        )
        row = QHBoxLayout()
        row.addWidget(self.summary, 1)
        row.addWidget(self.tune_button)
        col.addLayout(row)
        self.charts = ServeCharts()
        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setHorizontalHeaderLabels(COLUMNS)
        self.table.verticalHeader().setVisible(False)
        self.table.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        for i, tip in enumerate(COLUMN_TIPS):
            heading = self.table.horizontalHeaderItem(i)
            assert heading is not None  # the labels just set made it
            heading.setToolTip(tip)
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        # the status column takes what the numbers leave (elided, the whole in its tooltip), so that a long
        # error never pushes them off a 1280-pixel screen
        header.setSectionResizeMode(STATUS_COLUMN, QHeaderView.ResizeMode.Stretch)
        header.setMinimumSectionSize(40)
        self.log = QPlainTextEdit()
        self.log.setReadOnly(True)
        self.log.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        self.log.setPlaceholderText("llama-server's log")
        split = QSplitter(Qt.Orientation.Vertical)
        top = QSplitter(Qt.Orientation.Horizontal)
        top.addWidget(self.charts)
        top.addWidget(self.table)
        top.setSizes([500, 600])  # the table's nine columns need the wider half on a 1280-pixel screen
        split.addWidget(top)
        split.addWidget(self.log)
        split.setSizes([500, 140])
        col.addWidget(split, 1)

    # -- state ------------------------------------------------------------------------------------
    @property
    def busy(self) -> bool:
        """Serving, or starting, stopping or restarting."""
        return self.serving is not None or self._job is not None

    def _set_state(self, state: str) -> None:
        """idle, starting, serving, down (the server died), stopping."""
        self.state = state
        self.start_button.setEnabled(state == "idle")
        self.stop_button.setEnabled(state in ("starting", "serving", "down"))
        self.restart_button.setEnabled(state == "down")
        for w in (self.port, self.parallel, self.api_key, self.record, self.record_path):
            w.setEnabled(state == "idle")
        recording = self._recording_path()
        self.tune_button.setEnabled(recording is not None and recording.is_file())

    def _say(self, text: str, error: bool = False) -> None:
        self.status.setText(error_text(text, bold=False) if error else text)

    def _recording_path(self) -> Path | None:
        text = self.record_path.text().strip()
        return Path(text).expanduser() if self.record.isChecked() and text else None

    # -- start, stop, restart -----------------------------------------------------------------------
    def start(self) -> bool:
        """Serve the Lab's current settings; False (with the reason shown) when it cannot start."""
        from engine.serve.session import ServeSession, ServeSettings

        if self.state != "idle":
            return False
        if self.jobs.refuse(JOB, lambda why: self._say(why, error=True)):
            return False
        s = self.session
        try:
            load, spec, sampling = s.checked_settings()
            settings = ServeSettings(
                load,
                spec,
                sampling,
                server=self.server_binary(),
                port=self.port.value(),
                api_key=self.api_key.text().strip() or None,
                record=self._recording_path(),
                parallel=self.parallel.value(),
            )
        except (SettingsError, ValueError, OSError) as exc:
            self._say(f"Cannot serve: {exc}", error=True)
            return False
        freed = threading.Event()
        freed.set()  # cleared by make_room while the Lab's GPU copy of the pair is being freed
        notes = self.jobs.make_room(JOB, freed)
        self._tuned = self.tuned_acceptance()
        self.last_error = ""
        self._abort_start = abort = threading.Event()

        def run(report) -> object:
            freed.wait(LAB_FREE_TIMEOUT_S)
            serving = ServeSession(settings, on_event=self._bridge.serveEvent.emit)
            self._starting = serving
            if abort.is_set():  # Stop came before the session existed
                serving.abort()
            report(" ".join(serving.argv))
            serving.start()
            return serving

        self._run_job("serve-start", run, self._on_started, self._on_start_failed, self._on_argv)
        self._set_state("starting")
        self._say("Starting llama-server with the Lab's settings" + "".join(f"; {n}" for n in notes) + " …")
        return True

    def _run_job(self, name: str, fn, done, failed, progress=None) -> None:
        job = BackgroundJob(name, fn, self).on(done=done, failed=failed, progress=progress)
        job.done.connect(self._job_ended, Qt.ConnectionType.QueuedConnection)
        job.failed.connect(self._job_ended, Qt.ConnectionType.QueuedConnection)
        self._job = job
        job.start()

    def _job_ended(self, *_args) -> None:
        self._job = None
        self._set_state(self.state)

    def _on_argv(self, argv: str) -> None:
        self.log.setPlainText(f"$ {argv}\n")

    def _on_started(self, serving) -> None:
        self._starting = None
        self.serving = serving
        self._shown, self._counters_shown = 0, None
        self.url.setText(serving.base_url)
        self._set_state("serving")
        recording = f"; recording chat requests to {serving.recorder.path}" if serving.recorder else ""
        self._say(f"Serving on {serving.base_url}: give this base URL to your IDE or chat client{recording}.")
        self.timer.start()
        self._tick()

    def _on_start_failed(self, exc: BaseException) -> None:
        starting, self._starting = self._starting, None
        if starting is not None:
            self.log.appendPlainText(starting.server_log)
        self.last_error = str(exc)
        stopped = self.state == "stopping"
        self._set_state("idle")
        if stopped:
            self._say("Stopped before it served.")
        else:
            self._say(f"Could not start serving: {str(exc).splitlines()[0]}", error=True)

    def stop(self) -> None:
        if self.state == "starting":
            self._set_state("stopping")
            self._abort_start.set()
            starting = self._starting
            if starting is not None:
                starting.abort()  # the start under way gives up; _on_start_failed ends it
            return
        if self.serving is None or self._job is not None:
            return
        serving, self.serving = self.serving, None
        self.timer.stop()
        self._set_state("stopping")
        self._say("Stopping llama-server and the proxy …")
        self._run_job("serve-stop", lambda report: serving.stop(), self._on_stopped, self._on_stopped)

    def _on_stopped(self, *_args) -> None:
        self._set_state("idle")
        self.url.setText("")
        self._say("Stopped. Nothing recorded was lost." if self._recording_path() else "Stopped.")

    def restart(self) -> None:
        serving = self.serving
        if serving is None or self._job is not None:
            return
        self._say("Restarting llama-server …")
        self._run_job("serve-restart", lambda report: serving.restart(), lambda _: None, self._on_restart_failed)

    def _on_restart_failed(self, exc: BaseException) -> None:
        self._say(f"The restart failed: {str(exc).splitlines()[0]}", error=True)

    def shutdown(self, timeout_s: float = 15.0) -> None:
        """The window is closing: the server and the proxy stop (a start under way gives up first)."""
        self.timer.stop()
        self._abort_start.set()
        starting = self._starting
        if starting is not None:
            starting.abort()
        if self._job is not None:
            self._job.stop(timeout_s)
        serving, self.serving = self.serving, None
        if serving is not None:
            serving.stop()

    # -- watching -----------------------------------------------------------------------------------
    def _on_event(self, ev: dict) -> None:
        if ev["kind"] == "server-exited":
            self._set_state("down")
            self.log.appendPlainText(ev["log"])
            self._say(
                f"llama-server exited with status {ev['code']} (its log is below). Your tools get a 503 until it "
                "runs again: press Restart server.",
                error=True,
            )
        elif ev["kind"] == "restarted":
            self._set_state("serving")
            self._say(f"Serving again on {ev['url']}.")

    def _tick(self) -> None:
        serving = self.serving
        if serving is None:
            return
        log = serving.server_log[-20000:]
        if log != self._log_shown:  # an idle server writes nothing: no re-layout of 20 kB each second
            self._log_shown = log
            self.log.setPlainText(log)
            self.log.verticalScrollBar().setValue(self.log.verticalScrollBar().maximum())
        if serving.watch.total == self._shown and serving.watch.counters is self._counters_shown:
            return
        self._shown, self._counters_shown = serving.watch.total, serving.watch.counters
        records = serving.watch.records(TABLE_ROWS)
        self.charts.show_records(records, self._tuned)
        self._fill_table(records)
        self._show_summary(serving)

    def save_charts(self, path: str) -> None:
        """File > Save charts on this page (MainWindow.save_charts)."""
        self.charts.save_png(path)

    def _show_summary(self, serving) -> None:
        r = serving.watch.rolling()
        acc = f"acceptance {r.acceptance:.0%} ({r.accepted} of {r.drafted} drafted)" if r.drafted else "no drafts"
        tuned = f" (tuned: {self._tuned:.0%})" if self._tuned is not None else ""
        recorded = f"; {serving.recorder.count} recorded" if serving.recorder is not None else ""
        text = (
            f"Last {r.requests} of {serving.watch.total} requests: {r.tokens_per_s:.1f} tok/s, {acc}{tuned}, "
            f"up to {r.max_overlapped} at once{recorded}."
        )
        slots = serving.settings.parallel
        if r.max_overlapped > slots:
            text += (
                f" Your tools sent up to {r.max_overlapped} requests at once and the server runs {slots} at a time"
                f" (slots): the others wait. Tune at that concurrency (the Tune page's clients, or spectune tune"
                f" --clients {r.max_overlapped}) before raising the slots."
            )
        counters = serving.watch.counters.line() if serving.watch.counters is not None else ""
        if counters:
            text += f"<br>{counters[0].upper()}{counters[1:]}."
        alert = acceptance_alert(r, self._tuned)
        self.summary.setText(text + (f"<br>{error_text(alert, bold=False)}" if alert else ""))
        self._set_state(self.state)  # the recording may exist now: Tune on this traffic

    def _fill_table(self, records: list[RequestRecord]) -> None:
        self.table.setRowCount(len(records))
        for row, r in enumerate(sorted(records, key=lambda r: r.id, reverse=True)):  # newest first, as numbered
            acc = f"{r.acceptance:.0%} ({r.accepted}/{r.drafted})" if r.acceptance is not None else "-"
            cells = (
                str(r.id),
                time.strftime("%H:%M:%S", time.localtime(r.started)),
                str(r.status) if not r.error else f"{r.status}: {r.error}",
                str(r.prompt_tokens),
                str(r.generated_tokens),
                f"{r.tokens_per_s:.1f}",
                acc,
                str(r.overlapped),
                f"{r.seconds:.1f}",
            )
            for col, text in enumerate(cells):
                item = QTableWidgetItem(_clipped(text) if col == STATUS_COLUMN else text)
                if col == STATUS_COLUMN and r.error:
                    item.setToolTip(text)  # the whole of llama-server's message, which can run to 400 characters
                self.table.setItem(row, col, item)

    def _tune_on_traffic(self) -> None:
        path = self._recording_path()
        if path is None or not path.is_file():
            self._say("Nothing recorded yet: tick 'record requests to' before starting, then use your tools.")
            return
        self.tuneRequested.emit(str(path))


__all__ = ["ServePage", "ROLLING"]
