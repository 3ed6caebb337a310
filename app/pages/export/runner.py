"""The Export page's background job: one validation (engine.measure.validate) on a QThread.

Validation starts llama-server from the exported command and an engine worker
of its own, so the Lab's worker keeps serving the Lab page. Where two copies
of the pair may not fit (the Lab's pair is on a GPU) the page has the Lab's
copy freed first: the runner waits for ``lab_freed`` before it starts anything.

Stopping: ``request_stop()`` flips the validation's StopSwitch, which
terminates the server and cancels the lab's generation under way, so the job
ends within moments, its processes stopped.

Signals (queued to the GUI thread)
  progress(int, int, str)  runs done, runs in all, what now
  succeeded(object)        the report (engine.measure.validate.validate's dict)
  failed(str)              why it could not run
  cancelled()              it stopped because it was asked to
"""

from __future__ import annotations

import threading
import time

from PySide6.QtCore import QThread, Signal

from engine.core.chat import Prompt
from engine.core.settings import LoadSettings, SamplingSettings, SpecSettings
from engine.measure.validate import StopSwitch, ValidateCancelled, validate

LAB_FREE_TIMEOUT_S = 60.0


class ValidateRunner(QThread):
    progress = Signal(int, int, str)
    succeeded = Signal(object)
    failed = Signal(str)
    cancelled = Signal()

    def __init__(
        self,
        load: LoadSettings,
        spec: SpecSettings,
        sampling: SamplingSettings,
        prompts: list[Prompt],
        max_tokens: int,
        passes: int = 1,
        parent=None,
    ):
        super().__init__(parent)
        self.setObjectName("validate-runner")
        self.load, self.spec, self.sampling = load, spec, sampling
        self.prompts, self.max_tokens, self.passes = list(prompts), max_tokens, passes
        self.stop = StopSwitch()
        self.lab_freed = threading.Event()  # set by the page: nothing else holds the pair now
        self.lab_freed.set()
        self.lab_free_timeout_s = LAB_FREE_TIMEOUT_S

    def request_stop(self) -> None:
        """From the GUI thread: end the validation now."""
        self.stop.set()

    def run(self) -> None:
        try:
            if not self.lab_freed.is_set():
                self.progress.emit(0, 0, "waiting for the Lab to free its copy of the pair (it is on the GPU)")
                t_end = time.monotonic() + self.lab_free_timeout_s
                while not self.lab_freed.wait(0.05):
                    if self.stop.is_set():
                        raise ValidateCancelled("validation cancelled")
                    if time.monotonic() > t_end:
                        self.progress.emit(
                            0,
                            0,
                            f"the Lab did not free its pair within {self.lab_free_timeout_s:g} s; validating anyway",
                        )
                        break
            report = validate(
                self.load,
                self.spec,
                self.sampling,
                self.prompts,
                self.max_tokens,
                passes=self.passes,
                progress=self.progress.emit,
                stop=self.stop,
            )
        except ValidateCancelled:
            self.cancelled.emit()
        except Exception as exc:  # noqa: BLE001 - whatever happens here must reach the page, not kill the thread
            if self.stop.is_set():
                self.cancelled.emit()
            else:
                self.failed.emit(str(exc) or type(exc).__name__)
        else:
            self.succeeded.emit(report)
