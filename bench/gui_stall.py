"""How long the GUI's event loop stalls while the app does slow work, on real models.

    QT_QPA_PLATFORM=offscreen .venv/bin/python bench/gui_stall.py [--rounds 3] [--save]

The real main window, offscreen, with a 5 ms probe timer whose lateness is the stall a user feels as a
frozen window (a knob that does not follow the mouse, a chart that stops). Three kinds of slow work, each
timed over --rounds rounds:

  load    the Lab loads the real Qwen2.5-Coder 1.5B + 0.5B pair (1.6 GB, a 151936-token vocabulary in each
          header): the pre-load check and the memory plan, then the engine worker's load, until the Lab
          says it is loaded; the pair is unloaded between rounds
  scan    the Models page's library scans a Hugging Face cache that holds the real files (linked into a
          scratch folder laid out as models--ORG--NAME/snapshots/REV/), until its table is filled; its
          cache of what it read is deleted first, so each round reads both headers
  rank    the Models page ranks the catalog for this machine, until the Start page has its choices

Goals (issue 30), per kind of work: p99 stall < 50 ms and the worst < 250 ms; the exit status is 1 when
one is missed. Stalls come from the work done on the GUI thread and from background threads holding
Python's GIL, so the figures tell both apart only by where the work runs. The real models come from
`python -m testmodels.real fetch` (the README's test command runs it).
"""

from __future__ import annotations

import argparse
import collections
import os
import platform
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from PySide6.QtCore import QElapsedTimer, QEventLoop, QSettings, QTimer  # noqa: E402
from PySide6.QtWidgets import QApplication  # noqa: E402

from bench.paired import append_result  # noqa: E402
from testmodels.real import REAL_PAIR, RealModelError, cached_model  # noqa: E402

PROBE_MS = 5
GOAL_P99_MS = 50.0
GOAL_WORST_MS = 250.0


class StallProbe:
    """A timer every PROBE_MS; each tick's lateness beyond that is a stall of the event loop."""

    def __init__(self) -> None:
        self.stalls: list[float] = []
        self._clock = QElapsedTimer()
        self._timer = QTimer()
        self._timer.setInterval(PROBE_MS)
        self._timer.timeout.connect(self._tick)
        self.last_tick, self.active = time.monotonic(), False

    def _tick(self) -> None:
        self.stalls.append(max(0.0, self._clock.nsecsElapsed() / 1e6 - PROBE_MS))
        self._clock.restart()
        self.last_tick = time.monotonic()

    def start(self) -> None:
        self.stalls.clear()
        self._clock.start()
        self._timer.start()
        self.last_tick, self.active = time.monotonic(), True

    def stop(self) -> list[float]:
        self._timer.stop()
        self.active = False
        return list(self.stalls)


class StallTracer(threading.Thread):
    """--trace MS: while the probe has not ticked for MS, what every thread is running, sampled every 10 ms
    and counted by its innermost frames: where a stall comes from (the GUI thread's own work, or another
    thread that keeps the GIL). Python code only: a C call that holds the GIL shows as the line that made it."""

    def __init__(self, probe: StallProbe, after_ms: float) -> None:
        super().__init__(daemon=True)
        self.probe, self.after_s = probe, after_ms / 1000
        self.samples: collections.Counter[str] = collections.Counter()
        self.main_id = threading.main_thread().ident
        self.running = True

    def run(self) -> None:
        while self.running:
            time.sleep(0.01)
            if not self.probe.active or time.monotonic() - self.probe.last_tick < self.after_s:
                continue
            for ident, frame in sys._current_frames().items():
                if ident == self.ident:
                    continue
                where = traceback.extract_stack(frame)[-4:]
                name = "GUI" if ident == self.main_id else f"thread {ident % 10000}"
                self.samples[
                    name + ": " + " <- ".join(f"{Path(f.filename).name}:{f.lineno} {f.name}" for f in reversed(where))
                ] += 1

    def report(self, out) -> None:
        out("# stall trace: samples (10 ms each) per innermost frames, while the GUI had not ticked")
        for where, n in self.samples.most_common(25):
            out(f"#   {n:4d}  {where}")


def run_until(cond, timeout_s: float) -> float:
    """Qt's own event loop (as app.exec() runs it) until cond() holds; the seconds it took."""
    started = time.monotonic()
    loop = QEventLoop()
    check = QTimer()
    check.setInterval(10)
    check.timeout.connect(lambda: loop.quit() if cond() or time.monotonic() - started > timeout_s else None)
    check.start()
    if not cond():
        loop.exec()
    check.stop()
    if not cond():
        raise TimeoutError(f"not done within {timeout_s:.0f} s")
    return time.monotonic() - started


def hub_cache(root: Path, target: Path, draft: Path) -> Path:
    """A Hugging Face cache in ``root`` holding the two files, linked rather than copied."""
    for repo, path in (
        ("Qwen--Qwen2.5-Coder-1.5B-Instruct-GGUF", target),
        ("Qwen--Qwen2.5-Coder-0.5B-Instruct-GGUF", draft),
    ):
        snap = root / f"models--{repo}" / "snapshots" / "0123456789abcdef"
        snap.mkdir(parents=True, exist_ok=True)
        (snap / path.name).symlink_to(path)
    return root


def time_load(window, target: Path, draft: Path) -> float:
    """The Lab loads the pair (its check, its plan, the worker's load); unloaded again after, untimed."""
    window.show_page("Lab")
    window.session.set_pair(target, draft)
    lab, controller = window.lab, window.controller
    lab.load()
    took = run_until(lambda: lab.mode == "idle" and controller.loaded_info is not None, 300)
    controller.unload()
    run_until(lambda: controller.loaded_info is None, 60)
    return took


def time_scan(window, target: Path, draft: Path) -> float:
    """The Models page's library scans its places, the hub cache with the real files among them. The
    library keeps what it read of each file (library-cache.json) and a rescan of an unchanged library
    opens no file: the cache goes first, so every round reads both real headers."""
    from engine.models.library import cache_path

    window.show_page("Models")
    lib = window.models.library
    run_until(lambda: not lib.scanning, 120)
    cache_path().unlink(missing_ok=True)
    lib.rescan()
    return run_until(lambda: not lib.scanning and lib.library is not None, 120)


def time_rank(window, target: Path, draft: Path) -> float:
    """The Models page ranks the catalog for this machine (the Start page shows its choices)."""
    ranked: list = []
    window.models.ranked.connect(ranked.append)
    window.models.rank()
    took = run_until(lambda: bool(ranked), 300)
    window.models.ranked.disconnect(ranked.append)
    return took


def percentile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[int(q * (len(xs) - 1))] if xs else 0.0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--save", action="store_true", help="also append to bench/results/gui_stall.txt")
    ap.add_argument("--trace", type=float, metavar="MS", help="sample every thread's stack during stalls over MS")
    ap.add_argument("--only", choices=("load", "scan", "rank"), action="append", help="time this work only")
    a = ap.parse_args()
    try:
        target, draft = (cached_model(k) for k in REAL_PAIR)
    except RealModelError as exc:
        print(f"gui_stall: {exc}; run `python -m testmodels.real fetch` first", file=sys.stderr)
        return 2
    lines: list[str] = []

    def out(s: str = "") -> None:
        print(s, flush=True)
        lines.append(s)

    scratch = Path(tempfile.mkdtemp(prefix="spectune-stall-"))
    os.environ["HF_HUB_CACHE"] = str(hub_cache(scratch / "hub", target, draft))
    os.environ["SPECTUNE_CONFIG_DIR"] = str(scratch / "config")
    os.environ["SPECTUNE_DATA_DIR"] = str(scratch / "data")  # the library cache this bench deletes
    app = QApplication.instance() or QApplication(sys.argv[:1])
    from app.main_window import MainWindow

    window = MainWindow(settings=QSettings(str(scratch / "bench.ini"), QSettings.Format.IniFormat))
    window.resize(1600, 1000)
    window.show()
    window.controller.start()
    run_until(lambda: window.controller.hello_info is not None, 120)
    probe = StallProbe()
    out(f"# gui_stall  {time.strftime('%Y-%m-%d %H:%M')}  {platform.machine()}")
    out(f"# {a.rounds} rounds; a {PROBE_MS} ms probe timer's lateness; real pair {target.name} + {draft.name}")
    work = {"load": time_load, "scan": time_scan, "rank": time_rank}
    work = {k: v for k, v in work.items() if not a.only or k in a.only}
    tracer = StallTracer(probe, a.trace) if a.trace else None
    if tracer is not None:
        tracer.start()
    results: dict[str, list[float]] = {k: [] for k in work}
    seconds: dict[str, list[float]] = {k: [] for k in work}
    for _ in range(a.rounds):
        for kind, timed in work.items():
            probe.start()
            seconds[kind].append(timed(window, target, draft))
            results[kind] += probe.stop()
    missed = False
    head = f"{'work':<6} {'seconds':>8} {'ticks':>6} {'p50 ms':>7} {'p99 ms':>7} {'worst ms':>9}"
    out(head + "  goal p99 < 50, worst < 250")
    for kind, stalls in results.items():
        p99, worst = percentile(stalls, 0.99), max(stalls, default=0.0)
        ok = p99 < GOAL_P99_MS and worst < GOAL_WORST_MS
        missed |= not ok
        mean_s, p50 = sum(seconds[kind]) / len(seconds[kind]), percentile(stalls, 0.5)
        row = f"{kind:<6} {mean_s:>8.2f} {len(stalls):>6} {p50:>7.1f} {p99:>7.1f} {worst:>9.1f}"
        out(row + f"  {'ok' if ok else 'MISSED'}")
    if tracer is not None:
        tracer.running = False
        tracer.report(out)
    window.close()
    app.processEvents()
    if a.save:
        append_result("gui_stall.txt", lines)
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
