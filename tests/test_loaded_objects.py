"""The engine worker's loaded objects (bench/loaded_objects.py): one file per llama.cpp library, the C++ and
OpenMP runtimes from the system, and no llama.cpp library that needs static TLS. Two of the hypotheses for the
H200's SIGSEGV inside dlopen(libspecrt) (issue 48), kept false here where they can be checked without a GPU."""

from __future__ import annotations

import sys

import pytest

from bench.loaded_objects import describe, mapped_objects, verdicts
from engine.runtime.client import EngineClient

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/PID/maps")]


def test_the_worker_maps_one_copy_of_each_llama_cpp_library():
    with EngineClient(engine="native") as client:
        client.start()
        objects = [describe(p) for p in mapped_objects(client.pid)]
    stems = {o.stem for o in objects}
    assert {"libspecrt", "libllama", "libllama-common", "libggml", "libggml-base"} <= stems
    found = {name: (confirmed, evidence) for name, confirmed, evidence in verdicts(objects)}
    for hypothesis in ("1 ", "2 ", "3 "):
        name = next(n for n in found if n.startswith(hypothesis))
        assert not found[name][0], f"{name}: {found[name][1]}"
