"""Starting a llama-server that dies with SpecTune, however SpecTune ends.

A server is stopped when its block ends, but a SpecTune killed outright (SIGKILL, an out-of-memory kill, a
crash in native code) runs no cleanup, and its llama-server would go on holding the port and gigabytes of
model memory with nobody to stop it. On Linux the kernel can send the child a signal when its parent dies
(prctl PR_SET_PDEATHSIG). The kernel ties that to the *thread* that forked the child, not the process: a
server started from a short-lived thread (a tune's, a serve session's) would be killed the moment that
thread returned. So every server is forked by one launcher thread that lives as long as the process, and
the signal fires only when the process goes.

Elsewhere (Windows, macOS) this is a plain Popen: there the block's cleanup is what stops the server.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import queue
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

PR_SET_PDEATHSIG = 1  # linux/prctl.h


def _libc_prctl() -> Callable[..., int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    except OSError:
        return None
    return libc.prctl


_PRCTL = _libc_prctl()


def _die_with_parent() -> None:
    """Runs in the child between fork and exec: SIGKILL when the forking thread (the launcher) goes."""
    assert _PRCTL is not None
    _PRCTL(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


class _Launcher:
    """One daemon thread that forks every child, started on first use."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[tuple[list[str], dict[str, Any], Future]] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def popen(self, argv: list[str], **kwargs: Any) -> subprocess.Popen:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="child-launcher", daemon=True)
                self._thread.start()
        done: Future = Future()
        self._jobs.put((argv, kwargs, done))
        return done.result()  # re-raises the Popen's own error (a missing binary: FileNotFoundError)

    def _run(self) -> None:
        while True:
            argv, kwargs, done = self._jobs.get()
            try:
                done.set_result(subprocess.Popen(argv, preexec_fn=_die_with_parent, **kwargs))
            except BaseException as exc:  # handed to the caller, whatever it is
                done.set_exception(exc)


_LAUNCHER = _Launcher()


def popen_tied(argv: list[str], **kwargs: Any) -> subprocess.Popen:
    """subprocess.Popen(argv, **kwargs), for a child that must not outlive this process (see above)."""
    if _PRCTL is None:
        return subprocess.Popen(argv, **kwargs)
    return _LAUNCHER.popen(argv, **kwargs)
