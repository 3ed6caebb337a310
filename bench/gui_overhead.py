"""What the GUI costs the engine, measured side by side in one run.

    QT_QPA_PLATFORM=offscreen .venv/bin/python bench/gui_overhead.py [--pairs 12] [--slice 6] [--threads 1]

Two engine workers hold the demo pair at once: one driven headless
(engine.runtime.client, nothing painted), one driven by the Lab page of the real main
window (charts at 25 Hz, text at 4 Hz). They take turns in slices of a few
seconds, in the order H G G H H G ..., so each pair of slices runs within
seconds of each other and a machine whose speed drifts by the minute (this
VM's does, by 20 % and more) weighs on both alike. While the headless worker
generates, the GUI's event loop is not even running; while the Lab runs, the
headless worker waits idle.

Prints, per pair of slices and in all: the tokens/s of each (as the worker
measures its runs), their ratio, the median of the pairs' ratios (goal >=
0.95), the chart redraw rate while running (goal >= 20 Hz), the p99 event-loop
stall (goal < 50 ms), measured by a 5 ms probe timer's lateness, and the GUI
process's CPU use while the Lab runs, as a share of one core. ``--page`` runs
the Lab with another page in view (its charts unpainted), to tell painting
from the rest.

Each GUI slice is a fresh Lab run, so its charts hold about a thousand cycles
by the end rather than a long session's 2048; past 400 cycles both are drawn
as at most 400 points, so a frame costs about the same.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from PySide6.QtCore import QElapsedTimer, QEventLoop, QSettings, QTimer  # noqa: E402
from PySide6.QtWidgets import QApplication  # noqa: E402

from app.main_window import PAGE_NAMES  # noqa: E402
from engine.core.settings import LoadSettings, SamplingSettings, SpecSettings, to_dict  # noqa: E402
from engine.measure.demo import demo_pair  # noqa: E402
from engine.runtime.client import EngineClient  # noqa: E402

PROMPT = "def the value of the data is"
SPEC = SpecSettings("draft-simple", draft_n_max=4)
SAMPLING = SamplingSettings(temp=0.0)


def wait(cond, timeout_s: float) -> None:
    """Run Qt's own event loop (as app.exec() does in the app) until cond() or the timeout;
    a polling loop here would be the harness's CPU use, charged to the GUI."""
    if cond():
        return
    loop = QEventLoop()
    check = QTimer()
    check.setInterval(20)
    check.timeout.connect(lambda: loop.quit() if cond() else None)
    QTimer.singleShot(int(timeout_s * 1000), loop.quit)
    check.start()
    loop.exec()
    check.stop()


class Headless:
    """The engine worker alone, its runs back to back."""

    def __init__(self, load: LoadSettings, max_tokens: int):
        self.client = EngineClient()
        self.client.start()
        self.client.load(load)
        self.max_tokens = max_tokens

    def slice(self, seconds: float) -> float:
        tokens, wall = 0, 0.0
        t_end = time.monotonic() + seconds
        while time.monotonic() < t_end:
            for ev in self.client.generate(PROMPT, self.max_tokens, spec=to_dict(SPEC), sampling=to_dict(SAMPLING)):
                if ev["event"] == "done":
                    tokens += ev["summary"]["tokens_generated"] - 1
                    wall += ev["summary"]["wall_ms"]
        return tokens * 1000.0 / wall

    def close(self) -> None:
        self.client.close()


class WithGui:
    """The main window's Lab page running the same settings on a worker of its own."""

    def __init__(self, load: LoadSettings, max_tokens: int, page: str):
        from app.main_window import MainWindow

        ini = Path(os.environ.get("TMPDIR", "/tmp")) / f"spectune-bench-{os.getpid()}.ini"
        self.w = w = MainWindow(settings=QSettings(str(ini), QSettings.Format.IniFormat))
        self.page = page
        w.resize(1400, 900)
        w.show()
        w.show_page("Lab")
        c = w.lab.controls
        c.target.set_path(load.target)
        c.draft.set_path(load.draft)
        c.ctx.setValue(load.ctx)
        c.threads.setValue(load.threads)
        c.method.setCurrentText(SPEC.spec_type)
        c.k.setValue(SPEC.draft_n_max)
        c.workload.setCurrentText("custom prompt")
        c.prompt.setPlainText(PROMPT)
        c.max_tokens.setValue(max_tokens)
        self.results: list[dict] = []
        w.lab.runFinished.connect(lambda ev: self.results.append(ev["summary"]))
        self.stalls: list[float] = []
        self._clock = QElapsedTimer()
        self.probe = QTimer()
        self.probe.setInterval(5)
        self.probe.timeout.connect(self._on_probe)
        w.controller.start()
        wait(lambda: w.controller.hello_info is not None, 300)
        self.slice(1.0)  # loads the pair; not counted

    def _on_probe(self) -> None:
        if self._clock.isValid():
            self.stalls.append(max(0.0, self._clock.nsecsElapsed() / 1e6 - 5.0))
        self._clock.restart()

    def slice(self, seconds: float) -> tuple[float, float, float, float]:
        w = self.w
        w.show_page("Lab")
        self.results.clear()
        self.stalls.clear()
        w.lab.start()
        wait(lambda: w.lab.live.cycles > 0, 300)
        w.show_page(self.page)  # another page: the Lab runs on, its charts unpainted
        frames0 = w.lab.charts.frames_painted
        self._clock.invalidate()
        self.probe.start()
        t0, cpu0 = time.monotonic(), time.process_time()
        wait(lambda: False, seconds)
        elapsed = time.monotonic() - t0
        cpu_share = (time.process_time() - cpu0) / elapsed
        frames = w.lab.charts.frames_painted - frames0
        self.probe.stop()
        w.lab.stop()
        wait(lambda: w.lab.mode == "idle", 60)
        tokens = sum(s["tokens_generated"] - 1 for s in self.results)
        wall = sum(s["wall_ms"] for s in self.results)
        stalls = sorted(self.stalls)
        p99 = stalls[int(0.99 * (len(stalls) - 1))] if stalls else 0.0
        return tokens * 1000.0 / wall if wall else 0.0, frames / elapsed, p99, cpu_share

    def close(self) -> None:
        self.w.close()
        QApplication.processEvents()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=12, help="pairs of slices (headless, GUI)")
    ap.add_argument("--slice", type=float, default=6.0, help="seconds per slice")
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--threads", type=int, default=0, help="engine CPU threads (0: the Lab's default)")
    ap.add_argument("--page", default="Lab", choices=PAGE_NAMES, help="the page in view while the Lab runs")
    a = ap.parse_args()
    app = QApplication.instance() or QApplication([])
    target, draft = demo_pair()
    load = LoadSettings(target, draft, ctx=4096, threads=a.threads)
    headless = Headless(load, a.max_tokens)
    gui = WithGui(load, a.max_tokens, a.page)
    heads, guis, ratios, rates, p99s, cpus = [], [], [], [], [], []
    try:
        for r in range(a.pairs):
            if r % 2 == 0:
                h = headless.slice(a.slice)
                g, rate, p99, cpu = gui.slice(a.slice)
            else:
                g, rate, p99, cpu = gui.slice(a.slice)
                h = headless.slice(a.slice)
            heads.append(h)
            guis.append(g)
            ratios.append(g / h)
            rates.append(rate)
            p99s.append(p99)
            cpus.append(cpu)
            print(
                f"pair {r + 1}: headless {h:.1f} tok/s, with GUI {g:.1f} tok/s, ratio {g / h:.3f}, "
                f"redraw {rate:.1f} Hz, stall p99 {p99:.1f} ms, GUI CPU {cpu:.2f} core",
                flush=True,
            )
    finally:
        gui.close()
        headless.close()
        app.processEvents()
    q1, _, q3 = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else (ratios[0],) * 3
    print(
        f"\nheadless {statistics.median(heads):.1f} tok/s, with GUI {statistics.median(guis):.1f} tok/s (medians); "
        f"ratio {statistics.median(ratios):.3f} (median of {len(ratios)} pairs' ratios, quartiles {q1:.3f}-{q3:.3f}; "
        f"goal >= 0.95), mean of all slices {statistics.mean(guis) / statistics.mean(heads):.3f}"
    )
    print(
        f"chart redraw {statistics.median(rates):.1f} Hz (goal >= 20), event-loop stall p99 "
        f"{statistics.median(p99s):.1f} ms (goal < 50), GUI process CPU {statistics.median(cpus):.2f} of a core"
        + (f" (page in view: {a.page})" if a.page != "Lab" else "")
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
