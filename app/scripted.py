"""A short scripted session on the demo pair, for --selftest and --screenshot: load the pair, measure a
baseline, run with speculation, move K once while it runs, stop, and (optionally) run a short auto-tune and a
validation, and save a PNG of every page. The demo a user starts is app.demo_run."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication

from app.demo_run import set_demo_knobs
from app.page_list import PAGE_NAMES


class ScriptedSession:
    def __init__(
        self,
        window,
        screenshot_dir: str | None = None,
        exit_when_done: bool = True,
        run_seconds: float = 4.0,
    ):
        self.w = window
        self.lab = window.lab  # its runs: baseline, start, stop
        self.session = window.session
        self.dir = Path(screenshot_dir) if screenshot_dir else None
        self.exit_when_done = exit_when_done
        self.run_ms = int(run_seconds * 1000)
        self.ok = False
        self._step = "wait-engine"

    def begin(self) -> None:
        if self.dir:
            self.w.models.start_background_work()  # the library scanned and the catalog ranked by the pictures
        self.w.models.use_demo_pair()
        self.w.show_page("Lab")
        set_demo_knobs(self.session)
        self.w.controller.hello.connect(self._on_hello)
        self.lab.runFinished.connect(lambda ev: None)
        self.w.controller.failed.connect(self._on_failed)
        QTimer.singleShot(300_000, lambda: self._finish("timed out"))
        if self.w.controller.hello_info is not None:
            self._on_hello(self.w.controller.hello_info)

    def _set_spec(self, **knobs) -> None:
        self.session.set_spec_settings(replace(self.session.spec_settings(), **knobs))

    def _on_failed(self, ev: dict) -> None:
        if ev.get("kind") != "busy":
            self._finish(f"engine error: {ev.get('message')}")

    def _on_hello(self, ev: dict) -> None:
        if self._step != "wait-engine":
            return
        self._step = "baseline"
        self.lab.baseline()
        self._poll(self._baseline_done)

    def _poll(self, condition, interval: int = 100) -> None:
        def check() -> None:
            if condition():
                return
            QTimer.singleShot(interval, check)

        QTimer.singleShot(interval, check)

    def _baseline_done(self) -> bool:
        if self.lab.mode != "idle" or self.lab.live.baseline_tps is None:
            return False
        self._step = "run"
        self.lab.start()
        QTimer.singleShot(self.run_ms // 2, lambda: self._set_spec(draft_n_max=2))
        QTimer.singleShot(self.run_ms, self._stop)
        return True

    def _stop(self) -> None:
        self.lab.stop()
        self._poll(self._stopped)

    def _stopped(self) -> bool:
        if self.lab.mode != "idle":
            return False
        self.ok = self.lab.live.cycles > 0
        if self.dir:
            self._tune()
        else:
            self._finish(None if self.ok else "no cycles arrived")
        return True

    def _tune(self) -> None:
        """A small tune so the Tune page's picture has a table and charts (a failure shows as its error)."""
        tune = self.w.tune
        if tune.workload.findText("code-completion") >= 0:
            tune.workload.setCurrentText("code-completion")
        tune.max_prompts.setValue(3)
        tune.max_tokens.setValue(32)
        tune.budget.setValue(15)
        tune.k_max.setValue(8)
        self.w.show_page("Tune")
        tune.start()

        def tuned() -> bool:
            if tune.mode != "idle":
                return False
            self._validate()
            return True

        self._poll(tuned, interval=200)

    def _validate(self) -> None:
        """A short validation so the Export page's picture shows a report (or its error)."""
        export = self.w.export
        export.max_tokens.setValue(64)
        self.w.show_page("Export")
        export.start_validation()

        def validated() -> bool:
            if export.validating:
                return False
            self._shoot(0)
            return True

        self._poll(validated, interval=200)

    def _shoot(self, i: int) -> None:
        if i >= len(PAGE_NAMES):
            self.w.show_page("Lab")
            self._finish(None if self.ok else "no cycles arrived")
            return
        name = PAGE_NAMES[i]
        self.w.show_page(name)

        def grab() -> None:
            shots = self.dir
            assert shots is not None  # only a run with a screenshot folder takes pictures (_stopped)
            shots.mkdir(parents=True, exist_ok=True)
            # 0-start.png, 1-hardware.png, ...: the names docs/ had before the Start page came first
            self.w.grab().save(str(shots / f"{i}-{name.lower()}.png"))
            self._shoot(i + 1)

        QTimer.singleShot(400, grab)

    def _finish(self, problem: str | None) -> None:
        if self._step == "done":
            return
        self._step = "done"
        s = self.lab.live
        print(
            f"selftest: {'ok' if problem is None else 'FAILED: ' + problem}; cycles {s.cycles}, tokens {s.tokens}, "
            f"acceptance {s.accepted}/{s.drafted}, baseline {s.baseline_tps}",
            file=sys.stderr,
        )
        if self.exit_when_done:
            self.w.close()
            app = QApplication.instance()
            assert app is not None  # the window exists, so the application does
            app.exit(0 if problem is None else 1)
