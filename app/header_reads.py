"""Model files' headers, read off the GUI thread.

A real model's GGUF header holds its whole vocabulary: about 0.09 s of Python for Qwen2.5's 151936
tokens and as many merges. When the pair changes, the Lab's method list, the Models page's check and the
Lab's chat hint each need both headers, and reading them on the GUI thread froze the window for over a second
(bench/gui_stall.py). engine.models.gguf_inspect keeps what it read by file identity, so a page asks
here first: warm() says whether the headers are already read (the page goes on at once, reading costs
nothing), or starts reading them in a thread and returns False (the page returns and runs again on
`ready`).
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QObject, Signal

from app.background import BackgroundJob
from engine.models.gguf_inspect import GGUFInspectError, file_identity, header_cached, inspect_gguf

# A file this small is a demo, toy or test model: its header (a few thousand tokens) reads in milliseconds,
# so the page reads it at once rather than wait a round trip through a thread. Real models are hundreds of
# MB and more, with vocabularies of 32k-262k tokens.
SMALL_FILE = 32 << 20


class HeaderReads(QObject):
    ready = Signal()  # some headers have been read: whoever was waiting asks warm() again

    def __init__(self, parent: QObject | None = None):
        super().__init__(parent)
        self._reading: dict[str, BackgroundJob] = {}
        # files read once without the engine keeping the answer (an I/O error, or a file still being
        # written): the page's own read reports it rather than this object reading it again and again
        self._not_kept: set[tuple] = set()

    def warm(self, *paths: Path | None) -> bool:
        """True when every existing file's header is read, or small; else read the rest in the background."""
        missing = [
            p
            for p in paths
            if p is not None
            and p.is_file()
            and p.stat().st_size >= SMALL_FILE
            and not header_cached(p)
            and file_identity(p) not in self._not_kept
        ]
        for path in missing:
            if str(path) not in self._reading:

                def read(_report: object, p: Path = path) -> None:
                    _read(p)

                job = BackgroundJob(f"header-{path.name}", read, self, what=f"reading {path.name}'s header")
                job.on(done=lambda _, p=path: self._done(p), failed=lambda _, p=path: self._done(p))
                self._reading[str(path)] = job.start()
        return not missing

    def _done(self, path: Path) -> None:
        job = self._reading.pop(str(path), None)
        if job is not None:
            job.deleteLater()
        identity = file_identity(path)
        if identity is not None and not header_cached(path):
            self._not_kept.add(identity)
        self.ready.emit()


def _read(path: Path) -> None:
    """Read into the engine's cache; a broken file's error is kept there too, for the page to show."""
    try:
        inspect_gguf(path, apart=True)  # a child process parses it: no GIL taken from the GUI thread
    except GGUFInspectError:
        pass


_shared: HeaderReads | None = None


def header_reads() -> HeaderReads:
    """The one reader every page shares (created in the GUI thread on first use)."""
    global _shared
    if _shared is None:
        _shared = HeaderReads()
    return _shared
