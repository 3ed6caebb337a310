"""A long live session: does memory stay flat, does anything crash or get lost?

    QT_QPA_PLATFORM=offscreen .venv/bin/python bench/soak.py [--minutes 60] [--knob-every 3] [--restart-every 120]
    .venv/bin/python bench/soak.py --serve [--minutes 30] [--warmup 120]   the proxy's soak (serve_soak below)

Runs the real main window on the demo pair, loops generations, moves K, the
method or the temperature every few seconds, and restarts the engine worker
now and then. Memory, each against a starting point fixed before the run:
  GUI     resident memory after a warm-up of exactly --warmup seconds (decided in advance, not
          moved by what the readings show) against the end (goal: growth under 5%); a reading
          20 s in is printed beside it, so the warm-up's own growth is in view too.
  worker  each worker process is measured over its own lifetime, from its first reading
          --worker-warmup seconds after it loaded the pair to its last just before the
          restart that ends it (goal: the largest growth under 5%): a restarted worker is a
          new process, and comparing two processes measures nothing.
It prints the number of crashes
seen other than the deliberate restarts (goal: 0), and whether every finished
run reached the history database (goal: none lost) and the History page
(which shows the newest 500). The history goes to a fresh temporary
SPECTUNE_DATA_DIR unless one is set, so the count is exact and the user's
own history is left alone.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
os.environ.setdefault("SPECTUNE_DATA_DIR", tempfile.mkdtemp(prefix="spectune-soak-"))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from PySide6.QtCore import QSettings  # noqa: E402
from PySide6.QtWidgets import QApplication  # noqa: E402

from engine.measure.demo import demo_pair  # noqa: E402


def rss_mib(pid: int | None) -> float:
    if pid is None:
        return 0.0
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return 0.0


def memory_detail(pid: int) -> str:
    """Anonymous against file-backed resident memory, and on glibc the heap's bytes in use: a heap
    that holds freed memory it cannot return (fragmentation) grows RSS without anything leaking."""
    fields = {}
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            key, _, rest = line.partition(":")
            if key in ("RssAnon", "RssFile", "RssShmem"):
                fields[key] = int(rest.split()[0]) / 1024.0
    except OSError:
        return ""
    text = ", ".join(f"{k[3:].lower()} {v:.1f}" for k, v in fields.items())
    if pid == os.getpid():
        heap = malloc_in_use_mib()
        if heap is not None:
            text += f", malloc in use {heap[0]:.1f} of {heap[1]:.1f}"
        text += f", Python blocks {sys.getallocatedblocks()}"
    return f" ({text})" if text else ""


def malloc_in_use_mib() -> tuple[float, float] | None:
    """(in use, obtained from the system) by glibc's malloc in this process, or None elsewhere."""
    import ctypes
    import ctypes.util

    class MallInfo2(ctypes.Structure):
        _fields_ = [
            (name, ctypes.c_size_t)
            for name in (
                "arena",
                "ordblks",
                "smblks",
                "hblks",
                "hblkhd",
                "usmblks",
                "fsmblks",
                "uordblks",
                "fordblks",
                "keepcost",
            )
        ]

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        fn = libc.mallinfo2
    except (OSError, AttributeError):
        return None
    fn.restype = MallInfo2
    m = fn()
    return (m.uordblks + m.hblkhd) / 2**20, (m.arena + m.hblkhd) / 2**20


def serve_soak(minutes: float, warmup: float, report_every: float) -> int:
    """--serve: the proxy under a long stream of requests (engine.serve.session on the demo pair, recording
    on): streamed batches of two clients, and every tenth request a client that hangs up mid-answer and one
    that sends a malformed body. The proxy lives in this process: its resident memory after --warmup seconds
    against the end (goal: growth under 5 %), llama-server still healthy, and every chat request recorded."""
    from bench.serve_overhead import Client
    from engine.core.settings import LoadSettings, SamplingSettings, SpecSettings
    from engine.core.workloads import load_workload
    from engine.models.demo_models import demo_pair as demo_files
    from engine.serve.session import ServeSession, ServeSettings, wait_for_requests

    target, draft = demo_files("f16")
    recording = Path(tempfile.mkdtemp(prefix="spectune-serve-soak-")) / "traffic.jsonl"
    settings = ServeSettings(
        LoadSettings(target, draft, ctx=1024),
        SpecSettings("draft-simple", draft_n_max=3),
        SamplingSettings(temp=0.0),
        port=0,
        record=recording,
        parallel=2,
    )
    client = Client()
    sent = gone = refused = 0
    with ServeSession(settings) as session:
        url = session.proxy.url
        t0 = time.monotonic()
        start_rss = None
        next_report = t0 + report_every
        while time.monotonic() - t0 < minutes * 60:
            client.batch(url, None, 2, 48, sent)
            sent += 2
            if sent % 10 == 0:
                gone += bool(client.ask({"leave": url, "tokens": 200}))
                refused += client.ask({"malformed": url}) == 400
                sent += 2  # both are chat requests the recorder sees; the malformed one is not a conversation
            if start_rss is None and time.monotonic() - t0 >= warmup:
                start_rss = rss_mib(os.getpid())
                print(f"# after the {warmup:.0f} s warm-up: {start_rss:.1f} MiB resident", flush=True)
            if time.monotonic() >= next_report:
                next_report += report_every
                print(f"# {sent} requests, {session.watch.total} watched, {rss_mib(os.getpid()):.1f} MiB", flush=True)
        wait_for_requests(session, sent, 60)  # a hung-up client's request closes once the proxy sees it gone
        end_rss = rss_mib(os.getpid())
        healthy = session.server_alive
        watched = session.watch.total
        recorded = session.recorder.count if session.recorder else 0
    client.close()
    growth = (end_rss / start_rss - 1) if start_rss else float("nan")
    lines = len(load_workload(recording).prompts)
    print(f"requests sent {sent}, watched {watched}; {gone} clients hung up mid-answer, {refused} malformed refused")
    print(f"proxy process memory: {start_rss} -> {end_rss:.1f} MiB ({100 * growth:+.1f} %); goal < 5 %")
    print(f"llama-server healthy at the end: {healthy}; recorded {recorded} chat requests, {lines} lines read back")
    ok = growth < 0.05 and healthy and recorded == lines == sent - refused and watched == sent
    print("ok" if ok else "MISSED")
    return 0 if ok else 1


def main() -> int:
    if "--serve" in sys.argv:
        sp = argparse.ArgumentParser(description="the proxy's soak")
        sp.add_argument("--serve", action="store_true")
        sp.add_argument("--minutes", type=float, default=30.0)
        sp.add_argument("--warmup", type=float, default=120.0)
        sp.add_argument("--report-every", type=float, default=300.0)
        s = sp.parse_args()
        return serve_soak(s.minutes, s.warmup, s.report_every)
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=60.0)
    ap.add_argument("--knob-every", type=float, default=3.0, help="seconds between knob changes")
    ap.add_argument("--restart-every", type=float, default=120.0, help="seconds between engine restarts")
    ap.add_argument(
        "--warmup",
        type=float,
        default=180.0,
        help="seconds of warm-up before the GUI's starting reading, fixed in advance (default 180)",
    )
    ap.add_argument(
        "--worker-warmup",
        type=float,
        default=20.0,
        help="seconds after a worker loads the pair before its lifetime's first reading (default 20)",
    )
    ap.add_argument("--report-every", type=float, default=300.0, help="seconds between memory readings")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--threads", type=int, default=0, help="engine CPU threads (0: llama.cpp's default)")
    a = ap.parse_args()
    rng = random.Random(a.seed)

    from app.main_window import MainWindow

    app = QApplication.instance() or QApplication([])
    ini = Path(os.environ.get("TMPDIR", "/tmp")) / f"spectune-soak-{os.getpid()}.ini"
    w = MainWindow(settings=QSettings(str(ini), QSettings.Format.IniFormat))
    w.show()
    w.show_page("Lab")
    target, draft = demo_pair()
    c = w.lab.controls
    c.target.set_path(target)
    c.draft.set_path(draft)
    c.ctx.setValue(4096)
    c.threads.setValue(a.threads)
    c.workload.setCurrentText("custom prompt")
    c.prompt.setPlainText("def the value of the data is")
    c.max_tokens.setValue(512)
    # a count, not the events: an hour of runs kept here was the harness's own memory growth (~1 MiB a minute)
    finished = {"runs": 0}
    crashes: list[str] = []

    # runs that measured something; one cancelled before its first token is not kept (app/pages/history.py)
    def count(ev: dict) -> None:
        if ev.get("summary", {}).get("tokens_generated"):
            finished["runs"] += 1

    w.lab.runFinished.connect(count)
    deliberate = {"restart": False}

    def on_state(state: str, message: str) -> None:
        if state == "crashed" and not deliberate["restart"]:
            crashes.append(message)

    w.controller.stateChanged.connect(on_state)

    def pump(seconds: float) -> None:
        t_end = time.monotonic() + seconds
        while time.monotonic() < t_end:
            app.processEvents()
            time.sleep(0.003)

    def wait(cond, timeout_s: float) -> bool:
        t_end = time.monotonic() + timeout_s
        while not cond() and time.monotonic() < t_end:
            app.processEvents()
            time.sleep(0.003)
        return cond()

    from engine.measure.history import History

    with History() as h:
        saved_before = h.count()  # a SPECTUNE_DATA_DIR given by the caller may hold older runs
    w.controller.start()
    wait(lambda: w.controller.hello_info is not None, 300)
    w.lab.start()
    wait(lambda: w.lab.live.cycles > 0, 300)
    counts = {"restarts": 0, "knob_changes": 0}
    next_restart = time.monotonic() + a.restart_every
    # per worker process: [pid, first reading (MiB) or None, last reading (MiB)]
    lifetimes: list[list] = []
    first_due = {"at": time.monotonic() + a.worker_warmup}

    def watch_worker() -> None:
        """The current worker's first reading once it has warmed up, then its latest reading."""
        pid = w.controller.pid
        if pid is None:
            return
        if not lifetimes or lifetimes[-1][0] != pid:
            lifetimes.append([pid, None, None])
        if lifetimes[-1][1] is None:
            if time.monotonic() >= first_due["at"]:
                lifetimes[-1][1] = lifetimes[-1][2] = rss_mib(pid)
        else:
            lifetimes[-1][2] = rss_mib(pid)

    def step() -> None:
        """One stretch of the live session: a few seconds of running, then a knob moves or the engine restarts."""
        nonlocal next_restart
        pump(a.knob_every)
        watch_worker()
        if time.monotonic() >= next_restart:
            next_restart = time.monotonic() + a.restart_every
            watch_worker()  # the old worker's last reading, just before it goes
            deliberate["restart"] = True
            w.lab.stop()
            wait(lambda: w.lab.mode == "idle", 60)
            w.controller.restart()
            wait(lambda: w.controller.state == "ready", 300)
            deliberate["restart"] = False
            w.lab.start()  # loads the pair into the fresh worker, then runs
            wait(lambda: w.lab.live.cycles > 0 and w.lab.mode == "running", 300)
            first_due["at"] = time.monotonic() + a.worker_warmup
            counts["restarts"] += 1
            return
        choice = rng.choice(("k", "k", "method", "temp"))
        if choice == "k":
            c.k.setValue(rng.choice((1, 2, 3, 4, 6, 8)))
        elif choice == "method":
            c.method.setCurrentText(rng.choice(("draft-simple", "ngram-simple,draft-simple", "draft-simple")))
        else:
            c.temp.setValue(rng.choice((0.0, 0.0, 0.7)))
        counts["knob_changes"] += 1
        if w.lab.mode == "idle":
            w.lab.start()

    def reading(label: str) -> tuple[float, float]:
        gui, worker = rss_mib(os.getpid()), rss_mib(w.controller.pid)
        print(
            f"{label}: GUI {gui:.1f} MiB{memory_detail(os.getpid())}, worker {worker:.1f} MiB, "
            f"History rows {w.history.table.rowCount()}",
            flush=True,
        )
        return gui, worker

    # Warm-up: the same session for exactly --warmup seconds, a length fixed before the run so that no
    # reading can move the starting point. Growth after it is what a leak would show; the early reading
    # 20 s in shows what the warm-up itself grew (stores bounded by design filling up).
    t_warm = time.monotonic()
    first_reading_at = t_warm + min(a.warmup, 20.0)
    early = None
    while time.monotonic() - t_warm < a.warmup:
        step()
        if early is None and time.monotonic() >= first_reading_at:
            early = reading(f"{time.monotonic() - t_warm:5.0f} s in (early)")
    gui0, _ = reading(f"after warm-up ({(time.monotonic() - t_warm) / 60:.1f} min)")
    t_start = time.monotonic()
    t_end = t_start + a.minutes * 60
    next_reading = t_start + a.report_every
    while time.monotonic() < t_end:
        step()
        if time.monotonic() >= next_reading:
            # the path, not only the ends: a leak climbs steadily, a cache that fills levels off
            next_reading += a.report_every
            reading(f"  {(time.monotonic() - t_start) / 60:5.1f} min")
    restarts, knob_changes = counts["restarts"], counts["knob_changes"]
    watch_worker()
    w.lab.stop()
    wait(lambda: w.lab.mode == "idle", 60)
    gui1, worker1 = rss_mib(os.getpid()), rss_mib(w.controller.pid)
    rows, limit = w.history.table.rowCount(), w.history.limit
    w.close()
    with History() as h:
        saved = h.count() - saved_before
    print(f"at the end:    GUI {gui1:.1f} MiB, worker {worker1:.1f} MiB")
    gui_growth = 100 * (gui1 / gui0 - 1)
    early_text = f"; from the early reading 20 s in: {100 * (gui1 / early[0] - 1):+.1f}%" if early else ""
    print(f"GUI growth from the end of the {a.warmup:g} s warm-up: {gui_growth:+.1f}% (goal < 5%){early_text}")
    grown = [(pid, first, last) for pid, first, last in lifetimes if first is not None]
    for pid, first, last in grown:
        print(f"  worker {pid}: {first:.1f} -> {last:.1f} MiB over its lifetime ({100 * (last / first - 1):+.1f}%)")
    worst = max((100 * (last / first - 1) for _, first, last in grown), default=0.0)
    print(f"worker growth within a lifetime: largest {worst:+.1f}% over {len(grown)} workers (goal < 5%)")
    runs = finished["runs"]
    lost = saved != runs or rows != min(runs, limit)
    print(
        f"{a.minutes:g} min after the warm-up; in all {knob_changes} knob changes, {restarts} engine restarts, "
        f"{len(crashes)} unexpected crashes, {runs} runs finished, {saved} in the history database, "
        f"{rows} rows on the History page (it shows the newest {limit}): {'LOST' if lost else 'none lost'}"
    )
    return 0 if not crashes and not lost and gui_growth < 5.0 and worst < 5.0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
