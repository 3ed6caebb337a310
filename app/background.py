"""Background work for the pages: a scan of the disks, a recommendation, a download, a pre-load check.

Each job runs one engine function in a named Python thread and reports back through Qt
signals, which Qt queues to the GUI thread because the receiving QObject lives there.
The engine functions are plain Python and know nothing of Qt; a job only carries their
result, their exception or their progress callback across.

A job computes (a ranking, a scan, header reads, the CPU probe) unless it is made with computing=False
(a download, which waits on the network). computing_jobs() names those running now: the Lab's baseline and
quick check, and a tune, wait for them before they measure (app.quiet_wait), since on a small machine a
measurement beside them measures the machine they load, not the pair (a demo baseline read 180 tok/s beside
the Start page's ranking, 808 after it).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QObject, Qt, Signal

from app.gui_gc import collect_in_gui_thread

_computing_lock = threading.Lock()
_computing: dict[int, str] = {}  # id(job) -> what it does, for the computing jobs whose thread runs now


def computing_jobs() -> list[str]:
    """What the computing background jobs running now do, in words (see the module's doc)."""
    with _computing_lock:
        return sorted(set(_computing.values()))


class BackgroundJob(QObject):
    """fn(report) in a thread; report(x) emits progress(x). Ends with exactly one of done / failed."""

    progress = Signal(object)
    done = Signal(object)
    failed = Signal(object)  # the exception

    def __init__(
        self,
        name: str,
        fn: Callable[[Callable[[Any], None]], Any],
        parent: QObject | None = None,
        *,
        computing: bool = True,
        what: str = "",
    ):
        """computing=False: a job that mostly waits (a download); what: the work in a user's words, for the
        Lab's "waiting for ..." (default: the name)."""
        super().__init__(parent)
        collect_in_gui_thread()  # this job's thread must never run the cycle collector
        self.name = name
        self.computing = computing
        self.what = what or name
        self._fn = fn
        self._thread: threading.Thread | None = None
        self.cancel = threading.Event()

    def on(
        self, done: Callable | None = None, failed: Callable | None = None, progress: Callable | None = None
    ) -> BackgroundJob:
        """Connect handlers, queued: they run in the GUI thread even when they are plain functions."""
        queued = Qt.ConnectionType.QueuedConnection
        for signal, slot in ((self.done, done), (self.failed, failed), (self.progress, progress)):
            if slot is not None:
                signal.connect(slot, queued)
        return self

    def start(self) -> BackgroundJob:
        # daemon: a scan of a slow disk must not keep the process alive after the window has gone
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()
        return self

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def stop(self, timeout_s: float = 10.0) -> None:
        """Ask the job to stop (the functions that can, watch self.cancel) and wait for its thread."""
        self.cancel.set()
        if self._thread is not None:
            self._thread.join(timeout_s)

    def _emit(self, signal_name: str, value: Any) -> None:
        try:
            getattr(self, signal_name).emit(value)
        except RuntimeError:  # the page was deleted while the job ran: nobody is listening
            pass

    def _run(self) -> None:
        if self.computing:
            with _computing_lock:
                _computing[id(self)] = self.what
        try:
            result = self._fn(lambda value: self._emit("progress", value))
        except BaseException as exc:  # noqa: BLE001 - every failure is shown, never lost in a thread
            self._done_computing()
            self._emit("failed", exc)
        else:
            self._done_computing()
            self._emit("done", result)

    def _done_computing(self) -> None:
        """Before the result goes out: a handler that measures at once must not find this job still counted."""
        with _computing_lock:
            _computing.pop(id(self), None)
