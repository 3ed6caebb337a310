"""The main window: a page list on the left (icon, name, shortcut), the pages, and a status bar with
the session's pair and the engine's state, which the window title repeats. It makes what the pages
share: the session (the pair, the knobs, the prompts; app.session), whose widgets the Lab page holds, and the
coordinator that lets one measuring job run at a time (app.jobs). Window
geometry, the page shown and the session's knobs persist between sessions
(QSettings in the platformdirs config folder)."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QSettings, QSize, Qt
from PySide6.QtGui import QAction, QActionGroup, QCloseEvent, QKeySequence
from PySide6.QtWidgets import (
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QMainWindow,
    QProgressBar,
    QStackedWidget,
    QVBoxLayout,
    QWidget,
)

from app.demo_run import DemoRun
from app.engine_controller import CRASHED, ERROR, LOADING, READY, RUNNING, STARTING, EngineController
from app.gil_handover import hand_over_quickly
from app.gui_gc import collect_in_gui_thread
from app.jobs import MeasuringJobs
from app.page_list import PAGE_NAMES, PAGES
from app.pages.export.page import ExportPage
from app.pages.hardware import HardwarePage
from app.pages.history import HistoryPage
from app.pages.lab.page import LabPage
from app.pages.models.page import ModelsPage
from app.pages.serve.page import ServePage
from app.pages.start import StartPage
from app.pages.tune.page import TunePage
from app.session import LabSession
from app.settings_store import settings_path
from app.widgets import style
from app.widgets.banner import Banner
from app.widgets.icons import app_icon
from app.widgets.navigation import PageNavigation
from app.widgets.theme import ThemeFollower
from app.widgets.timers import make_timer
from app.widgets.wheel_guard import guard_knobs
from engine.runtime.engine_choice import ENGINES, WHAT_STILL_WORKS

STATE_COLOURS = {  # the role's colour in the current look (style.current())
    STARTING: "busy",
    READY: "ok",
    LOADING: "busy",
    RUNNING: "blue",
    ERROR: "error",
    CRASHED: "error",
    "stopped": "muted",
}


def pair_text(target: Path | None, draft: Path | None) -> str:
    """ "target + draft" by file name without .gguf, for the title and the status bar."""
    if target is None:
        return "no model pair"
    return f"{target.stem} + {draft.stem}" if draft is not None else f"{target.stem} (no draft)"


# the window's size at a first start, in logical pixels: 1400 x 900 where the screen has room, else most
# of the screen (a 1920 x 1080 laptop at 150 % scaling offers 1280 x 720 less the task bar)
FIRST_SIZE = (1400, 900)
SCREEN_SHARE = 0.92


def first_size(available: QSize | None) -> tuple[int, int]:
    if available is None:
        return FIRST_SIZE
    return (
        min(FIRST_SIZE[0], int(available.width() * SCREEN_SHARE)),
        min(FIRST_SIZE[1], int(available.height() * SCREEN_SHARE)),
    )


class MainWindow(QMainWindow):
    def __init__(self, controller: EngineController | None = None, settings: QSettings | None = None, nvml=None):
        """nvml: a stand-in for the pynvml module (tests on machines without a GPU)."""
        super().__init__()
        collect_in_gui_thread()
        hand_over_quickly()  # background threads give the GUI thread the GIL within 1 ms, not 5
        self.setWindowTitle("SpecTune")
        self.setWindowIcon(app_icon())
        self.settings = settings or QSettings(str(settings_path()), QSettings.Format.IniFormat)
        # the engine chosen in the Engine menu last time (auto unless the user picked one)
        engine = str(self.settings.value("engine/kind", "auto"))
        server = str(self.settings.value("engine/server", "")) or None
        self.controller = controller or EngineController(
            self, engine=engine if engine in ENGINES else "auto", server=server
        )

        self.session = LabSession(self)
        self._demo: DemoRun | None = None  # the Start page's demo run
        self.jobs = MeasuringJobs()
        self._build_pages(nvml)
        self._connect_pages()
        self._build_central()
        guard_knobs(self)  # the wheel scrolls the pages; a knob takes it only with the focus
        self._build_status_bar()
        self._connect_status()
        self.vram_timer = make_timer(self, 2000, self._refresh_vram)
        self.vram_timer.start()

        self._build_menu()
        self._restore()
        # last, so the charts and bars built above take the system's look at once
        self.theme = ThemeFollower(self)

        def restyle(_colours: object) -> None:
            for p in (self.tune, self.export, self.serve):
                p.needs_pair.restyle()

        self.theme.changed.connect(restyle)

    # -- what the window holds --------------------------------------------
    def _build_pages(self, nvml) -> None:
        """The pages, each given the shared parts it uses (the session, the measuring jobs, the hardware)."""
        self.lab = LabPage(self.controller, session=self.session, jobs=self.jobs)
        self.hardware = HardwarePage(self.controller, nvml=nvml, jobs=self.jobs)
        self.models = ModelsPage(self.session, self.hardware, controller=self.controller)
        self.lab.hardware_report = lambda: self.hardware.report  # the Lab explains a pair that will not fit
        self.tune = TunePage(self.session, self.jobs)
        self.tune.engine = (self.controller.engine, self.controller.server)
        self.export = ExportPage(self.session, self.jobs)
        self.serve = ServePage(
            self.session, self.jobs, tuned_acceptance=self._tuned_acceptance, server_binary=self.export.server.path
        )
        self.history = HistoryPage(self.lab)
        self.start_page = StartPage(lambda: self.hardware.report)

    def _connect_pages(self) -> None:
        """What one page asks of another: the Start page's steps, rankings, history reloads, page changes."""
        self.start_page.demoRequested.connect(self.run_demo)
        self.start_page.pageRequested.connect(self.go_to)
        self.start_page.downloadRequested.connect(self._download_from_start)
        self.start_page.measureRequested.connect(self.hardware.measure_cpu)
        self.hardware.probeMessage.connect(self.start_page.show_probe_message)
        self.hardware.cpuSpeedMeasured.connect(lambda speed: self.models.rank())  # measured speeds, ranked anew
        self._start_download: str | None = None  # the Models page's row of a download the Start page asked for
        self.models.presets.downloaded.connect(self._run_downloaded)
        self.models.ranked.connect(self.start_page.set_ranking)
        self.start_page.rankingWanted.connect(self.models.start_background_work)  # one ranking for both pages
        self.tune.tuneRecorded.connect(lambda entry_id: self.history.reload())
        self.export.validationRecorded.connect(lambda entry_id: self.history.reload())
        self.tune.exportRequested.connect(lambda: self.show_page("Export"))
        self.tune.clientsTuned.connect(self.serve.parallel.setValue)  # serve at the concurrency it was tuned at
        self.serve.tuneRequested.connect(self._tune_on_recording)
        for page in (self.tune, self.export, self.serve):
            page.needs_pair.chooseRequested.connect(lambda: self.show_page("Models"))
        self.history.labRequested.connect(lambda: self.show_page("Lab"))

    def _tuned_acceptance(self) -> float | None:
        """The acceptance the last tune measured, when its pick is what the Lab holds now (what the Serve page
        compares the user's traffic with)."""
        from engine.measure.concurrent_tune import ConcurrentTuneResult

        result = getattr(self.tune, "result", None)
        if result is None or result.best.spec != self.session.spec_settings():
            return None
        if isinstance(result, ConcurrentTuneResult):
            return result.best.acceptance
        return result.best.totals.acceptance_rate if result.best.totals.drafted else None

    def _tune_on_recording(self, path: str) -> None:
        """The Serve page's "Tune on this traffic": the Tune page on the recording, ready to start."""
        self.tune.set_workload_file(path)
        self.show_page("Tune")

    def _build_central(self) -> None:
        """The page list on the left, the pages stacked beside it in the same order."""
        self.pages: dict[str, QWidget] = dict(
            zip(
                PAGE_NAMES,
                (
                    self.start_page,
                    self.hardware,
                    self.models,
                    self.lab,
                    self.tune,
                    self.export,
                    self.serve,
                    self.history,
                ),
            )
        )
        self.nav = PageNavigation(PAGES)
        self.stack = QStackedWidget()
        for page in self.pages.values():
            self.stack.addWidget(page)
        self.nav.currentRowChanged.connect(self.stack.setCurrentIndex)
        central = QWidget()
        column = QVBoxLayout(central)
        column.setContentsMargins(4, 4, 4, 4)
        # which engine measures, when it is not SpecTune's own (on every page: it concerns them all)
        self.engine_banner = Banner()
        column.addWidget(self.engine_banner)
        row = QHBoxLayout()
        row.addWidget(self.nav)
        row.addWidget(self.stack, 1)
        column.addLayout(row, 1)
        self.setCentralWidget(central)

    def _build_status_bar(self) -> None:
        """The engine's state on the left; the pair, the load progress and the VRAM in use on the right."""
        self.state_label = QLabel()
        self.pair_label = QLabel()
        self.vram_label = QLabel()
        self.load_bar = QProgressBar()  # shown while llama.cpp reads the weights
        self.load_bar.setRange(0, 1000)
        self.load_bar.setMaximumWidth(260)
        self.load_bar.setToolTip("loading the pair; Esc on the Lab page cancels")
        self.load_bar.hide()
        self.statusBar().addWidget(self.state_label, 1)
        self.statusBar().addPermanentWidget(self.pair_label)
        self.statusBar().addPermanentWidget(self.load_bar)
        self.statusBar().addPermanentWidget(self.vram_label)

    def _connect_status(self) -> None:
        """The status bar and the title follow the engine and the session's pair, shown once now."""
        self.controller.stateChanged.connect(self._show_state)
        self.controller.loadProgress.connect(self._show_load_progress)
        self.controller.hello.connect(self._on_engine_hello)
        self.session.pairChanged.connect(self._show_pair)
        self._show_state(self.controller.state, self.controller.message)
        self._show_pair()

    def _on_engine_hello(self, ev: dict) -> None:
        """The status line names the engine; the banner says why it is llama-server when SpecTune's own failed."""
        kind = ev.get("engine_kind", "native")
        name = "llama-server" if kind == "llama-server" else "SpecTune's engine"
        self.statusBar().showMessage(f"engine ready: {name}, {ev.get('llama', '')[:80]}", 5000)
        for engine, action in self.engine_actions.items():
            action.setChecked(engine == self.controller.engine)
        failure = self.controller.native_failure
        if failure and kind == "llama-server":
            self.engine_banner.show_message(
                failure.split(WHAT_STILL_WORKS)[0].strip()
                + " The Lab, the quick check and the Tune page measure through llama-server instead (Engine "
                "menu); a knob moved during a run applies from the next prompt.",
                "warning",
            )
        elif kind == "llama-server":
            self.engine_banner.show_message(
                f"Measuring through llama-server ({ev.get('server', 'bundled')}): a knob changed during a run "
                "applies from the next prompt, when the server restarts with it (the charts mark it).",
                "info",
            )
        else:
            self.engine_banner.hide()

    def use_engine(self, engine: str, server: str | None = None) -> None:
        """Measure with another engine from now on; a loaded pair is loaded again in it."""
        if self.lab.mode != "idle":
            self.engine_banner.show_message("Stop the run first, then change the engine.", "warning")
            self.engine_actions[self.controller.engine].setChecked(True)
            return
        if self.controller.load_settings is not None and self.controller.loaded_info is not None:
            self.lab.reload_after_hello()
        self.settings.setValue("engine/kind", engine)
        self.settings.setValue("engine/server", server or "")
        self.controller.set_engine(engine, server)
        self.tune.engine = (engine, server)

    def _pick_server(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Your llama-server binary", "", "llama-server (llama-server*)")
        if path:
            self.use_engine("llama-server", path)

    # -- menu and shortcuts -----------------------------------------------
    def _build_menu(self) -> None:
        file_menu = self.menuBar().addMenu("&File")
        save = QAction("Save charts as PNG…", self, shortcut=QKeySequence("Ctrl+S"))
        # not connected to save_charts itself: triggered passes checked=False, which it took for a path given
        # (no file dialog, then nothing saved)
        save.triggered.connect(lambda: self.save_charts())
        self.save_action = save
        quit_ = QAction("Quit", self, shortcut=QKeySequence(QKeySequence.StandardKey.Quit))
        quit_.triggered.connect(self.close)
        file_menu.addActions([save, quit_])
        engine_menu = self.menuBar().addMenu("&Engine")
        restart = QAction("Restart engine", self, shortcut=QKeySequence("Ctrl+R"))
        restart.triggered.connect(self.controller.restart)
        engine_menu.addAction(restart)
        engine_menu.addSeparator()
        group = QActionGroup(self)
        self.engine_actions: dict[str, QAction] = {}
        for engine, text in (
            ("auto", "Auto: SpecTune's engine, llama-server if it cannot start"),
            ("native", "SpecTune's engine"),
            ("llama-server", "llama-server (the bundled one)"),
        ):
            action = QAction(text, self, checkable=True)
            action.setChecked(engine == self.controller.engine)
            action.triggered.connect(lambda checked=False, e=engine: self.use_engine(e))
            group.addAction(action)
            engine_menu.addAction(action)
            self.engine_actions[engine] = action
        own_server = QAction("Your own llama-server…", self)
        own_server.triggered.connect(self._pick_server)
        engine_menu.addAction(own_server)
        view = self.menuBar().addMenu("&View")
        for entry in PAGES:
            item = self.nav.item(PAGE_NAMES.index(entry.name))
            assert item is not None  # the navigation lists every page
            action = QAction(item.icon(), entry.name, self, shortcut=QKeySequence(entry.shortcut))
            action.triggered.connect(lambda checked=False, name=entry.name: self.go_to(name))
            view.addAction(action)

    def show_page(self, name: str) -> None:
        self.nav.setCurrentRow(PAGE_NAMES.index(name))

    def current_page(self) -> str:
        return PAGE_NAMES[self.nav.currentRow()]

    def go_to(self, name: str) -> None:
        """Show a page from the keyboard and give it the focus (its own shortcuts work wherever the focus is,
        see page_shortcuts; a click in the page list keeps the focus there for the arrow keys)."""
        self.show_page(name)
        self.pages[name].setFocus(Qt.FocusReason.ShortcutFocusReason)

    def run_demo(self, pair: tuple[Path, Path] | None = None) -> None:
        """The Start page's first step: the demo pair (or ``pair``) into the Lab, a baseline, then a live run
        until Stop (what `spectune gui --demo` does at start)."""
        self.show_page("Lab")
        if self.lab.mode != "idle" or self._demo is not None and not self._demo.finished:
            return  # a run (or this demo) is under way: the Lab shows it
        self.controller.start()  # no-op when it runs
        self._demo = DemoRun(self, pair)
        self._demo.begin()

    def _download_from_start(self, candidate) -> None:
        self.show_page("Models")  # its Downloads tab shows the progress
        self._start_download = self.models.download_candidate(candidate)

    def _run_downloaded(self, result) -> None:
        """A pair the Start page asked for has arrived: into the Lab, a baseline, a live run. A broken file or
        a pair llama.cpp refuses stays on the Models page, which says why."""
        if result.name != self._start_download:
            return
        self._start_download = None
        target, draft = result.path("target"), result.path("draft")
        refused = result.compat is not None and not result.compat["compatible"]
        if target and draft and not refused and not any(f.gguf_error for f in result.files):
            self.run_demo((Path(target), Path(draft)))

    def save_charts(self, path: str | None = None) -> None:
        """File > Save charts (Ctrl+S): the charts of the page in view where it has its own (Tune, Serve),
        else the Lab's; nothing while those charts still show the sentence that stands in for them.
        ``path``: no file dialog (tests)."""
        name = self.current_page() if self.current_page() in ("Tune", "Serve") else "Lab"
        pages: dict[str, LabPage | TunePage | ServePage] = {"Lab": self.lab, "Tune": self.tune, "Serve": self.serve}
        page = pages[name]
        if not page.charts.stack.drawn:
            self.statusBar().showMessage(f"Nothing to save yet: the {name} page's charts are not drawn", 5000)
            return
        if path is None:
            suggested = str(Path.home() / f"spectune-{name.lower()}-charts.png")
            title = f"Save the {name} page's charts"
            path, _ = QFileDialog.getSaveFileName(self, title, suggested, "PNG images (*.png)")
        if not path:
            return
        page.save_charts(path)
        self.statusBar().showMessage(f"saved {path}", 5000)

    # -- status -----------------------------------------------------------
    def _show_state(self, state: str, message: str) -> None:
        self._engine_state = state
        colour = getattr(style.current(), STATE_COLOURS.get(state, "muted"))
        first_line = (message or "").splitlines()[0] if message else ""
        self.state_label.setText(f"{style.coloured(f'engine: {state}', colour)} {first_line}")
        self.state_label.setToolTip(message or state)
        if state != LOADING:
            self.load_bar.hide()
        self._update_title()

    def _show_pair(self) -> None:
        target, draft = self.session.target(), self.session.draft()
        self.pair_label.setText(pair_text(target, draft))
        self.pair_label.setToolTip("\n".join(str(p) for p in (target, draft) if p is not None) or "no model pair")
        self._update_title()

    def _update_title(self) -> None:
        """ "SpecTune — target + draft — ready": which pair and what the engine does, also from the task bar."""
        self.setWindowTitle(f"SpecTune — {self.pair_label.text()} — {self._engine_state}")

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
            self.restoreGeometry(geometry)  # Qt moves it back onto a screen that is there now
        else:
            self.resize(*first_size(self.screen().availableGeometry().size() if self.screen() else None))
        # a first start opens on the Start page; later starts where the user left
        page = self.settings.value("window/page", "Start")
        self.show_page(page if page in PAGE_NAMES else "Start")
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
        self.serve.shutdown()  # serving: the proxy and its llama-server stop
        self.hardware.shutdown()  # a CPU speed probe under way stops at its next step
        self.controller.shutdown()
        super().closeEvent(event)


__all__ = ["MainWindow", "PAGE_NAMES", "Qt"]
