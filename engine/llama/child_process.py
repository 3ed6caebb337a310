"""Starting a llama-server that dies with SpecTune, however SpecTune ends.

A server is stopped when its block ends, but a SpecTune killed outright (SIGKILL, an out-of-memory kill, a
crash in native code) runs no cleanup, and its llama-server would go on holding the port and gigabytes of
model memory with nobody to stop it. On Linux the kernel can send the child a signal when its parent dies
(prctl PR_SET_PDEATHSIG). The kernel ties that to the *thread* that forked the child, not the process: a
server started from a short-lived thread (a tune's, a serve session's) would be killed the moment that
thread returned. So every server is forked by one launcher thread that lives as long as the process, and
the signal fires only when the process goes.

On Windows every server joins one job object that kills its processes when its last handle closes
(JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE). SpecTune holds that handle until it exits, and Windows closes a
process's handles however it ends, so the job's servers go with it. (The server runs a moment before it
joins: llama-server starts no processes of its own, so nothing escapes in that moment.)

On macOS this is a plain Popen: there the block's cleanup is what stops the server.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import queue
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

PR_SET_PDEATHSIG = 1  # linux/prctl.h
# winnt.h: the job's extended limits (JOBOBJECTINFOCLASS 9) and the flag that kills its processes on close
JOB_OBJECT_EXTENDED_LIMIT_INFORMATION = 9
JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE = 0x2000


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


class _KillOnCloseJob:
    """Windows: one job object for the process's lifetime; its children are killed when the job's handle
    closes, which Windows does when this process ends, crashed or not."""

    def __init__(self) -> None:
        self._handle: int | None = None
        self._lock = threading.Lock()
        self.error = ""  # why children are not tied, once a job could not be made or joined

    def _job(self, kernel32: Any) -> int | None:
        handle = kernel32.CreateJobObjectW(None, None)
        if not handle:
            self.error = f"CreateJobObject failed (error {ctypes.get_last_error()})"  # type: ignore[attr-defined]
            return None
        info = _ExtendedLimits()
        info.BasicLimitInformation.LimitFlags = JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE
        if not kernel32.SetInformationJobObject(
            handle, JOB_OBJECT_EXTENDED_LIMIT_INFORMATION, ctypes.byref(info), ctypes.sizeof(info)
        ):
            self.error = f"SetInformationJobObject failed (error {ctypes.get_last_error()})"  # type: ignore[attr-defined]
            kernel32.CloseHandle(handle)
            return None
        return int(handle)

    def add(self, proc: subprocess.Popen) -> None:
        """Put proc in the job. A failure leaves it running untied (the block's cleanup still stops it), and
        says why in self.error."""
        with self._lock:
            kernel32 = _kernel32()
            if self._handle is None and not self.error:
                self._handle = self._job(kernel32)
            if self._handle is None:
                return
            if not kernel32.AssignProcessToJobObject(self._handle, int(proc._handle)):  # type: ignore[attr-defined]
                self.error = f"AssignProcessToJobObject failed (error {ctypes.get_last_error()})"  # type: ignore[attr-defined]


@functools.cache
def _kernel32() -> Any:
    """kernel32's job functions, typed once (a HANDLE is pointer-wide: left untyped, ctypes would cut it to 32 bits)."""
    from ctypes import wintypes

    kernel32 = ctypes.WinDLL("kernel32", use_last_error=True)  # type: ignore[attr-defined]
    kernel32.CreateJobObjectW.restype = wintypes.HANDLE
    kernel32.CreateJobObjectW.argtypes = (wintypes.LPVOID, wintypes.LPCWSTR)
    kernel32.SetInformationJobObject.argtypes = (wintypes.HANDLE, ctypes.c_int, wintypes.LPVOID, wintypes.DWORD)
    kernel32.AssignProcessToJobObject.argtypes = (wintypes.HANDLE, wintypes.HANDLE)
    kernel32.CloseHandle.argtypes = (wintypes.HANDLE,)
    return kernel32


def _extended_limits_type() -> type[ctypes.Structure]:
    """JOBOBJECT_EXTENDED_LIMIT_INFORMATION (winnt.h), in the platform's own sizes."""
    size_t, large = ctypes.c_size_t, ctypes.c_int64

    class Basic(ctypes.Structure):
        _fields_ = [
            ("PerProcessUserTimeLimit", large),
            ("PerJobUserTimeLimit", large),
            ("LimitFlags", ctypes.c_uint32),
            ("MinimumWorkingSetSize", size_t),
            ("MaximumWorkingSetSize", size_t),
            ("ActiveProcessLimit", ctypes.c_uint32),
            ("Affinity", size_t),
            ("PriorityClass", ctypes.c_uint32),
            ("SchedulingClass", ctypes.c_uint32),
        ]

    class IoCounters(ctypes.Structure):
        _fields_ = [
            (f"{kind}{unit}", ctypes.c_uint64)
            for unit in ("OperationCount", "TransferCount")
            for kind in ("Read", "Write", "Other")
        ]

    class Extended(ctypes.Structure):
        _fields_ = [
            ("BasicLimitInformation", Basic),
            ("IoInfo", IoCounters),
            ("ProcessMemoryLimit", size_t),
            ("JobMemoryLimit", size_t),
            ("PeakProcessMemoryUsed", size_t),
            ("PeakJobMemoryUsed", size_t),
        ]

    return Extended


_ExtendedLimits = _extended_limits_type()
_JOB = _KillOnCloseJob() if sys.platform == "win32" else None


def popen_tied(argv: list[str], **kwargs: Any) -> subprocess.Popen:
    """subprocess.Popen(argv, **kwargs), for a child that must not outlive this process (see above)."""
    if _JOB is not None:
        proc = subprocess.Popen(argv, **kwargs)
        _JOB.add(proc)
        return proc
    if _PRCTL is None:
        return subprocess.Popen(argv, **kwargs)
    return _LAUNCHER.popen(argv, **kwargs)
