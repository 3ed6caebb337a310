"""The main window: a page list on the left, the pages, and a status bar with
the engine's state. It makes what the pages share: the session (the pair, the
knobs, the prompts; app.session), whose widgets the Lab page holds, and the
coordinator that lets one measuring job run at a time (app.jobs). Window
geometry, the page shown and the session's knobs persist between sessions
(QSettings in the platformdirs config folder)."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QSettings, Qt, QTimer
from PySide6.QtGui import QAction, QCloseEvent, QKeySequence
from PySide6.QtWidgets import (
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QListWidget,
    QMainWindow,
    QProgressBar,
    QStackedWidget,
    QWidget,
)

from app.engine_controller import CRASHED, ERROR, LOADING, READY, RUNNING, STARTING, EngineController
from app.gui_gc import collect_in_gui_thread
from app.jobs import MeasuringJobs
from app.pages.export.page import ExportPage
from app.pages.hardware import HardwarePage
from app.pages.history import HistoryPage
from app.pages.lab.page import LabPage
from app.pages.models.page import ModelsPage
from app.pages.tune.page import TunePage
from app.session import LabSession
from app.settings_store import settings_path
from app.widgets import style

STATE_COLOURS = {
    STARTING: style.BUSY,
    READY: style.OK,
    LOADING: style.BUSY,
    RUNNING: style.BLUE,
    ERROR: style.ERROR,
    CRASHED: style.ERROR,
    "stopped": style.MUTED,
}
PAGE_NAMES = ("Hardware", "Models", "Lab", "Tune", "Export", "History")


class MainWindow(QMainWindow):
    def __init__(self, controller: EngineController | None = None, settings: QSettings | None = None, nvml=None):
        """nvml: a stand-in for the pynvml module (tests on machines without a GPU)."""
        super().__init__()
        collect_in_gui_thread()
        self.setWindowTitle("SpecTune")
        self.controller = controller or EngineController(self)
        self.settings = settings or QSettings(str(settings_path()), QSettings.Format.IniFormat)

        self.session = LabSession(self)
        self.jobs = MeasuringJobs()
        self.lab = LabPage(self.controller, session=self.session, jobs=self.jobs)
        self.hardware = HardwarePage(self.controller, nvml=nvml)
        self.models = ModelsPage(self.session, self.hardware, controller=self.controller)
        self.lab.hardware_report = lambda: self.hardware.report  # the Lab explains a pair that will not fit
        self.tune = TunePage(self.session, self.jobs)
        self.export = ExportPage(self.session, self.jobs)
        self.history = HistoryPage(self.lab)
        self.tune.tuneRecorded.connect(lambda entry_id: self.history.reload())
        self.export.validationRecorded.connect(lambda entry_id: self.history.reload())
        self.tune.exportRequested.connect(lambda: self.show_page("Export"))
        self.pages: dict[str, QWidget] = dict(
            zip(PAGE_NAMES, (self.hardware, self.models, self.lab, self.tune, self.export, self.history))
        )
        self.nav = QListWidget()
        self.nav.addItems(PAGE_NAMES)
        self.nav.setFixedWidth(110)
        self.stack = QStackedWidget()
        for page in self.pages.values():
            self.stack.addWidget(page)
        self.nav.currentRowChanged.connect(self.stack.setCurrentIndex)
        central = QWidget()
        row = QHBoxLayout(central)
        row.setContentsMargins(4, 4, 4, 4)
        row.addWidget(self.nav)
        row.addWidget(self.stack, 1)
        self.setCentralWidget(central)

        self.state_label = QLabel()
        self.vram_label = QLabel()
        self.load_bar = QProgressBar()  # shown while llama.cpp reads the weights
        self.load_bar.setRange(0, 1000)
        self.load_bar.setMaximumWidth(260)
        self.load_bar.setToolTip("loading the pair; Esc on the Lab page cancels")
        self.load_bar.hide()
        self.statusBar().addWidget(self.state_label, 1)
        self.statusBar().addPermanentWidget(self.load_bar)
        self.statusBar().addPermanentWidget(self.vram_label)
        self.controller.stateChanged.connect(self._show_state)
        self.controller.loadProgress.connect(self._show_load_progress)
        self.controller.hello.connect(
            lambda ev: self.statusBar().showMessage(f"engine ready: {ev.get('llama', '')[:80]}", 5000)
        )
        self._show_state(self.controller.state, self.controller.message)
        self.vram_timer = QTimer(self)
        self.vram_timer.setInterval(2000)
        self.vram_timer.timeout.connect(self._refresh_vram)
        self.vram_timer.start()

        self._build_menu()
        self._restore()

    # -- menu and shortcuts -----------------------------------------------
    def _build_menu(self) -> None:
        file_menu = self.menuBar().addMenu("&File")
        save = QAction("Save charts as PNG…", self, shortcut=QKeySequence("Ctrl+S"), triggered=self.save_charts)
        quit_ = QAction("Quit", self, shortcut=QKeySequence.StandardKey.Quit, triggered=self.close)
        file_menu.addActions([save, quit_])
        engine_menu = self.menuBar().addMenu("&Engine")
        engine_menu.addAction(
            QAction("Restart engine", self, shortcut=QKeySequence("Ctrl+R"), triggered=self.controller.restart)
        )
        view = self.menuBar().addMenu("&View")
        for i, name in enumerate(PAGE_NAMES):
            view.addAction(
                QAction(
                    name,
                    self,
                    shortcut=QKeySequence(f"Ctrl+{i + 1}"),
                    triggered=lambda checked=False, name=name: self.go_to(name),
                )
            )

    def show_page(self, name: str) -> None:
        self.nav.setCurrentRow(PAGE_NAMES.index(name))

    def go_to(self, name: str) -> None:
        """Show a page from the keyboard and give it the focus (its own shortcuts work wherever the focus is,
        see page_shortcuts; a click in the page list keeps the focus there for the arrow keys)."""
        self.show_page(name)
        self.pages[name].setFocus(Qt.FocusReason.ShortcutFocusReason)

    def save_charts(self) -> None:
        path, _ = QFileDialog.getSaveFileName(
            self, "Save charts", str(Path.home() / "spectune-charts.png"), "PNG images (*.png)"
        )
        if path:
            self.lab.save_charts(path)
            self.statusBar().showMessage(f"saved {path}", 5000)

    # -- status -----------------------------------------------------------
    def _show_state(self, state: str, message: str) -> None:
        colour = STATE_COLOURS.get(state, style.MUTED)
        first_line = (message or "").splitlines()[0] if message else ""
        self.state_label.setText(f"{style.coloured(f'engine: {state}', colour)} {first_line}")
        self.state_label.setToolTip(message or state)
        if state != LOADING:
            self.load_bar.hide()

    def _show_load_progress(self, stage: str, fraction: float) -> None:
        if self.controller.state != LOADING:
            return
        self.load_bar.setValue(int(round(fraction * 1000)))
        self.load_bar.setFormat(f"{stage} {fraction * 100:.0f} %")
        self.load_bar.show()

    def _refresh_vram(self) -> None:
        text = self.hardware.vram_summary()
        self.vram_label.setText(text)

    # -- persistence ------------------------------------------------------
    def _restore(self) -> None:
        geometry = self.settings.value("window/geometry")
        if geometry is not None:
            self.restoreGeometry(geometry)
        else:
            self.resize(1400, 900)
        page = self.settings.value("window/page", "Lab")
        self.show_page(page if page in PAGE_NAMES else "Lab")
        state = {
            key.split("/", 1)[1]: self.settings.value(key) for key in self.settings.allKeys() if key.startswith("lab/")
        }
        if state:
            self.session.restore_state(state)
        tune_state = {
            key.split("/", 1)[1]: self.settings.value(key) for key in self.settings.allKeys() if key.startswith("tune/")
        }
        if tune_state:
            self.tune.restore_state(tune_state)

    def save_settings(self) -> None:
        self.settings.setValue("window/geometry", self.saveGeometry())
        self.settings.setValue("window/page", PAGE_NAMES[self.nav.currentRow()])
        for key, value in self.session.save_state().items():
            self.settings.setValue(f"lab/{key}", value)
        for key, value in self.tune.save_state().items():
            self.settings.setValue(f"tune/{key}", value)
        self.settings.sync()

    def closeEvent(self, event: QCloseEvent) -> None:
        self.save_settings()
        self.vram_timer.stop()
        self.lab.shutdown()
        self.tune.shutdown()  # a running tune: its thread ends and its own worker process goes
        self.export.shutdown()  # a running validation: its server and worker stop
        self.controller.shutdown()
        super().closeEvent(event)


__all__ = ["MainWindow", "PAGE_NAMES", "Qt"]
