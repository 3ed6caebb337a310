"""Background work for the pages: a scan of the disks, a recommendation, a download, a pre-load check.

Each job runs one engine function in a named Python thread and reports back through Qt
signals, which Qt queues to the GUI thread because the receiving QObject lives there.
The engine functions are plain Python and know nothing of Qt; a job only carries their
result, their exception or their progress callback across.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QObject, Qt, Signal

from app.gui_gc import collect_in_gui_thread


class BackgroundJob(QObject):
    """fn(report) in a thread; report(x) emits progress(x). Ends with exactly one of done / failed."""

    progress = Signal(object)
    done = Signal(object)
    failed = Signal(object)  # the exception

    def __init__(self, name: str, fn: Callable[[Callable[[Any], None]], Any], parent: QObject | None = None):
        super().__init__(parent)
        collect_in_gui_thread()  # this job's thread must never run the cycle collector
        self.name = name
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
        try:
            result = self._fn(lambda value: self._emit("progress", value))
        except BaseException as exc:  # noqa: BLE001 - every failure is shown, never lost in a thread
            self._emit("failed", exc)
        else:
            self._emit("done", result)
