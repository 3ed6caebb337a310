"""Starts the engine worker and talks to it; survives its death.

``EngineClient`` is the one object the CLI and the GUI use. It spawns
``python -m engine.runtime.worker`` (an argv list, never a shell), checks the worker's
protocol version in the handshake, keeps an explicit state, and turns the
worker's exit into the ``crashed`` state with a message built from the exit
status and the tail of what the worker wrote to stderr. ``restart()`` starts a
fresh worker. Events reach the caller through ``on_event`` (called on the
reader thread) and through a queue read with ``next_event``.
"""

from __future__ import annotations

import collections
import dataclasses
import itertools
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, cast

from engine.core.chat import Conversation, Prompt
from engine.core.paths import REPO_ROOT
from engine.core.settings import LoadSettings, to_dict
from engine.runtime import protocol
from engine.runtime.engine_choice import (
    AUTO,
    ENGINES,
    NATIVE,
    SERVER,
    describe_native_failure,
    native_failure,
    remember_native_failure,
)
from engine.runtime.events import (
    ChatEvent,
    ConfiguredEvent,
    CrashedEvent,
    CycleEvent,
    Event,
    HelloEvent,
    LoadedEvent,
    MeasuredEvent,
    MemoryEvent,
    MemoryItem,
    StateEvent,
)

STARTING, READY, LOADING, RUNNING, ERROR, CRASHED, STOPPED = (
    "starting",
    "ready",
    "loading",
    "running",
    "error",
    "crashed",
    "stopped",
)


class EngineError(RuntimeError):
    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind


class EngineCrashed(EngineError):
    def __init__(self, message: str):
        super().__init__("crashed", message)


class EngineUnavailable(EngineError):
    """SpecTune's own engine cannot start on this machine (engine="native" was asked for); the message says
    why and what still works."""

    def __init__(self, message: str):
        super().__init__("engine_unavailable", message)


def _describe_exit(code: int | None) -> str:
    if code is None:
        return "stopped answering"
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with status {code}"


# Python's faulthandler (on in the worker) names the signal it caught first. A fault while it prints
# (it runs in a signal handler, mid-whatever the process was doing) can end the process by another
# signal, so its first line, not the exit status, says what killed the worker.
_FAULT_NAMES = {
    "Illegal instruction": signal.SIGILL,
    "Segmentation fault": signal.SIGSEGV,
    "Floating-point exception": signal.SIGFPE,
    "Floating point exception": signal.SIGFPE,
    "Bus error": signal.SIGBUS,
    "Aborted": signal.SIGABRT,
}


def first_fault(code: int | None, stderr: str) -> int | None:
    """The exit code of the fault that started the crash: faulthandler's first "Fatal Python error"
    line when the process died by a signal, else the exit code itself."""
    if code is None or code >= 0:
        return code
    for line in stderr.splitlines():
        if line.startswith("Fatal Python error: "):
            sig = _FAULT_NAMES.get(line.removeprefix("Fatal Python error: ").strip())
            return -sig if sig is not None else code
    return code


class EngineClient:
    def __init__(
        self,
        on_event: Callable[[Event], None] | None = None,
        python: str | None = None,
        env: dict[str, str] | None = None,
        stderr_lines: int = 60,
        queue_events: bool = True,
        expand_cycles: bool = True,
        engine: str = AUTO,
        server: str | os.PathLike | None = None,
    ):
        """queue_events=False: events go only to on_event (a GUI that never reads the queue
        must not let it grow without bound); the blocking helpers then cannot be used.

        engine: "native" (SpecTune's libspecrt), "llama-server" (the same protocol, measured through the
        llama-server binary ``server``, default the bundled one), or "auto": native, and llama-server when
        native cannot start on this machine (engine.runtime.engine_choice). ``engine_kind`` says which runs."""
        if engine not in ENGINES:
            raise EngineError("invalid_settings", f"engine must be one of {', '.join(ENGINES)}, not {engine!r}")
        self.engine = engine
        self.server = server
        self.engine_kind: str | None = None  # native or llama-server, once started
        self._quiet_start = False  # an auto start's native try: its death is not passed on (start says why)
        self._awaiting_hello = False  # a crash must wake start() even when events are not queued
        self.native_failure: str | None = None  # why auto went to llama-server
        self.on_event = on_event
        self._queue_events = queue_events
        self._expand_cycles = expand_cycles  # False: a "cycles" batch reaches on_event as one event
        self._python = python or sys.executable
        self._env = env
        self._proc: subprocess.Popen | None = None
        self._events: queue.Queue = queue.Queue()
        self._ids = itertools.count(1)
        self._send_lock = threading.Lock()
        self._stderr_tail: collections.deque[str] = collections.deque(maxlen=stderr_lines)
        self._closing = False
        self.state = STOPPED
        self.hello: HelloEvent | None = None
        self.last_error: str | None = None
        self.loaded: LoadedEvent | None = None
        self.last_exit_code: int | None = None

    # -- process ----------------------------------------------------------
    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def start(self, timeout: float = 600.0) -> HelloEvent:
        """Spawn the worker and wait for its hello (building native/ first may take a minute). With
        engine="auto" a native worker that dies or gives up before its hello is followed by a llama-server
        worker; the hello then carries ``native_failure``, the reason in words."""
        library = (self._env if self._env is not None else os.environ).get("SPECTUNE_SPECRT", "")
        self.native_failure = native_failure(library) if self.engine == AUTO else None
        if self.engine == SERVER or self.native_failure is not None:
            hello = self._start_worker(SERVER, timeout)
        else:
            # in auto mode a native worker that dies while starting is not news for the caller (the GUI would
            # show a crash): its death is told as the reason the llama-server worker runs instead
            self._quiet_start = self.engine == AUTO
            try:
                hello = self._start_worker(NATIVE, timeout)
            except EngineError as exc:
                if exc.kind in ("version_mismatch", "timeout"):
                    raise
                fatal = str(exc) if exc.kind == "native_unavailable" else ""
                reason = describe_native_failure(self.last_exit_code, self.stderr_tail, fatal)
                if self.engine == NATIVE:
                    self._set_state(ERROR, reason)
                    raise EngineUnavailable(reason) from exc
                remember_native_failure(reason, library)
                self.native_failure = reason
                self._quiet_start = False
                hello = self._start_worker(SERVER, timeout)
            finally:
                self._quiet_start = False
        if self.native_failure is not None:
            hello["native_failure"] = self.native_failure
        return hello

    def _start_worker(self, kind: str, timeout: float) -> HelloEvent:
        if self._proc is not None and self._proc.poll() is None:
            raise EngineError("bad_state", "the engine worker is already running")
        self._closing = False
        self._events = queue.Queue()
        self.hello, self.loaded, self.last_error, self.last_exit_code = None, None, None, None
        self._stderr_tail.clear()
        self._set_state(STARTING)
        env = dict(self._env if self._env is not None else os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
        env.setdefault("PYTHONUNBUFFERED", "1")
        # -X faulthandler: a worker that dies in native code (libspecrt, a backend module) leaves its Python
        # stack on stderr, which describe_native_failure reads
        module = "engine.measure.server_worker" if kind == SERVER else "engine.runtime.worker"
        argv = [self._python, "-X", "faulthandler", "-m", module]
        if kind == SERVER and self.server is not None:
            argv += ["--server", str(self.server)]
        self._awaiting_hello = True
        self._proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            cwd=str(REPO_ROOT),
            bufsize=0,
        )
        proc = self._proc
        threading.Thread(target=self._read_stdout, args=(proc,), name="engine-stdout", daemon=True).start()
        threading.Thread(target=self._read_stderr, args=(proc,), name="engine-stderr", daemon=True).start()
        try:
            ev = self.wait_for(("hello", "fatal"), timeout=timeout)
        except TimeoutError as exc:
            self.kill()
            raise EngineError("timeout", f"the engine worker did not start within {timeout:.0f} s") from exc
        finally:
            self._awaiting_hello = False
        if ev["event"] == "fatal":
            self._set_state(ERROR, ev["message"])
            proc.wait(timeout=30)
            raise EngineError(ev["kind"] or "fatal", ev["message"] or "the engine could not start")
        ev = cast(HelloEvent, ev)
        if ev.get("protocol") != protocol.PROTOCOL_VERSION:
            self.kill()
            msg = (
                f"the engine worker speaks protocol {ev.get('protocol')}, this client speaks "
                f"{protocol.PROTOCOL_VERSION}; reinstall SpecTune so both match"
            )
            self._set_state(ERROR, msg)
            raise EngineError("version_mismatch", msg)
        self.hello = ev
        self.engine_kind = kind
        self._set_state(READY)
        return ev

    def restart(self, timeout: float = 600.0) -> HelloEvent:
        self.kill()
        return self.start(timeout=timeout)

    def kill(self) -> None:
        """Stop the worker at once (no goodbye)."""
        self._closing = True
        proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
        self._set_state(STOPPED)

    def close(self, timeout: float = 30.0) -> None:
        """Ask the worker to exit, then make sure it has."""
        proc = self._proc
        if proc is None:
            return
        self._closing = True
        if proc.poll() is None:
            try:
                self.send("shutdown")
                proc.wait(timeout=timeout)
            except (OSError, EngineError, subprocess.TimeoutExpired):
                proc.kill()
                proc.wait(timeout=30)
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            try:
                if stream:
                    stream.close()
            except OSError:
                pass
        self._set_state(STOPPED)

    def __enter__(self) -> EngineClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def stderr_tail(self) -> str:
        return "".join(self._stderr_tail)

    # -- reading ----------------------------------------------------------
    def _read_stdout(self, proc: subprocess.Popen) -> None:
        assert proc.stdout is not None
        events = self._events  # this process's queue: a restart makes a new one
        try:
            for line in proc.stdout:
                try:
                    ev = protocol.decode(line)
                except protocol.ProtocolError:
                    self._stderr_tail.append(f"[unparsable output] {line[:200]!r}\n")
                    continue
                self._on_event(cast(Event, ev))  # the worker wrote it as one (engine.runtime.events)
        except (ValueError, OSError):
            # close() closed the pipe before (ValueError) or while (EBADF) this thread read it: the
            # process is going anyway
            if not (proc.stdout.closed or self._closing):
                raise
        code = proc.wait()
        if proc is not self._proc:
            return
        if self._closing:
            self.last_exit_code = code
            self._set_state(STOPPED)
            # wake a request still waiting on another thread (kill() from a cancel button)
            events.put(CrashedEvent(event="stopped", message="the engine process was stopped", exit_code=code))
            return
        time.sleep(0.05)  # let the stderr reader catch the last lines
        stderr = self.stderr_tail
        cause = first_fault(code, stderr)
        self.last_exit_code = cause
        tail = stderr.strip().splitlines()[-8:]
        msg = f"the engine process {_describe_exit(cause)}"
        if cause == -signal.SIGILL and self.state == LOADING:
            msg += (
                " while loading: this CPU reports instructions (AMX / AVX-512) that the system does not let "
                "llama.cpp use for repacked weights; load again with weight repacking off (--no-repack)"
            )
        if tail:
            msg += ":\n" + "\n".join(tail)
        self.loaded = None
        self._set_state(CRASHED, msg)
        self._emit(CrashedEvent(event="crashed", message=msg, exit_code=cause))

    def _read_stderr(self, proc: subprocess.Popen) -> None:
        assert proc.stderr is not None
        for raw in proc.stderr:
            self._stderr_tail.append(raw.decode(errors="replace"))

    def _on_event(self, ev: Event) -> None:
        if ev["event"] == "cycles" and self._expand_cycles:
            # the worker batches cycles; callers see one "cycle" event each
            for cyc in ev["cycles"]:
                self._emit(CycleEvent(event="cycle", id=ev["id"], run=ev["run"], **cyc))
            return
        if ev["event"] == "loaded":
            self.loaded = ev
            self._set_state(READY)
        elif ev["event"] in ("done", "cancelled", "unloaded"):
            if ev["event"] == "unloaded":
                self.loaded = None
            self._set_state(READY)
        elif ev["event"] == "started":
            self._set_state(RUNNING)
        elif ev["event"] == "error" and ev["kind"] == "cancelled" and self.state == LOADING:
            self.loaded = None
            self._set_state(READY)  # a cancelled load: the worker is idle with nothing loaded
            self.last_error = ev["message"]
        elif ev["event"] == "error":
            if self.state in (LOADING, RUNNING):
                self._set_state(ERROR, ev["message"])
            self.last_error = ev["message"]
        self._emit(ev)

    def _emit(self, ev: Event) -> None:
        kind = ev.get("event")
        if (
            self._queue_events
            or kind in ("hello", "fatal")
            or (self._awaiting_hello and kind in ("crashed", "stopped"))
        ):
            self._events.put(ev)
        if self.on_event is not None and not (self._quiet_start and kind in ("crashed", "fatal")):
            self.on_event(ev)

    def _set_state(self, state: str, message: str | None = None) -> None:
        self.state = state
        if message:
            self.last_error = message
        if self._quiet_start and state in (ERROR, CRASHED):
            return
        if self.on_event is not None and state:
            self.on_event(StateEvent(event="state", state=state, message=message or ""))

    def next_event(self, timeout: float | None = None) -> Event:
        try:
            return self._events.get(timeout=timeout)
        except queue.Empty:
            raise TimeoutError(f"no event from the engine within {timeout} s") from None

    def wait_for(self, kinds: tuple[str, ...], req_id: Any = None, timeout: float | None = None) -> Event:
        """Next event of one of ``kinds`` (for req_id when given); errors for req_id and crashes raise."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            ev = self._event_before(deadline, req_id)
            if ev.get("event") in kinds and (req_id is None or ev.get("id") in (req_id, None)):
                return ev

    def _event_before(self, deadline: float | None, req_id: Any = None) -> Event:
        """The next event before the deadline (monotonic; None: no limit). A crash, a stop, and an error for
        req_id (any error when None) raise instead of returning."""
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        ev = self.next_event(timeout=left)
        if ev["event"] == "crashed":
            raise EngineCrashed(ev["message"])
        if ev["event"] == "stopped":
            raise EngineCrashed("the engine process was stopped before it answered")
        if ev["event"] == "error" and (req_id is None or ev["id"] == req_id):
            raise EngineError(ev["kind"] or "error", ev["message"])
        return ev

    # -- requests ---------------------------------------------------------
    def send(self, cmd: str, **fields: Any) -> int:
        proc = self._proc
        if proc is None or proc.poll() is not None or proc.stdin is None:
            raise EngineCrashed(self.last_error or "the engine process is not running")
        req_id = next(self._ids)
        data = protocol.encode({"cmd": cmd, "id": req_id, **fields})
        with self._send_lock:
            try:
                proc.stdin.write(data)
                proc.stdin.flush()
            except (BrokenPipeError, OSError) as exc:
                raise EngineCrashed(self.last_error or f"the engine process is gone ({exc})") from exc
        return req_id

    def load(self, settings: LoadSettings, timeout: float | None = 600.0, repack_fallback: bool = True) -> LoadedEvent:
        """Load a pair; returns the worker's "loaded" event.

        repack_fallback: when the engine dies with SIGILL while loading with weight repacking on
        (seen with Q8_0 on CPUs whose AMX the system does not enable), restart it and load again
        with repacking off. The event then carries ``"repack": False`` and a ``"notice"``, and the
        caller must use those settings from then on (an exported command needs -nr)."""
        self._set_state(LOADING)
        req = self.send("load", load=to_dict(settings))
        try:
            return cast(LoadedEvent, self.wait_for(("loaded",), req, timeout))
        except EngineCrashed:
            if not (repack_fallback and settings.repack and self.last_exit_code == -signal.SIGILL):
                raise
        self.restart()
        ev = self.load(dataclasses.replace(settings, repack=False), timeout, repack_fallback=False)
        ev["repack"] = False
        ev["notice"] = (
            "the engine crashed (SIGILL) loading with CPU weight repacking, so the pair was "
            "loaded again with repacking off (llama-server's -nr)"
        )
        return ev

    def configure(
        self, spec: dict | None = None, sampling: dict | None = None, timeout: float = 60.0
    ) -> ConfiguredEvent:
        req = self.send("configure", spec=spec or {}, sampling=sampling or {})
        return cast(ConfiguredEvent, self.wait_for(("configured",), req, timeout))

    def start_generate(
        self,
        prompt: Prompt,
        max_tokens: int,
        baseline: bool = False,
        run: Any = None,
        spec: dict | None = None,
        sampling: dict | None = None,
        batch_ms: float | None = None,
        fresh: bool = True,
    ) -> int:
        """fresh: the speculators forget earlier generations first (engine.runtime.binding.Engine.forget);
        False keeps them learning across generations, as one long-running llama-server does."""
        fields: dict[str, Any] = {} if batch_ms is None else {"batch_ms": batch_ms}
        if isinstance(prompt, Conversation):
            fields["messages"] = prompt.messages
        else:
            fields["prompt"] = prompt
        return self.send(
            "generate",
            max_tokens=max_tokens,
            baseline=baseline,
            run=run,
            spec=spec or {},
            sampling=sampling or {},
            fresh=fresh,
            **fields,
        )

    def generate(
        self,
        prompt: Prompt,
        max_tokens: int,
        baseline: bool = False,
        spec: dict | None = None,
        sampling: dict | None = None,
        timeout: float | None = None,
        batch_ms: float | None = None,
        fresh: bool = True,
    ) -> Iterator[Event]:
        """Yield the events of one generation: started, cycle..., updated (mid-run knob changes),
        errors for other requests (a refused update), and the final done or cancelled."""
        req = self.start_generate(
            prompt, max_tokens, baseline, spec=spec, sampling=sampling, batch_ms=batch_ms, fresh=fresh
        )
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            ev = self._event_before(deadline, req)
            kind = ev.get("event")
            if kind in ("state", "cancel_sent"):
                continue
            yield ev
            if kind in ("done", "cancelled") and ev.get("id") == req:
                return

    def update(self, spec: dict | None = None, sampling: dict | None = None) -> int:
        return self.send("update", spec=spec or {}, sampling=sampling or {})

    def cancel(self) -> int:
        return self.send("cancel")

    def measure(
        self, which: str, sizes: list[int], n_past: int = 256, reps: int = 5, timeout: float | None = 600.0
    ) -> dict[int, float]:
        req = self.send("measure", which=which, sizes=list(sizes), n_past=n_past, reps=reps)
        measured = cast(MeasuredEvent, self.wait_for(("measured",), req, timeout))
        return {int(k): v for k, v in measured["ms"].items()}

    def chat_prompt(self, conversation: Conversation, timeout: float = 60.0) -> ChatEvent:
        """The target's chat template applied to a conversation, as llama-server's chat endpoint
        applies it: {"prompt", "format", "explicit_template", "supports_thinking", ...}."""
        return cast(ChatEvent, self.wait_for(("chat",), self.send("chat", messages=conversation.messages), timeout))

    def memory(self, timeout: float = 60.0) -> list[MemoryItem]:
        return cast(MemoryEvent, self.wait_for(("memory",), self.send("memory"), timeout))["items"]
