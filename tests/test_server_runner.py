"""LlamaServer's stop path on a stand-in process that behaves as llama-server does while it streams:
it ignores SIGTERM (and on one that exits on it). The real server in that state is in tests/test_validate.py.
Each step is read from the stand-in (it says when SIGTERM reaches it) and from its exit status, never
from how long something took, except the one lower bound that holds on any machine."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest

from engine.llama.server import LlamaServer

# a stand-in that says when SIGTERM reaches it; on_sigterm "ignore" carries on, "exit" dies of it
STAND_IN = (
    "import signal, sys\n"
    "def on_sigterm(*_):\n"
    "    print('SIGTERM', flush=True)\n"
    "    if sys.argv[1] == 'exit':\n"
    "        signal.signal(signal.SIGTERM, signal.SIG_DFL)\n"
    "        signal.raise_signal(signal.SIGTERM)\n"
    "signal.signal(signal.SIGTERM, on_sigterm)\n"
    "print('ready', flush=True)\n"
    "while True:\n"
    "    signal.pause()\n"
)


def stand_in(behaviour: str) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", STAND_IN, behaviour], stdout=subprocess.PIPE)
    assert proc.stdout.readline().strip() == b"ready"  # its handler is in place
    return proc


@pytest.mark.skipif(sys.platform == "win32", reason="SIGTERM cannot be ignored on Windows")
def test_terminate_kills_a_server_that_ignores_sigterm_after_the_grace_period():
    srv = LlamaServer(["llama-server-stand-in"])
    srv._proc = proc = stand_in("ignore")
    try:
        t0 = time.monotonic()
        srv.terminate(grace_s=0.5)
        assert proc.stdout.readline().strip() == b"SIGTERM", "asked to exit first, and it carried on"
        assert proc.wait(timeout=60) == -signal.SIGKILL, "then killed, not exited"
        assert time.monotonic() - t0 >= 0.5, "not before the grace period"  # a lower bound: true on any machine
        srv.stop()  # reaps nothing twice, raises nothing
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()


@pytest.mark.skipif(sys.platform == "win32", reason="no SIGTERM handlers on Windows")
def test_terminate_does_not_kill_a_server_that_exits_on_sigterm():
    srv = LlamaServer(["llama-server-stand-in"])
    srv._proc = proc = stand_in("exit")
    try:
        srv.terminate(grace_s=600)  # a kill, if one came, would come only after the test's timeout
        assert proc.stdout.readline().strip() == b"SIGTERM"
        assert proc.wait(timeout=60) == -signal.SIGTERM
        srv.stop()
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()


@pytest.mark.slow
def test_a_running_server_is_not_started_twice(pair):
    """`with LlamaServer(...)` starts it; a second start() must not spawn a second process that fails to bind
    while the first answers its health check and is left running unowned."""
    from engine.core.settings import LoadSettings, SpecSettings
    from engine.deploy.export import llama_server_argv
    from engine.llama.install import server_path
    from engine.llama.server import LlamaServer, ServerError

    argv = llama_server_argv(LoadSettings(pair[0], pair[1], ctx=512), SpecSettings("none"), None, server_path())
    with LlamaServer(argv) as srv:
        pid = srv.pid
        with pytest.raises(ServerError, match="already running"):
            srv.start()
        assert srv.pid == pid and srv.running
    assert not srv.running
