"""What the GUI costs the engine, measured side by side in one run.

    QT_QPA_PLATFORM=offscreen .venv/bin/python bench/gui_overhead.py [--rounds 3] [--seconds 8]

Alternates, on the demo pair with the same settings: the engine worker driven
headless (engine.client, nothing painted) and the same worker driven by the
Lab page of the real main window (charts at 25 Hz, text at 4 Hz); which of the
two goes first alternates round by round. Prints the tokens/s of each (as the
worker measures its cycles), their ratio, the median of the rounds' ratios
(goal >= 0.95; each round's pair ran within seconds of each other, so a
machine whose speed drifts by the minute weighs on both alike), the chart redraw rate while running (goal >= 20 Hz), the p99
event-loop stall (goal < 50 ms), measured by a 5 ms probe timer's lateness,
and the GUI process's CPU use while running, as a share of one core.
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

from engine.client import EngineClient  # noqa: E402
from engine.demo import demo_pair  # noqa: E402
from engine.settings import LoadSettings, SamplingSettings, SpecSettings, to_dict  # noqa: E402

PROMPT = "def the value of the data is"
SPEC = SpecSettings("draft-simple", draft_n_max=4)
SAMPLING = SamplingSettings(temp=0.0)


def headless(load: LoadSettings, seconds: float, max_tokens: int) -> float:
    tokens, wall = 0, 0.0
    with EngineClient() as c:
        c.start()
        c.load(load)
        t_end = time.monotonic() + seconds
        while time.monotonic() < t_end:
            for ev in c.generate(PROMPT, max_tokens, spec=to_dict(SPEC), sampling=to_dict(SAMPLING)):
                if ev["event"] == "done":
                    tokens += ev["summary"]["tokens_generated"] - 1
                    wall += ev["summary"]["wall_ms"]
    return tokens * 1000.0 / wall


def with_gui(app: QApplication, load: LoadSettings, seconds: float,
             max_tokens: int) -> tuple[float, float, float, float]:
    from app.main_window import MainWindow

    ini = Path(os.environ.get("TMPDIR", "/tmp")) / f"spectune-bench-{os.getpid()}.ini"
    w = MainWindow(settings=QSettings(str(ini), QSettings.Format.IniFormat))
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
    results: list[dict] = []
    w.lab.runFinished.connect(lambda ev: results.append(ev["summary"]))
    stalls: list[float] = []
    probe_clock = QElapsedTimer()
    probe = QTimer()
    probe.setInterval(5)

    def on_probe() -> None:
        if probe_clock.isValid():
            stalls.append(max(0.0, probe_clock.nsecsElapsed() / 1e6 - 5.0))
        probe_clock.restart()
    probe.timeout.connect(on_probe)

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

    w.controller.start()
    wait(lambda: w.controller.hello_info is not None, 300)
    w.lab.start()
    wait(lambda: w.lab.live.cycles > 0, 300)
    frames0 = w.lab.charts.frames_painted
    probe.start()
    t0, cpu0 = time.monotonic(), time.process_time()
    wait(lambda: False, seconds)
    elapsed = time.monotonic() - t0
    cpu_share = (time.process_time() - cpu0) / elapsed
    frames = w.lab.charts.frames_painted - frames0
    probe.stop()
    w.lab.stop()
    wait(lambda: w.lab.mode == "idle", 60)
    w.close()
    app.processEvents()
    tokens = sum(s["tokens_generated"] - 1 for s in results)
    wall = sum(s["wall_ms"] for s in results)
    stalls.sort()
    p99 = stalls[int(0.99 * (len(stalls) - 1))] if stalls else 0.0
    return tokens * 1000.0 / wall if wall else 0.0, frames / elapsed, p99, cpu_share


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--threads", type=int, default=0, help="engine CPU threads (0: the Lab's default)")
    a = ap.parse_args()
    app = QApplication.instance() or QApplication([])
    target, draft = demo_pair()
    load = LoadSettings(target, draft, ctx=4096, threads=a.threads)
    head, gui, rates, p99s, cpus = [], [], [], [], []
    for r in range(a.rounds):
        if r % 2 == 0:
            head.append(headless(load, a.seconds, a.max_tokens))
        tps, rate, p99, cpu = with_gui(app, load, a.seconds, a.max_tokens)
        if r % 2 == 1:
            head.append(headless(load, a.seconds, a.max_tokens))
        gui.append(tps)
        rates.append(rate)
        p99s.append(p99)
        cpus.append(cpu)
        print(f"round {r + 1}: headless {head[-1]:.1f} tok/s, with GUI {tps:.1f} tok/s, ratio {tps / head[-1]:.3f}, "
              f"redraw {rate:.1f} Hz, "
              f"stall p99 {p99:.1f} ms, GUI CPU {cpu:.2f} core", flush=True)
    h, g = statistics.median(head), statistics.median(gui)
    ratio = statistics.median(x / y for x, y in zip(gui, head))
    print(f"\nheadless {h:.1f} tok/s, with GUI {g:.1f} tok/s (medians), ratio {ratio:.3f} "
          f"(median of the rounds' ratios; goal >= 0.95)")
    print(f"chart redraw {statistics.median(rates):.1f} Hz (goal >= 20), event-loop stall p99 "
          f"{statistics.median(p99s):.1f} ms (goal < 50), GUI process CPU {statistics.median(cpus):.2f} of a core")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
