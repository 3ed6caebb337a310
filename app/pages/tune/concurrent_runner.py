"""The Tune page's job when the user's tools send several requests at once: engine.measure.concurrent_tune
on a QThread.

That tune measures through llama-server itself (two servers side by side at ``-np N``, the candidate and
no speculation), not through an engine worker, so there is no worker to kill: a stop is noticed between
two batches, each of which ends within its requests' max tokens. Both runners are TuneThreads, so the
page treats them alike.
"""

from __future__ import annotations

from app.pages.tune.runner import TuneThread
from engine.core.chat import Prompt
from engine.core.settings import LoadSettings, SamplingSettings, SpecSettings
from engine.llama.server import ServerError
from engine.measure.concurrent_tune import ConcurrentTuneCancelled, candidate_specs, predicted_k, tune_concurrent


class ConcurrentTuneRunner(TuneThread):
    def __init__(
        self,
        load: LoadSettings,
        prompts: list[Prompt],
        clients: int,
        max_tokens: int,
        sampling: SamplingSettings,
        extra: SpecSettings | None = None,
        server: str | None = None,
        parent=None,
    ):
        super().__init__(parent)
        self.setObjectName("concurrent-tune-runner")
        self.load, self.prompts, self.clients = load, list(prompts), clients
        self.max_tokens, self.sampling, self.extra, self.server = max_tokens, sampling, extra, server
        self.batches_done = 0

    @property
    def runs(self) -> int:
        return self.batches_done

    def tune(self) -> object:
        def progress(line: str) -> None:
            if ": batch " in line:
                self.batches_done += 1
            self.progress.emit(line)

        self.wait_for_lab(ConcurrentTuneCancelled)
        return tune_concurrent(
            self.load,
            self.prompts,
            self.clients,
            sampling=self.sampling,
            max_tokens=self.max_tokens,
            specs=candidate_specs(self.load, self.extra, predicted_k(self.load, self.clients)),
            server=self.server,
            progress=progress,
            stop=self._stop,
        )

    def failure(self, exc: Exception) -> tuple[str, str] | None:
        if isinstance(exc, ConcurrentTuneCancelled):
            return None
        if isinstance(exc, ServerError):
            return "server", str(exc)
        return super().failure(exc)
