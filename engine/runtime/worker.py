"""The engine worker: ``python -m engine.runtime.worker``.

Owns the native runtime in its own process, so that a llama.cpp abort (an
assert, a CUDA out-of-memory) takes down this process and not the GUI or CLI
that started it. Speaks engine.runtime.protocol on stdin/stdout; everything llama.cpp
prints goes to stderr, which the client keeps as the crash report.

Threads: the main thread reads requests; one job thread runs the long ones
(load, generate). Knob updates that arrive during a generation are queued and
applied by the job thread between two cycles, as changes to the settings then in
use, so the cycle right after the ``updated`` event is the first to use them.
"""

from __future__ import annotations

import os
import queue
import sys
import threading
import time
import traceback
import typing
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, BinaryIO, cast

from engine.core.chat import ChatError
from engine.core.settings import (
    LoadSettings,
    SamplingSettings,
    SettingsError,
    SpecSettings,
    from_dict,
    to_dict,
    updated,
)
from engine.core.stats import RunStats
from engine.models.gguf_check import GGUFError
from engine.models.gguf_inspect import GGUFInspectError
from engine.runtime import protocol
from engine.runtime.events import (
    CancelSentEvent,
    ChatEvent,
    ConfiguredEvent,
    Cycle,
    CyclesEvent,
    DoneWithEvent,
    ErrorEvent,
    Event,
    FinishedEvent,
    HelloEvent,
    LoadedEvent,
    LoadProgressEvent,
    MeasuredEvent,
    MemoryEvent,
    MemoryItem,
    StartedEvent,
    TokensEvent,
    UpdatedEvent,
)

# Cycle events travel in batches: one message at most every DEFAULT_BATCH_MS.
# Per-cycle messages cost both processes CPU that, on a small machine, is taken
# from llama.cpp's compute threads; the GUI redraws at ~30 Hz anyway.
DEFAULT_BATCH_MS = 25.0
# faults of the input rather than of SpecTune, answered with a kind of their own instead of "internal": a
# model file that is broken, truncated or not there, a conversation the chat template cannot take
INPUT_FAULTS: tuple[type[Exception], ...] = (GGUFError, GGUFInspectError, ChatError, FileNotFoundError)


def _input_fault_kind(exc: Exception) -> str:
    """ "invalid_model" for a model file's fault, "invalid_input" for the rest of INPUT_FAULTS."""
    return "invalid_model" if isinstance(exc, (GGUFError, GGUFInspectError)) else "invalid_input"


if TYPE_CHECKING:
    from engine.runtime.binding import Engine

# a command's answer: its last event (engine.runtime.events)
Reply = Event

# what a request may send for a field of each type (a bool is not a number here, though Python's bool is an int)
_ACCEPTS: dict[Any, tuple[tuple[type, ...], str]] = {
    str: ((str,), "a string"),
    int: ((int,), "an integer"),
    float: ((int, float), "a number"),
}


def _changed(current: Any, changes: Any) -> Any:
    """``current`` (SpecSettings or SamplingSettings) with a request's ``changes``, each value checked for
    its field's type first: a string where a number belongs would otherwise pass into the validation's
    comparisons, or into ctypes, and fail there (taking the worker, or the run, down)."""
    if not isinstance(changes, dict):
        raise SettingsError(f"settings must be an object of name: value, got {type(changes).__name__}")
    hints = typing.get_type_hints(type(current))
    for name, value in changes.items():
        accepts = _ACCEPTS.get(hints.get(name))
        if accepts is not None and (isinstance(value, bool) or not isinstance(value, accepts[0])):
            raise SettingsError(f"{name} must be {accepts[1]}, got {value!r}")
    return updated(current, changes)


def _cycle_event(cycle, wall_ms: float) -> Cycle:
    return {
        "i": cycle.index,
        "prompt": cycle.is_prompt,
        "n_prompt": cycle.n_prompt,
        "drafted": cycle.drafted,
        "accepted": cycle.accepted,
        "emitted": cycle.emitted,
        "replayed": cycle.replayed,
        "tokens": cycle.tokens,
        "text": cycle.text,
        "pieces": cycle.pieces,
        "k": cycle.draft_n_max,
        "epoch": cycle.settings_epoch,
        "n_past": cycle.n_past,
        "eog": cycle.is_eog,
        "draft_ms": round(cycle.draft_ms, 4),
        "verify_ms": round(cycle.verify_ms, 4),
        "decode_ms": round(cycle.decode_ms, 4),
        "other_ms": round(cycle.other_ms, 4),
        "cycle_ms": round(cycle.cycle_ms, 4),
        "wall_ms": round(wall_ms, 4),
    }


def _count_cycle(stats: RunStats, cycle, wall_ms: float) -> None:
    stats.add(
        is_prompt=cycle.is_prompt,
        n_prompt=cycle.n_prompt,
        drafted=cycle.drafted,
        accepted=cycle.accepted,
        emitted=cycle.emitted,
        draft_ms=cycle.draft_ms,
        verify_ms=cycle.verify_ms,
        decode_ms=cycle.decode_ms,
        other_ms=cycle.other_ms,
        cycle_ms=cycle.cycle_ms,
        wall_ms=wall_ms,
        text=cycle.text,
    )


class _CycleBatch:
    """A generation's cycle events, sent together: at most one message every batch_s seconds (DEFAULT_BATCH_MS),
    and at once for the prompt's cycle."""

    def __init__(self, emit: Callable[[Event], None], req_id: Any, run: Any, batch_s: float) -> None:
        self._emit, self._req_id, self._run, self._batch_s = emit, req_id, run, batch_s
        self._pending: list[Cycle] = []
        self._last_flush = time.monotonic()

    def add(self, event: Cycle, flush_now: bool = False) -> None:
        self._pending.append(event)
        if flush_now or time.monotonic() - self._last_flush >= self._batch_s:
            self.flush()

    def flush(self) -> None:
        if self._pending:
            self._emit(CyclesEvent(event="cycles", id=self._req_id, run=self._run, cycles=list(self._pending)))
            self._pending.clear()
        self._last_flush = time.monotonic()


class Worker:
    def __init__(self, out: BinaryIO, make_engine: Callable[..., Any] | None = None):
        """make_engine(settings, progress=...) loads a pair: engine.runtime.binding.Engine (the default, SpecTune's
        native engine) or engine.measure.server_engine.ServerEngine (through llama-server)."""
        self._out = out
        self._make_engine = make_engine
        self._out_lock = threading.Lock()
        self._engine: Engine | None = None
        self._load: LoadSettings | None = None
        self._unavailable: dict[str, str] = {}  # the loaded pair's methods it cannot run, each with why
        self._spec = SpecSettings()
        self._sampling = SamplingSettings()
        self._job: threading.Thread | None = None
        self._updates: queue.SimpleQueue = queue.SimpleQueue()
        self._job_active = False
        self._load_cancel = threading.Event()  # set by cancel while a load runs: the next progress report stops it

    # -- output -----------------------------------------------------------
    def emit(self, msg: Event) -> None:
        data = protocol.encode(dict(msg))
        with self._out_lock:
            self._out.write(data)
            self._out.flush()

    def error(self, req_id: Any, kind: str, message: str) -> None:
        self.emit(ErrorEvent(event="error", id=req_id, kind=kind, message=message))

    # -- dispatch ---------------------------------------------------------
    def _job_name(self) -> str:
        return self._job.name if self._job is not None else ""

    def _loaded_settings(self) -> LoadSettings:
        if self._load is None:
            raise SettingsError("no model is loaded")
        return self._load

    def busy(self) -> bool:
        return self._job is not None and self._job_active

    def handle(self, msg: dict) -> bool:
        """Handle one request; return False when the worker should exit."""
        cmd, req_id = msg.get("cmd"), msg.get("id")
        if cmd not in protocol.COMMANDS:
            self.error(req_id, "unknown_command", f"unknown command {cmd!r}; known: {', '.join(protocol.COMMANDS)}")
            return True
        if cmd == "shutdown":
            self._load_cancel.set()  # a load under way stops at its next progress report
            if self._engine is not None:
                self._engine.cancel()
            if self._job is not None:
                self._job.join(timeout=30)
            self._close_engine()
            self.emit(DoneWithEvent(event="bye", id=req_id))
            return False
        if cmd == "cancel":
            if self.busy() and self._job_name() == "load":
                self._load_cancel.set()
            elif self._engine is not None and self.busy():
                self._engine.cancel()
            self.emit(CancelSentEvent(event="cancel_sent", id=req_id, running=self.busy()))
            return True
        if cmd == "update":
            self._on_update(req_id, msg)
            return True
        if self.busy():
            self.error(req_id, "busy", f"cannot {cmd} while a {self._job_name()} is running; cancel it first")
            return True
        if cmd in ("load", "generate", "measure"):
            target = {"load": self._do_load, "generate": self._do_generate, "measure": self._do_measure}[cmd]
            if self._job is not None:
                self._job.join()  # it has sent its last event already; only the thread's exit remains
            self._job_active = True
            self._load_cancel.clear()  # here, not in the job: a cancel read right after this load must count
            self._job = threading.Thread(target=self._guarded, args=(target, req_id, msg), name=cmd, daemon=True)
            self._job.start()
            return True
        self._guarded(getattr(self, f"_do_{cmd}"), req_id, msg)
        return True

    def _guarded(self, fn, req_id: Any, msg: dict) -> None:
        """Run a command; its terminal event is sent after the worker is marked idle, so a
        client that reacts to that event at once is never told the worker is busy."""
        from engine.runtime.binding import SpecrtError

        final: Reply | None
        try:
            final = fn(req_id, msg)
        except SettingsError as exc:
            final = ErrorEvent(event="error", id=req_id, kind="invalid_settings", message=str(exc))
        except SpecrtError as exc:
            final = ErrorEvent(event="error", id=req_id, kind=exc.kind, message=str(exc))
        except INPUT_FAULTS as exc:  # the user's file or request, not SpecTune: said as such, no traceback
            final = ErrorEvent(event="error", id=req_id, kind=_input_fault_kind(exc), message=str(exc))
        except Exception as exc:  # the worker must answer, whatever happened
            traceback.print_exc(file=sys.stderr)
            final = ErrorEvent(event="error", id=req_id, kind="internal", message=f"{type(exc).__name__}: {exc}")
        if threading.current_thread() is self._job:
            self._job_active = False
        if final is not None:
            self.emit(final)

    def _need_engine(self):
        if self._engine is None:
            raise SettingsError("no model is loaded; send load first")
        return self._engine

    def _close_engine(self) -> None:
        if self._engine is not None:
            self._engine.close()
            self._engine = None
            self._load = None

    # -- commands ---------------------------------------------------------
    def _do_load(self, req_id: Any, msg: dict) -> Reply:
        from engine.models.draft_heads import pair_verdicts, unavailable
        from engine.models.gguf_check import check_gguf

        settings = from_dict(LoadSettings, msg.get("load") or {}).validate()
        self._close_engine()
        t0 = time.perf_counter()
        for role, path in (("target", settings.target), ("draft", settings.draft)):
            if path is not None:
                check_gguf(path, role)
        # a method without its kind of draft file aborts llama.cpp (draft-dflash on a plain draft): ask first
        methods_refused = unavailable(pair_verdicts(settings.target, settings.draft))
        self.emit(LoadProgressEvent(event="load_progress", id=req_id, stage="loading", progress=0.0))
        last: dict[str, Any] = {"stage": "", "progress": -1.0, "t": 0.0}

        def progress(stage: str, fraction: float) -> bool:
            # llama.cpp reports per tensor: pass on a change of stage, each whole percent, or every 0.1 s
            now = time.monotonic()
            if (
                stage != last["stage"]
                or fraction >= 1.0
                or fraction - last["progress"] >= LOAD_PROGRESS_STEP
                or now - last["t"] >= 0.1
            ):
                last.update(stage=stage, progress=fraction, t=now)
                self.emit(LoadProgressEvent(event="load_progress", id=req_id, stage=stage, progress=round(fraction, 4)))
            return not self._load_cancel.is_set()

        if self._make_engine is None:
            from engine.runtime.binding import Engine

            self._make_engine = Engine
        engine = self._make_engine(settings, progress=progress)
        notice = str(getattr(engine, "notice", ""))
        self._engine, self._load, self._unavailable = engine, settings, methods_refused
        self.emit(LoadProgressEvent(event="load_progress", id=req_id, stage="loaded", progress=1.0))
        loaded = LoadedEvent(
            event="loaded",
            id=req_id,
            has_draft=engine.has_draft,
            n_ctx=engine.n_ctx,
            memory=cast(list[MemoryItem], engine.memory()),
            load_s=round(time.perf_counter() - t0, 3),
            settings=to_dict(settings),
        )
        if notice:  # the llama-server engine had to turn repacking off (engine.runtime.client.load's rule)
            loaded["repack"], loaded["notice"] = False, notice
        return loaded

    def _check_spec(self, spec: SpecSettings) -> None:
        """The speculation settings against the loaded pair: its draft, its K limit, the methods it cannot run."""
        spec.validate(
            has_draft=self._need_engine().has_draft,
            k_limit=self._loaded_settings().draft_n_max_limit,
            unavailable=self._unavailable,
        )

    def _apply(self, spec: SpecSettings, sampling: SamplingSettings, mid_run: bool = False) -> None:
        """Validate and hand the settings to the engine. mid_run: only what differs from the settings in
        use, so a spec change keeps the sampler (its random state, with a fixed seed) and a sampling change
        keeps the speculators (their n-gram pools)."""
        engine = self._need_engine()
        self._check_spec(spec)
        sampling.validate()
        if not mid_run or spec != self._spec:
            engine.set_spec(spec)
        if not mid_run or sampling != self._sampling:
            engine.set_sampling(sampling)
        self._spec, self._sampling = spec, sampling

    def _do_configure(self, req_id: Any, msg: dict) -> Reply:
        spec = _changed(self._spec, msg.get("spec") or {})
        sampling = _changed(self._sampling, msg.get("sampling") or {})
        self._apply(spec, sampling)
        return ConfiguredEvent(event="configured", id=req_id, spec=to_dict(spec), sampling=to_dict(sampling))

    def _on_update(self, req_id: Any, msg: dict) -> None:
        spec_changes, sampling_changes = msg.get("spec") or {}, msg.get("sampling") or {}
        try:
            spec = _changed(self._spec, spec_changes)
            sampling = _changed(self._sampling, sampling_changes)
            if self._engine is not None:
                self._check_spec(spec)
            sampling.validate()
        except SettingsError as exc:
            self.error(req_id, "invalid_settings", str(exc))
            return
        if self.busy() and self._job_name() == "generate":
            # the changes, not the settings they make: the job thread adds them to the settings in use
            # when it applies them, so a change that arrives while an earlier one still waits for the next
            # cycle adds to it rather than undoing it
            self._updates.put((req_id, spec_changes, sampling_changes))
        else:

            def apply(i: Any, m: dict) -> Reply:
                self._apply(spec, sampling)
                return UpdatedEvent(
                    event="updated", id=req_id, spec=to_dict(spec), sampling=to_dict(sampling), from_cycle=0
                )

            self._guarded(apply, req_id, msg)

    def _do_generate(self, req_id: Any, msg: dict) -> Reply:
        from engine.runtime.binding import SpecrtError

        engine = self._need_engine()
        spec = _changed(self._spec, msg.get("spec") or {})
        sampling = _changed(self._sampling, msg.get("sampling") or {})
        self._apply(spec, sampling)
        prompt, chat = self._generate_prompt(req_id, msg)
        max_tokens = int(msg.get("max_tokens", 128))
        if not 1 <= max_tokens <= 1 << 20:
            raise SettingsError(f"max_tokens must be between 1 and 1048576, got {max_tokens}")
        baseline = bool(msg.get("baseline", False))
        run = msg.get("run")
        batch_s = float(msg.get("batch_ms", DEFAULT_BATCH_MS)) / 1000.0
        # the llama-server engine says whether it (re)started a server for this generation (the Lab marks it)
        if msg.get("fresh", True) and not baseline:
            # a measured generation meets the speculators a freshly started llama-server has: an n-gram
            # pool does not draft a prompt run again from its own earlier answer (issue 51)
            engine.forget()
        begun = engine.begin(prompt, max_tokens, baseline) or {}
        started = StartedEvent(
            event="started", id=req_id, run=run, baseline=baseline, spec=to_dict(spec), sampling=to_dict(sampling)
        )
        if chat is not None:
            started["chat_prompt"], started["chat_format"] = prompt, chat["format"]
        self.emit(cast(StartedEvent, {**started, **begun}))
        stats = RunStats()
        batch = _CycleBatch(self.emit, req_id, run, batch_s)
        try:
            spec, sampling = self._run_cycles(engine, run, spec, sampling, stats, batch)
        except SpecrtError as exc:
            if exc.kind != "cancelled":
                raise
            batch.flush()
            return FinishedEvent(event="cancelled", id=req_id, run=run, summary=stats.summary())
        finally:
            batch.flush()
            self._apply_late_updates(run)
        stats.text += engine.text_tail()
        return FinishedEvent(
            event="done",
            id=req_id,
            run=run,
            baseline=baseline,
            summary=stats.summary(),
            spec=to_dict(spec),
            sampling=to_dict(sampling),
        )

    def _generate_prompt(self, req_id: Any, msg: dict) -> tuple[str, ChatEvent | None]:
        """A generate request's prompt, and in chat mode (messages) the chat command's answer it was made from."""
        prompt = msg.get("prompt")
        chat: ChatEvent | None = None
        if msg.get("messages") is not None:
            # chat mode: the target's template makes the prompt, as llama-server's chat endpoint does
            chat = self._do_chat(req_id, msg)
            prompt = chat["prompt"]
        if not isinstance(prompt, str) or not prompt:
            raise SettingsError("generate needs a non-empty prompt (or messages)")
        return prompt, chat

    def _run_cycles(
        self,
        engine: Engine,
        run: Any,
        spec: SpecSettings,
        sampling: SamplingSettings,
        stats: RunStats,
        batch: _CycleBatch,
    ) -> tuple[SpecSettings, SamplingSettings]:
        """Step the engine to the end of the generation, counting and sending each cycle and applying the
        knob updates that arrived before it; returns the settings in use at the end."""
        next_index = 0
        while True:
            spec, sampling = self._apply_updates(run, spec, sampling, next_index, batch)
            t0 = time.perf_counter()
            cycle = engine.step()
            wall_ms = (time.perf_counter() - t0) * 1000.0
            if cycle is None:
                return spec, sampling
            if cycle.wall_ms is not None:  # llama-server's own clock, not how fast its stream arrived
                wall_ms = cycle.wall_ms
            next_index = cycle.index + 1
            _count_cycle(stats, cycle, wall_ms)
            batch.add(_cycle_event(cycle, wall_ms), flush_now=cycle.is_prompt)

    def _apply_updates(
        self, run: Any, spec: SpecSettings, sampling: SamplingSettings, next_index: int, batch: _CycleBatch
    ) -> tuple[SpecSettings, SamplingSettings]:
        """The queued knob updates applied between two cycles, each to the settings in use (next_index: the
        first cycle that runs with it); returns the settings in use after them. The cycles sent before an
        update's ``updated`` event are those run before it."""
        from engine.runtime.binding import SpecrtError

        while not self._updates.empty():
            up_id, spec_changes, sampling_changes = self._updates.get_nowait()
            batch.flush()
            try:
                up_spec, up_sampling = _changed(spec, spec_changes), _changed(sampling, sampling_changes)
                self._apply(up_spec, up_sampling, mid_run=True)
                spec, sampling = up_spec, up_sampling
                # llama-server takes a setting at its start: the change counts from the next generation on
                mid_run = getattr(self._engine, "applies_mid_run", True)
                applied = UpdatedEvent(
                    event="updated",
                    id=up_id,
                    run=run,
                    spec=to_dict(spec),
                    sampling=to_dict(sampling),
                    from_cycle=next_index if mid_run else None,
                )
                if not mid_run:
                    applied["from_next_generation"] = True
                self.emit(applied)
            except (SettingsError, SpecrtError) as exc:
                self.error(up_id, "invalid_settings", str(exc))
        return spec, sampling

    def _apply_late_updates(self, run: Any) -> None:
        """Knobs that arrived after the last cycle: they still count for the next run."""
        while not self._updates.empty():
            up_id, spec_changes, sampling_changes = self._updates.get_nowait()
            try:
                up_spec = _changed(self._spec, spec_changes)
                self._check_spec(up_spec)
                up_sampling = _changed(self._sampling, sampling_changes).validate()
            except SettingsError as exc:
                self.error(up_id, "invalid_settings", str(exc))
                continue
            self._spec, self._sampling = up_spec, up_sampling
            self.emit(
                UpdatedEvent(
                    event="updated",
                    id=up_id,
                    run=run,
                    spec=to_dict(up_spec),
                    sampling=to_dict(up_sampling),
                    from_cycle=None,
                )
            )

    def _do_measure(self, req_id: Any, msg: dict) -> Reply:
        """Forward-pass times by batch size, for the cost model."""
        engine = self._need_engine()
        which = msg.get("which", "target")
        if which not in ("target", "draft") or (which == "draft" and not engine.has_draft):
            raise SettingsError(f"cannot measure {which!r}: choose 'target' or, with a draft loaded, 'draft'")
        sizes = [int(n) for n in msg.get("sizes", [1, 2, 4, 8])]
        if not sizes or any(n < 1 or n > 256 for n in sizes):
            raise SettingsError("sizes must be between 1 and 256")
        n_past, reps = int(msg.get("n_past", 256)), int(msg.get("reps", 5))
        ms = {str(n): engine.time_forward(which, n, n_past=n_past, reps=reps) for n in sizes}
        return MeasuredEvent(event="measured", id=req_id, which=which, n_past=n_past, ms=ms)

    def _do_memory(self, req_id: Any, msg: dict) -> Reply:
        return MemoryEvent(event="memory", id=req_id, items=self._need_engine().memory())

    def _do_tokenize(self, req_id: Any, msg: dict) -> Reply:
        tokens = self._need_engine().tokenize(str(msg.get("text", "")), bool(msg.get("add_special", True)))
        return TokensEvent(event="tokens", id=req_id, tokens=tokens)

    def _do_chat(self, req_id: Any, msg: dict) -> ChatEvent:
        messages = msg.get("messages")
        if not isinstance(messages, list) or not messages:
            raise SettingsError("chat needs a non-empty messages list")
        kwargs = msg.get("chat_template_kwargs")
        rendered = self._need_engine().chat_prompt(messages, kwargs if isinstance(kwargs, dict) else None)
        return cast(ChatEvent, {"event": "chat", "id": req_id, **rendered})

    def _do_unload(self, req_id: Any, msg: dict) -> Reply:
        self._close_engine()
        return DoneWithEvent(event="unloaded", id=req_id)


LOAD_PROGRESS_STEP = 0.01


def _native_hello() -> dict:
    from engine.llama.backends import load_backends
    from engine.runtime.binding import build_info, devices, load_library

    load_library()
    return {"llama": build_info(), "devices": devices(), "backends": load_backends().to_dict(), "engine_kind": "native"}


def run(start: Callable[[], tuple[dict, Callable[..., Any] | None]], failure_kind: str) -> int:
    """The worker's life: ``start()`` gives its hello's fields and its engine factory (None: the native Engine);
    then requests are read until shutdown or until stdin closes. A start that raises is answered with a
    ``fatal`` event of ``failure_kind``. engine.measure.server_worker runs this with llama-server's engine."""
    # The protocol owns the real stdout; anything else that writes to fd 1
    # (llama.cpp, a stray print) lands on stderr instead of corrupting it.
    proto_out = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    try:
        hello, make_engine = start()
    except Exception as exc:
        Worker(proto_out).emit(ErrorEvent(event="fatal", id=None, kind=failure_kind, message=str(exc)))
        return 3
    worker = Worker(proto_out, make_engine)
    greeting = HelloEvent(
        event="hello", protocol=protocol.PROTOCOL_VERSION, engine=protocol.ENGINE_VERSION, pid=os.getpid()
    )
    worker.emit(cast(HelloEvent, {**greeting, **hello}))
    stdin = sys.stdin.buffer
    for line in stdin:
        if not line.strip():
            continue
        try:
            msg = protocol.decode(line)
        except protocol.ProtocolError as exc:
            worker.error(None, "bad_request", str(exc))
            continue
        if not worker.handle(msg):
            return 0
    # stdin closed: the client is gone
    if worker._engine is not None:
        worker._engine.cancel()
        if make_engine is not None:  # llama-server's servers go now (they would also die with this process)
            worker._engine.close()
    return 0


def main() -> int:
    return run(lambda: (_native_hello(), None), "native_unavailable")


if __name__ == "__main__":
    raise SystemExit(main())
