"""Which engine measures: SpecTune's own (libspecrt, the default) or llama-server, and what happened when
SpecTune's own could not start on this machine.

The first thing an engine worker does is load libspecrt (engine.runtime.worker), in a process of its own,
so a crash there (the H200's SIGSEGV inside dlopen, bench/results/gpu_check-2026-12-04-1332.txt) is
survived by the CLI or the GUI, which then read how it died: the exit status, and the Python stack that
faulthandler wrote to stderr. ``describe_native_failure`` puts that in words a user can act on;
``EngineClient(engine="auto")`` then runs the same measurements through llama-server, which SpecTune bundles
and validates against, and keeps the reason (``native_failure()``) so that later workers of this process
go straight to llama-server instead of crashing again.
"""

from __future__ import annotations

import re
import signal
import threading

NATIVE, SERVER, AUTO = "native", "llama-server", "auto"
ENGINES = (AUTO, NATIVE, SERVER)

WHAT_STILL_WORKS = (
    "What still works: runs, baselines, the quick check and tunes measured through llama-server "
    "(--engine llama-server; in the app, Engine: llama-server), serving, export and validation, the memory "
    "plan and the predictions. What needs SpecTune's engine: knob changes inside a running generation and the "
    "cost model's calibration (forward-pass timing)."
)

_lock = threading.Lock()
# why libspecrt failed, by the library asked for (SPECTUNE_SPECRT's value; "" for the one native_build builds)
_failures: dict[str, str] = {}


def native_failure(library: str = "") -> str | None:
    """Why SpecTune's engine could not start in this process's workers, or None when it has not failed."""
    with _lock:
        return _failures.get(library)


def remember_native_failure(reason: str | None, library: str = "") -> None:
    """Set (or with None, forget: after a rebuild) the reason later ``auto`` workers go to llama-server."""
    with _lock:
        if reason is None:
            _failures.pop(library, None)
        else:
            _failures[library] = reason


def _signal_name(code: int) -> str:
    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"


# faulthandler's frame lines: '  File "/x/engine/runtime/binding.py", line 184 in load_library'
_FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+) in (?P<fn>\S+)')


_TRACE_LINES = (
    "specrt: loading",
    "Fatal Python error",
    "Current thread",
    "Thread 0x",
    "Extension modules",
    "File ",
    "<no Python frame>",
)


# what engine.runtime.binding.load_library writes to stderr before it loads the library
_LOADING = re.compile(r"^specrt: loading (?P<path>.+)$", re.M)


def describe_native_failure(exit_code: int | None, stderr_tail: str, fatal_message: str = "") -> str:
    """Why the native worker did not say hello, in words: where it died (loading libspecrt, loading a backend
    module), how, and what still works."""
    frames = [m["fn"] for m in _FRAME.finditer(stderr_tail)]
    loading = _LOADING.search(stderr_tail)
    library = loading["path"].strip() if loading else ""
    if fatal_message:
        how = f"its native library could not be loaded: {fatal_message.strip().splitlines()[0]}"
    elif exit_code is not None and exit_code < 0:
        if "load_library" in frames:
            where = f"while loading its native library ({library or 'libspecrt'})"
        elif "load_backends" in frames:
            where = "while loading llama.cpp's backend modules"
        else:
            where = "while starting"
        how = f"it crashed with {_signal_name(exit_code)} {where}"
    elif exit_code is not None:
        how = f"its process exited with status {exit_code} before it was ready"
    else:
        how = "it did not answer"
    # the worker's own last line, unless it is faulthandler's trace (whose frames were read above)
    lines = [line.strip() for line in stderr_tail.strip().splitlines() if line.strip()]
    last = next((line for line in reversed(lines) if not line.startswith(_TRACE_LINES)), "")
    detail = f" (its last line: {last[:200]})" if last and not fatal_message else ""
    return f"SpecTune's engine could not start on this machine: {how}{detail}. {WHAT_STILL_WORKS}"
