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


class TuneRunner(QThread):
    progress = Signal(str)
    succeeded = Signal(object)
    failed = Signal(str, str)
    cancelled = Signal()

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
    ):
        super().__init__(parent)
        self.setObjectName("tune-runner")
        self.load, self.prompts, self.max_tokens, self.sampling = load, list(prompts), max_tokens, sampling
        self.budget_s, self.seed, self.k_max = budget_s, seed, k_max
        self.client = EngineClient()  # created here so the GUI thread can reach it to cancel or kill
        self.tuner: Tuner | None = None
        self._stop = threading.Event()
        self.lab_freed = threading.Event()  # set by the page: nothing else holds the pair now
        self.lab_freed.set()
        self.lab_free_timeout_s = LAB_FREE_TIMEOUT_S

    # -- called from the GUI thread ----------------------------------------
    @property
    def stop_requested(self) -> bool:
        return self._stop.is_set()

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
    def run(self) -> None:
        try:
            if self._stop.is_set():
                raise TuneCancelled()
            self.progress.emit("starting a separate engine process for the tune ...")
            self.client.start()
            if self._stop.is_set():
                raise TuneCancelled()
            if not self.lab_freed.is_set():
                self.progress.emit("waiting for the Lab to free its copy of the pair (it is on the GPU) ...")
                t_end = time.monotonic() + self.lab_free_timeout_s
                while not self.lab_freed.wait(0.05):
                    if self._stop.is_set():
                        raise TuneCancelled()
                    if time.monotonic() > t_end:
                        self.progress.emit(
                            f"the Lab did not free its pair within {self.lab_free_timeout_s:g} s; loading anyway"
                        )
                        break
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
            result = self.tuner.run()
        except TuneCancelled:
            self.cancelled.emit()
        except EngineError as exc:
            if self._stop.is_set():
                self.cancelled.emit()  # the worker was ended on purpose
            else:
                self.failed.emit(exc.kind, str(exc) or exc.kind)
        except (ValueError, OSError, TimeoutError) as exc:
            self.failed.emit("error", f"{type(exc).__name__}: {exc}")
        except Exception as exc:  # noqa: BLE001 - whatever happens here must reach the page, not kill the thread
            self.failed.emit("internal", f"{type(exc).__name__}: {exc}")
        else:
            self.succeeded.emit(result)
        finally:
            self._close_client()

    def _close_client(self) -> None:
        # every request has returned by now, so the worker is idle and exits at once when asked
        try:
            self.client.close(timeout=10)
        except (EngineError, OSError):
            self.kill_worker()
