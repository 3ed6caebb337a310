"""A llama-server SpecTune starts must not outlive SpecTune: killed outright, it takes its children along,
even those started from threads that have since returned (engine.llama.child_process).

Linux runs this in the suite. On Windows (checked under Wine: packaging/wine_check.sh runs this file with
Windows' Python) the parent's kill is TerminateProcess, which runs no cleanup either."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux") and sys.platform != "win32",
    reason="children are tied to SpecTune on Linux (parent-death signal) and Windows (job object) only",
)

# a SpecTune stand-in: starts a long-sleeping child from a thread that then returns, says the child's pid,
# and waits to be killed
PARENT = textwrap.dedent(
    """
    import subprocess, sys, threading, time
    from engine.llama.child_process import popen_tied

    started = []
    sleeper = [sys.executable, "-c", "import time; time.sleep(120)"]
    t = threading.Thread(target=lambda: started.append(popen_tied(sleeper)))
    t.start()
    t.join()
    print(started[0].pid, flush=True)
    time.sleep(120)
    """
)


def alive(pid: int) -> bool:
    """Running, not a zombie waiting to be reaped."""
    if sys.platform == "win32":
        return _windows_alive(pid)
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


def _windows_alive(pid: int) -> bool:
    import ctypes

    kernel32 = ctypes.WinDLL("kernel32")  # type: ignore[attr-defined]
    kernel32.OpenProcess.restype = ctypes.c_void_p
    kernel32.GetExitCodeProcess.argtypes = (ctypes.c_void_p, ctypes.POINTER(ctypes.c_uint32))
    kernel32.CloseHandle.argtypes = (ctypes.c_void_p,)
    handle = kernel32.OpenProcess(0x1000, False, pid)  # PROCESS_QUERY_LIMITED_INFORMATION
    if not handle:
        return False
    code = ctypes.c_uint32()
    try:
        return bool(kernel32.GetExitCodeProcess(handle, ctypes.byref(code))) and code.value == 259  # STILL_ACTIVE
    finally:
        kernel32.CloseHandle(handle)


def test_a_child_outlives_the_thread_that_started_it_but_not_the_process():
    root = Path(__file__).resolve().parent.parent
    parent = subprocess.Popen([sys.executable, "-c", PARENT], cwd=root, stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout is not None
        child = int(parent.stdout.readline())
        time.sleep(0.5)
        assert alive(child), "the child died with the thread that started it"
        parent.kill()  # SIGKILL (TerminateProcess on Windows): no cleanup of any kind runs
        parent.wait(timeout=10)
        deadline = time.monotonic() + 10
        while alive(child) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not alive(child), "the child outlived its killed parent"
    finally:
        parent.kill()


def test_a_missing_program_raises_as_popen_does(tmp_path):
    from engine.llama.child_process import popen_tied

    with pytest.raises(FileNotFoundError):
        popen_tied([str(tmp_path / "no-such-llama-server")])
