"""The Models page: what is on this machine, what to get, and the session's pair checked.

Three tabs, each in its own module and each a view over engine functions the CLI has too:
  Library      engine.models.library.scan (spectune models): the GGUF files found, their pairs
  Downloads    engine.models.downloads.pull (spectune pull) of the catalog's presets or REPO:FILE
  Recommended  engine.planning.advice.recommend (spectune recommend / presets) for the free VRAM, else RAM
Below them, the check of the session's pair (app.session, set on the Lab page or from here) before
anything is loaded: engine.planning.advice.preflight, with llama.cpp's vocabulary rule and a memory plan
that counts both models against the free VRAM the Hardware page sees, or the free RAM.

Disks, the catalog and the hub are only touched in background threads, and only once the
page is first shown; closing the window stops them (see shutdown).
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import QEvent, QObject, Signal
from PySide6.QtWidgets import QGroupBox, QHBoxLayout, QLabel, QTabWidget, QVBoxLayout, QWidget

from app.background import BackgroundJob
from app.engine_controller import EngineController
from app.header_reads import header_reads
from app.pages.models.library import LibraryPanel
from app.pages.models.presets import PresetsPanel
from app.pages.models.recommend import RecommendPanel
from app.session import LabSession
from app.widgets.forms import push_button
from app.widgets.style import ERROR, MUTED, OK, coloured, error_text, ok_text
from engine.core.units import GIB
from engine.models.draft_heads import target_refusal
from engine.planning.advice.recommend import CatalogView, rank_catalog

_FROM_HARDWARE = object()


def _methods_text(methods) -> str:
    """The methods with a drafter this pair can run; the n-gram ones run on every pair (the Lab says why the
    others cannot, in each greyed-out entry)."""
    runs = [m for m, v in methods.items() if v.runs and not m.startswith("ngram-")]
    if "draft-mtp" in runs:
        runs[runs.index("draft-mtp")] = "draft-mtp (the target's own MTP head: no separate draft needed)"
    if runs:
        return "methods: " + ", ".join(runs) + ", and the n-gram methods"
    return "methods: the n-gram methods only"


class ModelsPage(QWidget):
    ranked = Signal(object)  # a CatalogView after each ranking pass (the Start page shows its best pairs)

    def __init__(
        self,
        session: LabSession,
        hardware=None,
        parent: QWidget | None = None,
        *,
        controller: EngineController | None = None,
        catalog=None,
        sources=None,
        download_options: dict | None = None,
        nvml: Any = _FROM_HARDWARE,
    ):
        """hardware: the Hardware page, whose report the pair check plans against; controller: the Lab's engine,
        whose loaded pair is freed before a load (so its memory counts as free); catalog: an
        engine.models.catalog.Catalog instead of the shipped one; sources: the library's places
        (engine.models.library.Source list) instead of the usual ones; download_options: keyword arguments for
        engine.models.downloads.download_files; nvml: the NVML module for the budget (default: the Hardware page's)."""
        super().__init__(parent)
        self.session = session
        self.hardware = hardware
        self.controller = controller
        self.nvml = getattr(hardware, "_nvml", None) if nvml is _FROM_HARDWARE else nvml
        self._catalog = catalog
        self.catalog_view: CatalogView | None = None
        self.rank_job: BackgroundJob | None = None
        self.speeds_job: BackgroundJob | None = None
        self.check_job: BackgroundJob | None = None
        self._checks = 0  # pair checks asked for: a result arriving after a newer request is dropped
        self._started = False
        self._rank_again = False
        self._hooked: QObject | None = None

        col = QVBoxLayout(self)
        col.addWidget(QLabel("<h3>Models</h3>"))
        self.tabs = QTabWidget()
        self.library = LibraryPanel(session, sources)
        self.presets = PresetsPanel(session, download_options)
        self.recommend = RecommendPanel()
        self.tabs.addTab(self.library, "Library")
        self.tabs.addTab(self.presets, "Downloads")
        self.tabs.addTab(self.recommend, "Recommended")
        col.addWidget(self.tabs, 1)
        self.library.scanned.connect(self.presets.set_library)
        self.library.scanned.connect(self.predict_pairs)
        self.library.downloadRequested.connect(lambda: self.tabs.setCurrentWidget(self.presets))
        self.presets.downloaded.connect(lambda result: self.library.rescan())
        self.recommend.refreshRequested.connect(self.rank)
        self.recommend.downloadRequested.connect(self.download_candidate)

        check = QGroupBox("The Lab's pair, checked before loading")
        c_col = QVBoxLayout(check)
        self.compat_badge = _Line("choose a target and a draft in the Lab")
        self.methods_badge = _Line("")  # which draft methods the pair can run (engine.models.draft_heads)
        self.fit_badge = _Line("")
        self.plan_label = _Line("")
        for w in (self.compat_badge, self.methods_badge, self.fit_badge, self.plan_label):
            w.setWordWrap(True)
            c_col.addWidget(w)
        buttons = QHBoxLayout()
        again = push_button("Check again", self.check_pair)
        demo = push_button("Use the demo pair in the Lab", self.use_demo_pair)
        buttons.addWidget(again)
        buttons.addWidget(demo)
        buttons.addStretch(1)
        c_col.addLayout(buttons)
        col.addWidget(check)
        session.pairChanged.connect(self.check_pair)
        header_reads().ready.connect(self.check_pair)
        session.loadChanged.connect(self.check_pair)  # the context and the GPU layers change the plan
        self.check_pair()

    # -- background work ------------------------------------------------------------------
    def showEvent(self, event) -> None:
        super().showEvent(event)
        self.start_background_work()

    def start_background_work(self) -> None:
        """The first look at the page (or at the Start page, which shows the ranking): scan and rank."""
        if not self._started:
            self._started = True
            self.library.rescan()
            self.rank()
        self._hook_close()

    @property
    def background_busy(self) -> bool:
        """A scan, a ranking or the library's speed predictions still running."""
        jobs = (self.rank_job, self.speeds_job, self.check_job)
        return self.library.scanning or any(j is not None and j.running for j in jobs)

    def rank(self) -> None:
        if self.rank_job is not None and self.rank_job.running:
            self._rank_again = True  # asked with another context while ranking: once more when done
            return
        self._rank_again = False
        self._hook_close()
        catalog = self.catalog_view.catalog if self.catalog_view is not None else self._catalog
        nvml, ctx, floor = self.nvml, self.recommend.ctx.value(), float(self.recommend.floor.value())
        workload, gpu = self.recommend.workload(), self.recommend.gpu()
        cache = getattr(self.hardware, "probe_cache", None)
        self.recommend.set_busy()
        self.rank_job = BackgroundJob(
            "models-recommend",
            lambda report: rank_catalog(catalog, nvml, ctx, floor, cache, workload, apart=True, gpu=gpu),
            self,
            what="the Models page ranking the catalog for this machine",
        )
        self.rank_job.on(done=self._ranked, failed=self._rank_failed).start()

    def predict_pairs(self, lib) -> None:
        """The library's pairs predicted on this machine's device (the GPU, else the CPU as last measured or
        assumed), in the background: a header read per file."""
        if not lib.pairs:
            return
        from engine.measure.pair_speed import predict_pairs
        from engine.planning.hardware import probe
        from engine.planning.speed.device_speed import local_device

        nvml, cache = self.nvml, getattr(self.hardware, "probe_cache", None)
        pairs = [(p["target"], p["draft"]) for p in lib.pairs]

        def work(report):
            return lib, predict_pairs(pairs, local_device(probe(nvml), cache))

        self.speeds_job = BackgroundJob("models-pair-speeds", work, self, what="the Models page predicting your pairs")
        self.speeds_job.on(done=self._pair_speeds, failed=lambda exc: None).start()

    def _pair_speeds(self, result) -> None:
        lib, speeds = result
        if lib is self.library.library:  # not a library scanned again since
            self.library.set_pair_speeds(speeds)

    def _ranked(self, view: CatalogView) -> None:
        self.catalog_view = view
        self.ranked.emit(view)
        self.presets.set_catalog(view.catalog, view.fits, view.budget, view.ctx)
        if view.recommendation is not None:
            self.recommend.set_result(view.recommendation)
        else:
            self.recommend.set_error(view.error)
        if self._rank_again:
            self.rank()

    def _rank_failed(self, exc: BaseException) -> None:
        self.recommend.set_error(str(exc) or type(exc).__name__)
        self.presets.status.setText(f"{error_text('the catalog cannot be read:')} {exc}")
        if self._rank_again:
            self.rank()

    def download_candidate(self, c) -> str:
        """A recommended pair: its preset's row when it has one, else a row of its own; then Download.
        Returns the row's name (its PullResult carries it when the download ends)."""
        if c.preset and self.presets.row(c.preset) is not None:
            name = c.preset
        else:
            name = f"{c.target.model}-{c.target.quant}+{c.draft.model}-{c.draft.quant}".lower()
            self.presets.add_pair(name, c, f"recommended: {c.label}")
        self.tabs.setCurrentWidget(self.presets)
        self.presets.download(name)
        return name

    def _hook_close(self) -> None:
        """MainWindow closes; this page hears it through an event filter and stops its threads."""
        window = self.window()
        if window is not self._hooked:
            if self._hooked is not None:
                self._hooked.removeEventFilter(self)
            window.installEventFilter(self)
            self._hooked = window

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if watched is self._hooked and event.type() == QEvent.Type.Close:
            self.shutdown()
        return False

    def shutdown(self) -> None:
        """Cancel downloads (their partial files stay for a resume) and wait for every thread."""
        self._rank_again = False
        self.presets.shutdown()
        self.library.shutdown()
        for job in (self.rank_job, self.speeds_job, self.check_job):
            if job is not None:
                job.stop(timeout_s=10.0)

    def use_demo_pair(self) -> None:
        self.session.use_demo_pair()

    # -- the pair check ---------------------------------------------------
    def check_pair(self) -> None:
        self._checks += 1  # whatever a check still running finds, it is no longer for this pair
        asked = self._checks
        target, draft = self.session.target(), self.session.draft()
        if target is None or not target.is_file():
            self.compat_badge.setText("choose a target model in the Lab")
            self.methods_badge.setText("")
            self.fit_badge.setText("")
            self.plan_label.setText("")
            return
        if not header_reads().warm(target, draft):  # read off the GUI thread; this runs again when read
            self.compat_badge.setText("reading the files' headers…")
            return
        from engine.planning.advice.preflight import preflight
        from engine.planning.memory.budget import Budget

        report = self.hardware.report if self.hardware is not None else None
        lab_engine = self.controller.fit_context() if self.controller is not None else {}
        budget = Budget.from_report(report, **lab_engine)
        draft = draft if draft and draft.is_file() else None
        ctx, ngl = self.session.context(), self.session.gpu_layers()
        # the vocabulary rule and the memory plan in a thread (issue 30 #7): over a real pair's two
        # 151936-token vocabularies they held the GUI thread for up to 1.6 s
        self.check_job = BackgroundJob(
            "models-pair-check",
            lambda _: preflight(target, draft, ctx, budget, ngl=ngl, check_files=False),
            self,
        )
        self.check_job.on(
            done=lambda check: self._show_check(check) if asked == self._checks else None,
            failed=lambda exc: self._check_failed(exc) if asked == self._checks else None,
        ).start()

    def _check_failed(self, exc: BaseException) -> None:
        self.fit_badge.setText(error_text(f"the pair check failed: {exc}"))

    def _show_check(self, check) -> None:
        """The pre-load check's verdict in the badges: vocabularies, methods, the memory plan."""
        if check.target is None or target_refusal(check.target):  # unreadable, or a draft head: the reason says why
            self.compat_badge.setText(error_text(f"✗ {check.reasons[0].message}"))
            self.methods_badge.setText("")
            self.fit_badge.setText("")
            return
        self.methods_badge.setText(_methods_text(check.methods))
        if check.compat is None:
            self.compat_badge.setText("no draft model")
        elif check.compat["compatible"]:
            self.compat_badge.setText(ok_text("✓ compatible") + " (same vocabulary by llama.cpp's rule)")
        else:
            self.compat_badge.setText(error_text("✗ incompatible:") + " " + "; ".join(check.vocab_reasons))
        verdict = check.fit
        if verdict is None:
            self.fit_badge.setText(check.reasons[-1].message)
            return
        plan = verdict.plan
        colour = {True: OK, False: ERROR, None: MUTED}[verdict.fits]
        mark = {True: "✓", False: "✗", None: "?"}[verdict.fits]
        detail = ""
        if verdict.where == "VRAM":
            detail = f"; {plan.to_dict()['totals']['host_bytes'] / GIB:.2f} GiB in host memory"
        elif verdict.host_part:
            detail = (
                f"; the GPUs hold their {plan.to_dict()['totals']['vram_bytes'] / GIB:.2f} GiB, the RAM not the rest"
            )
        self.fit_badge.setText(coloured(f"{mark} {verdict.summary()}", colour) + detail)
        by_kind: dict[str, int] = {}
        for item in plan.items:
            key = f"{item.model} {item.kind}"
            by_kind[key] = by_kind.get(key, 0) + item.bytes
        self.plan_label.setText("plan: " + ", ".join(f"{k} {v / 2**20:.1f} MiB" for k, v in by_kind.items()))
        self.last_plan = plan


class _Line(QLabel):
    """A line of the pair check that takes no room while it has nothing to say (the library's pairs table
    above needs the height on a 720-pixel screen)."""

    def setText(self, text: str) -> None:  # noqa: N802 (Qt's name)
        super().setText(text)
        self.setVisible(bool(text))
