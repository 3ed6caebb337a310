"""Recording the user's own traffic as a workload set: opt-in, on this machine only.

Each chat request that passes through the proxy appends one line to a JSONL file,
``{"messages": [...]}``, the format engine.core.workloads reads as a set of conversations, so a
recording is tuned on exactly as any conversation file is (``spectune tune --workload FILE``).

A line is written whole or not at all, as far as a crash can tell: it is encoded first and handed
to the operating system in one ``write`` on a file opened for appending, and the file is flushed
to disk after each line. A program killed in the middle of a write leaves at most a last line
without its newline, which the reader skips with a warning (engine.core.chat.load_jsonl) and the
next recorder on the file cuts off; every line before it is kept.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

from engine.core.chat import MAX_LINE_BYTES, ChatError, parse_messages

IN_FLIGHT = "in_flight"  # a recorded line's extra field (the workload reader ignores it)


class RecordError(OSError):
    """The recording file cannot be opened or written (the text names it)."""


class Recorder:
    """Appends each recorded request's messages to ``path``; safe to call from several threads."""

    def __init__(self, path: str | Path):
        self.path = Path(path).expanduser()
        self._lock = threading.Lock()
        self.count = 0  # lines written by this recorder
        self.skipped = 0  # requests whose messages were not a conversation (llama-server answers those)
        self.dropped = 0  # bytes of a cut-off last line found on opening, removed
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_BINARY", 0), 0o600)
        except OSError as exc:
            raise RecordError(f"cannot record to {self.path}: {exc.strerror or exc}") from None
        self._end_torn_line()

    def _end_torn_line(self) -> None:
        """A file whose last line lacks its newline (a program killed mid-line) is cut back to its last
        whole line, so the next line starts on its own and every line parses; ``dropped`` says how many
        bytes went (a request that was never wholly written)."""
        size = os.fstat(self._fd).st_size
        if not size:
            return
        with self.path.open("r+b") as fh:
            fh.seek(max(0, size - MAX_LINE_BYTES))
            tail = fh.read()
            if tail.endswith(b"\n"):
                return
            keep = size - len(tail) + tail.rfind(b"\n") + 1  # rfind -1: no newline, the whole tail goes
            fh.truncate(keep)
            self.dropped = size - keep

    def record(self, request: Any, in_flight: int | None = None) -> bool:
        """Append a chat request body's messages (and how many requests were in flight when it came, itself
        included: the concurrency a tune on the recording defaults to); False (and nothing written) when it
        has none that a tune could run. Never raises for the request's content: bad input is llama-server's
        to answer."""
        messages = request.get("messages") if isinstance(request, dict) else None
        try:
            messages = parse_messages(messages, "request")
        except ChatError:
            with self._lock:
                self.skipped += 1
            return False
        record: dict[str, Any] = {"messages": messages}
        if in_flight is not None:
            record[IN_FLIGHT] = in_flight
        line = (json.dumps(record, ensure_ascii=False) + "\n").encode("utf-8")
        with self._lock:
            if self._fd < 0:
                return False
            try:
                os.write(self._fd, line)
                os.fsync(self._fd)
            except OSError as exc:
                raise RecordError(f"cannot write to {self.path}: {exc.strerror or exc}") from None
            self.count += 1
        return True

    def close(self) -> None:
        with self._lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1

    def __enter__(self) -> Recorder:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def recorded_concurrency(path: str | Path) -> int | None:
    """The concurrency a recording saw: the median, over its requests, of how many were in flight when each
    came (None: no line says, e.g. a conversation file that was not recorded here)."""
    counts = []
    try:
        with Path(path).expanduser().open("rb") as fh:
            for raw in fh:
                try:
                    value = json.loads(raw).get(IN_FLIGHT)
                except (ValueError, AttributeError):
                    continue
                if isinstance(value, int) and value >= 1:
                    counts.append(value)
    except OSError:
        return None
    return sorted(counts)[(len(counts) - 1) // 2] if counts else None
