"""LlamaServer's stop path on a stand-in process that behaves as llama-server does while it streams:
it ignores SIGTERM. (The real server in that state is in tests/test_validate.py.)"""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from engine.llama.server import LlamaServer

IGNORES_SIGTERM = (
    "import signal, sys, time\n"
    "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "print('ready', flush=True)\n"
    "time.sleep(120)\n"
)


@pytest.mark.skipif(sys.platform == "win32", reason="SIGTERM cannot be ignored on Windows")
def test_terminate_kills_a_server_that_ignores_sigterm_after_the_grace_period():
    srv = LlamaServer(["llama-server-stand-in"])
    proc = subprocess.Popen([sys.executable, "-c", IGNORES_SIGTERM], stdout=subprocess.PIPE)
    assert proc.stdout.readline().strip() == b"ready"  # its handler is in place
    srv._proc = proc
    t0 = time.monotonic()
    srv.terminate(grace_s=0.5)
    time.sleep(0.3)
    assert proc.poll() is None, "SIGTERM alone does not end it"
    proc.wait(timeout=10)
    assert 0.4 < time.monotonic() - t0 < 5
    assert proc.returncode == -9  # killed, not exited
    srv.stop()  # reaps nothing twice, raises nothing
    proc.stdout.close()
