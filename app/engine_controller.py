"""The GUI's one handle on the engine worker (the Spyder kernel-handler pattern).

Wraps engine.runtime.client.EngineClient in a QObject with documented signals and an
explicit connection state. Worker events arrive on the client's reader thread
and are re-emitted as Qt signals, which Qt queues into the GUI thread. Nothing
here blocks the GUI thread: starting the worker (which may first build the
native runtime) happens on a helper thread; every request is a non-blocking send.

Signals
  stateChanged(state, message)  starting | ready | loading | running | error | crashed | stopped
  hello(dict)                   the worker's handshake (versions, llama.cpp build, devices)
  loaded(dict)                  a model pair is loaded (memory report, n_ctx, has_draft)
  runStarted(dict)              a generation began (its settings)
  cycles(list)                  a batch of cycle records (see engine.runtime.worker._cycle_event), each with
                                its "id" and "run"; batches arrive at most every 25 ms
  runFinished(dict)             done or cancelled event (with the run summary)
  settingsApplied(dict)         a mid-run knob change took effect (from_cycle says where)
  failed(dict)                  an error event (kind, message)
  unloaded()                    the pair was freed (unload(); the Tune page asks, on a GPU)
  loadProgress(stage, fraction) llama.cpp reading the target's or the draft's weights (0..1);
                                cancel() while loading stops the load (an error of kind "cancelled")
"""

from __future__ import annotations

import threading
from typing import Any

from PySide6.QtCore import QObject, Signal, Slot

from engine.core.chat import Conversation, Prompt
from engine.core.settings import LoadSettings, to_dict
from engine.runtime import protocol
from engine.runtime.client import CRASHED, ERROR, LOADING, READY, RUNNING, STARTING, EngineClient, EngineError
from engine.runtime.events import CycleEvent, Event, HelloEvent, LoadedEvent


class EngineController(QObject):
    # object, not dict: PySide would convert a dict to a QVariantMap and back on every emit
    stateChanged = Signal(str, str)
    hello = Signal(object)
    loaded = Signal(object)
    runStarted = Signal(object)
    cycles = Signal(object)
    runFinished = Signal(object)
    settingsApplied = Signal(object)
    failed = Signal(object)
    unloaded = Signal()  # the worker freed the pair (unload())
    loadProgress = Signal(str, float)  # stage ("target" / "draft"), fraction read
    _event = Signal(object)  # reader thread -> GUI thread

    def __init__(self, parent: QObject | None = None, engine: str = "auto", server: str | None = None):
        super().__init__(parent)
        self.engine, self.server = engine, server  # engine.runtime.engine_choice: auto, native, llama-server
        self._client = self._new_client()
        self._event.connect(self._dispatch)
        self.state = "stopped"
        self.message = ""
        self.hello_info: HelloEvent | None = None
        self.loaded_info: LoadedEvent | None = None
        self.load_settings: LoadSettings | None = None
        self.running_run: Any = None
        self._run_counter = 0
        self._unload_when_idle = False
        self._load_req: int | None = None
        self._unload_req: int | None = None

    def _new_client(self) -> EngineClient:
        return EngineClient(
            on_event=self._on_worker_event,
            queue_events=False,
            expand_cycles=False,
            engine=self.engine,
            server=self.server,
        )

    @property
    def engine_kind(self) -> str | None:
        """The engine of the running worker (native or llama-server); None before its hello."""
        return None if self.hello_info is None else self.hello_info.get("engine_kind", "native")

    @property
    def native_failure(self) -> str | None:
        """Why SpecTune's own engine could not start here (the worker then runs llama-server), or None."""
        return self._client.native_failure

    def set_engine(self, engine: str, server: str | None = None) -> None:
        """Measure with another engine (auto, native, llama-server; server: the llama-server binary, None for
        the bundled one): the worker restarts with it, and a loaded pair is loaded again (the Lab's reload)."""
        if (engine, server) == (self.engine, self.server):
            return
        self.engine, self.server = engine, server
        old, self._client = self._client, self._new_client()
        old.on_event = None  # its last words (stopped) must not reach the new worker's state
        old.kill()
        self.hello_info = None
        self.restart()

    # -- lifecycle --------------------------------------------------------
    def start(self) -> None:
        """Start the worker on a helper thread; hello() or stateChanged('error') follows."""
        if self.state in (STARTING, READY, LOADING, RUNNING):
            return
        self._set_state(STARTING, "starting the engine")

        def run() -> None:
            try:
                self._client.start()
            except EngineError as exc:
                self._event.emit({"event": "state", "state": ERROR, "message": str(exc)})

        threading.Thread(target=run, name="engine-start", daemon=True).start()

    def restart(self) -> None:
        self.loaded_info = None
        self.running_run = None
        self._unload_when_idle = False
        self._client.kill()
        self.state = "stopped"
        self.start()

    def shutdown(self) -> None:
        self._client.close(timeout=10)

    @property
    def pid(self) -> int | None:
        return self._client.pid

    @property
    def stderr_tail(self) -> str:
        return self._client.stderr_tail

    # -- requests (all non-blocking) -------------------------------------
    def _send(self, cmd: str, **fields: Any) -> int | None:
        try:
            return self._client.send(cmd, **fields)
        except EngineError as exc:
            self.failed.emit({"event": "error", "kind": exc.kind, "message": str(exc)})
            return None

    def load(self, settings: LoadSettings) -> None:
        self.load_settings = settings
        self.loaded_info = None
        self._set_state(LOADING, f"loading {settings.target.name}")
        self._load_req = self._send("load", load=to_dict(settings))

    def generate(self, prompt: Prompt, max_tokens: int, spec: dict, sampling: dict, baseline: bool = False) -> Any:
        """One generation of a raw text or (chat mode) a conversation, which the worker renders with the
        target's chat template."""
        self._run_counter += 1
        run = self._run_counter
        self.running_run = run
        source = {"messages": prompt.messages} if isinstance(prompt, Conversation) else {"prompt": prompt}
        self._send(
            "generate", **source, max_tokens=max_tokens, baseline=baseline, spec=spec, sampling=sampling, run=run
        )
        return run

    def update(self, spec: dict | None = None, sampling: dict | None = None) -> None:
        self._send("update", spec=spec or {}, sampling=sampling or {})

    def cancel(self) -> None:
        self._send("cancel")

    def unload(self) -> bool:
        """Free the loaded pair (its RAM / VRAM); ``unloaded`` follows. A running generation
        is let finish (or be cancelled) first, as the worker refuses to unload while busy.
        Returns False when nothing is loaded. ``load_settings`` is kept, for a later load."""
        if self.loaded_info is None:
            return False
        if self.running_run is not None:
            self._unload_when_idle = True
        else:
            self._unload_req = self._send("unload")
        return True

    @property
    def gpu_backend(self) -> bool | None:
        """The engine has a GPU device (a CUDA build on a machine with a GPU); None before its hello."""
        return None if self.hello_info is None else protocol.has_gpu_device(self.hello_info)

    def fit_context(self) -> dict:
        """What a memory budget (engine.planning.memory.budget.Budget.from_report) needs to know about this
        engine: the memory its loaded pair holds (freed before a load) and whether it can use a GPU at all
        (a CPU build cannot)."""
        loaded = self.loaded_info
        return {"held": loaded.get("memory") if loaded else None, "gpu_backend": self.gpu_backend}

    @property
    def uses_gpu(self) -> bool:
        """The loaded pair has layers on a GPU: the worker has a non-CPU device and the load offloads."""
        return bool(
            self.gpu_backend
            and self.loaded_info is not None
            and self.load_settings is not None
            and self.load_settings.offloads
        )

    # -- events -----------------------------------------------------------
    def _on_worker_event(self, ev: Event) -> None:
        self._event.emit(ev)  # any thread -> queued to the GUI thread

    @Slot(object)
    def _dispatch(self, ev: Event) -> None:
        kind = ev["event"]
        if ev["event"] == "cycles":
            batch = [CycleEvent(event="cycle", id=ev["id"], run=ev["run"], **cyc) for cyc in ev["cycles"]]
            self.cycles.emit(batch)
        elif ev["event"] == "state":
            self._set_state(ev["state"], ev["message"] or "")
        elif ev["event"] == "hello":
            self.hello_info = ev
            self._set_state(READY, "")  # the client marks itself ready only after handing us the hello
            self.hello.emit(ev)
        elif ev["event"] == "load_progress":
            if ev["stage"] in ("target", "draft"):
                self.loadProgress.emit(ev["stage"], float(ev["progress"]))
        elif ev["event"] == "loaded":
            self.loaded_info = ev
            self.loaded.emit(ev)
        elif ev["event"] == "started":
            self.runStarted.emit(ev)
        elif kind in ("done", "cancelled"):
            self.running_run = None
            self.runFinished.emit(ev)
            if self._unload_when_idle:
                self._unload_when_idle = False
                self._unload_req = self._send("unload")
        elif kind == "unloaded":
            self.loaded_info = None
            self.unloaded.emit()
        elif kind == "updated":
            self.settingsApplied.emit(ev)
        elif ev["event"] == "error":
            if self.state == LOADING and ev["id"] == self._load_req:
                # the worker is idle again with nothing loaded (it frees the old pair before loading)
                self.loaded_info = None
                if ev["kind"] == "cancelled":
                    self._set_state(READY, "loading cancelled")
                else:
                    self._set_state(ERROR, ev["message"] or "loading failed")
            elif ev["id"] == self._unload_req and ev["kind"] == "busy":
                self._unload_when_idle = True  # a run was still ending: unload once it has
            self.failed.emit(ev)
        elif kind == "crashed":
            self.running_run = None
            self.loaded_info = None
            self._unload_when_idle = False

    def _set_state(self, state: str, message: str = "") -> None:
        if state == self.state and message == self.message:
            return
        if state in (ERROR, CRASHED, "stopped"):
            self.running_run = None
        self.state, self.message = state, message
        self.stateChanged.emit(state, message)


__all__ = ["EngineController", "CRASHED", "ERROR", "LOADING", "READY", "RUNNING", "STARTING"]
