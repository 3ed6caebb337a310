"""Python's cycle collector runs only in the GUI thread.

Left automatic, a collection starts in whatever thread happens to allocate: a download
or recommendation thread of the Models page then finalizes Qt wrappers off the GUI
thread, which crashed (SIGSEGV) or hung the app in tests. pyqtgraph's GarbageCollector
turns automatic collection off and collects, by the same thresholds, from a GUI timer.
"""

from __future__ import annotations

_collector = None


def collect_in_gui_thread() -> None:
    """Install once, from the GUI thread, after the QApplication exists."""
    global _collector
    if _collector is None:
        from pyqtgraph.util.garbage_collector import GarbageCollector

        _collector = GarbageCollector(interval=0.5)
