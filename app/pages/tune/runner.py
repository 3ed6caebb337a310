"""The Tune page's background job: one auto-tune (engine.measure.tuner.Tuner) on a
QThread, against an engine worker process of its own.

Why its own worker: the Lab's worker keeps serving the Lab page (and its
crash-restart banner) and the tuner's blocking client API must not run on the
GUI thread. The tune worker lives only as long as one tune, so its copy of the
models is freed as soon as the tune ends. Where two copies may not fit (the
Lab's pair is on a GPU) the page has the Lab's copy freed first: the runner
starts its worker at once but loads only once ``lab_freed`` is set.

Stopping: ``request_stop()`` sets a flag the tuner reads before every engine
request and cancels the running generation, so a tune normally ends within one
engine cycle, and a load at llama.cpp's next progress report. The verify-time
measurement cannot be cancelled by the worker; ``kill_worker()`` ends it (or
anything else that hangs) at once (the blocked request then fails with
"crashed", which the job reports as cancelled because it was asked to stop).

Signals (queued to the GUI thread)
  progress(str)          one line from the tuner
  succeeded(object)      the engine.measure.tuner.TuneResult
  failed(str, str)       kind and message (an engine crash, a load error, ...)
  cancelled()            the tune stopped because it was asked to
"""

from __future__ import annotations

import os
import signal
import threading
import time

from PySide6.QtCore import QThread, Signal

from engine.core.chat import Prompt
from engine.core.settings import LoadSettings, SamplingSettings
from engine.measure.tuner import TuneCancelled, Tuner
from engine.runtime.client import EngineClient, EngineError

LAB_FREE_TIMEOUT_S = 60.0  # a Lab generation ends within a cycle of its cancel, a load at its next progress report


class TuneThread(QThread):
    """What the page sees of a tune's thread, whichever tune it runs: its signals, a stop flag, and the
    Lab's room (``lab_freed``: set by the page once nothing else holds the pair)."""

    progress = Signal(str)
    succeeded = Signal(object)
    failed = Signal(str, str)
    cancelled = Signal()

    def __init__(self, parent=None):
        super().__init__(parent)
        self._stop = threading.Event()
        self.lab_freed = threading.Event()
        self.lab_freed.set()
        self.lab_free_timeout_s = LAB_FREE_TIMEOUT_S

    @property
    def runs(self) -> int:
        return 0

    def request_stop(self) -> None:
        self._stop.set()

    def kill_worker(self) -> None:
        """End whatever process the tune waits on, now."""

    def wait_for_lab(self, stopped: type[Exception]) -> None:
        """Until the Lab has freed its copy of the pair, or for at most lab_free_timeout_s; ``stopped`` is
        raised when a stop is asked meanwhile."""
        if self.lab_freed.is_set():
            return
        self.progress.emit("waiting for the Lab to free its copy of the pair (it is on the GPU) ...")
        t_end = time.monotonic() + self.lab_free_timeout_s
        while not self.lab_freed.wait(0.05):
            if self._stop.is_set():
                raise stopped()
            if time.monotonic() > t_end:
                self.progress.emit(
                    f"the Lab did not free its pair within {self.lab_free_timeout_s:g} s; loading anyway"
                )
                return

    # -- the thread ---------------------------------------------------------
    def run(self) -> None:
        try:
            result = self.tune()
        except Exception as exc:  # noqa: BLE001 - whatever happens here must reach the page, not kill the thread
            failure = self.failure(exc)
            if failure is None:
                self.cancelled.emit()
            else:
                self.failed.emit(*failure)
        else:
            self.succeeded.emit(result)
        finally:
            self.finish()

    def tune(self) -> object:
        raise NotImplementedError

    def failure(self, exc: Exception) -> tuple[str, str] | None:
        """What the page is told of an exception: (kind, message), or None when it means the tune stopped
        because it was asked to."""
        if isinstance(exc, (ValueError, OSError, TimeoutError)):
            return "error", f"{type(exc).__name__}: {exc}"
        return "internal", f"{type(exc).__name__}: {exc}"

    def finish(self) -> None:
        """Whatever the tune leaves to close, in its thread."""


class TuneRunner(TuneThread):
    def __init__(
        self,
        load: LoadSettings,
        prompts: list[Prompt],
        max_tokens: int,
        sampling: SamplingSettings,
        budget_s: float,
        seed: int,
        k_max: int,
        parent=None,
        engine: tuple[str, str | None] = ("auto", None),
    ):
        """engine: (auto | native | llama-server, the llama-server binary or None), as the Engine menu chose."""
        super().__init__(parent)
        self.setObjectName("tune-runner")
        self.load, self.prompts, self.max_tokens, self.sampling = load, list(prompts), max_tokens, sampling
        self.budget_s, self.seed, self.k_max = budget_s, seed, k_max
        # created here so the GUI thread can reach it to cancel or kill
        self.client = EngineClient(engine=engine[0], server=engine[1])
        self.tuner: Tuner | None = None

    # -- called from the GUI thread ----------------------------------------
    @property
    def runs(self) -> int:
        return self.tuner.runs if self.tuner is not None else 0

    def request_stop(self) -> None:
        self._stop.set()
        try:
            self.client.cancel()  # ends a running generation at its next cycle
        except EngineError:
            pass  # no worker (yet, or any more): the flag is enough

    def kill_worker(self) -> None:
        """End the tune's worker process now. Not EngineClient.kill(): that marks the exit as
        expected and a request blocked on the reader thread would then wait for its timeout;
        an unexpected exit wakes it with 'crashed' at once."""
        pid = self.client.pid
        if pid is None:
            return
        try:
            os.kill(pid, getattr(signal, "SIGKILL", signal.SIGTERM))
        except (ProcessLookupError, PermissionError, OSError):
            pass  # it has already exited

    # -- the thread ---------------------------------------------------------
    def tune(self) -> object:
        if self._stop.is_set():
            raise TuneCancelled()
        self.progress.emit("starting a separate engine process for the tune ...")
        self.client.start()
        if self._stop.is_set():
            raise TuneCancelled()
        self.wait_for_lab(TuneCancelled)
        self.progress.emit(
            f"engine process {self.client.pid} ready; loading {self.load.target.name}"
            + (f" and {self.load.draft.name}" if self.load.draft else "")
            + " ..."
        )
        loaded = self.client.load(self.load)
        self.progress.emit(
            f"loaded (n_ctx {loaded.get('n_ctx')}); {len(self.prompts)} prompt(s), "
            f"max {self.max_tokens} tokens each, budget {self.budget_s:g} s"
        )
        self.tuner = Tuner(
            self.client,
            self.load,
            self.prompts,
            max_tokens=self.max_tokens,
            sampling=self.sampling,
            budget_s=self.budget_s,
            seed=self.seed,
            k_max=self.k_max,
            progress=self.progress.emit,
            should_stop=self._stop.is_set,
        )
        return self.tuner.run()

    def failure(self, exc: Exception) -> tuple[str, str] | None:
        if isinstance(exc, TuneCancelled):
            return None
        if isinstance(exc, EngineError):  # ended on purpose when a stop was asked
            return None if self._stop.is_set() else (exc.kind, str(exc) or exc.kind)
        return super().failure(exc)

    def finish(self) -> None:
        self._close_client()

    def _close_client(self) -> None:
        # every request has returned by now, so the worker is idle and exits at once when asked
        try:
            self.client.close(timeout=10)
        except (EngineError, OSError):
            self.kill_worker()
