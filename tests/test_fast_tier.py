"""The rule behind `scripts/test.sh --fast` (tests/conftest.py): which child processes make a test slow."""

from __future__ import annotations

import sys

from .conftest import _what_it_starts


def test_a_server_a_quantize_the_engine_worker_and_the_cli_make_a_test_slow():
    assert _what_it_starts(["/opt/llama/bin/llama-server", "-m", "t.gguf", "--port", "8080"]) == "llama-server"
    assert _what_it_starts(["llama-quantize", "a.gguf", "b.gguf", "Q4_K_M"]) == "llama-quantize"
    assert _what_it_starts([sys.executable, "-X", "faulthandler", "-m", "engine.runtime.worker"]) == (
        "engine.runtime.worker"
    )
    assert _what_it_starts([sys.executable, "-m", "engine.measure.server_worker", "--server", "x"]) == (
        "engine.measure.server_worker"
    )
    assert _what_it_starts([sys.executable, "-m", "engine.cli", "predict"]) == "engine.cli"
    assert _what_it_starts(".venv/bin/spectune") == "spectune"


def test_asking_a_binary_what_it_is_or_running_other_programs_does_not():
    assert _what_it_starts(["llama-server", "--help"]) is None
    assert _what_it_starts(["llama-server", "--version"]) is None
    assert _what_it_starts(["ps", "-o", "comm=", "--ppid", "1"]) is None
    assert _what_it_starts([sys.executable, "-m", "engine.core.child_call"]) is None
