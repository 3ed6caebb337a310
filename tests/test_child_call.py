"""engine.core.child_call: the desktop app's catalog ranking and header parses, computed in a child process."""

from __future__ import annotations

import os
import sys
import time

import pytest

from engine.core import child_call
from engine.models.gguf_inspect import GGUFInspectError, header_cached, inspect_gguf
from engine.models.synthetic import PairSpec, write_pair
from engine.planning.advice.recommend import rank_catalog

from .fake_nvml import FakeGpu, FakeNVML


@pytest.mark.slow
def test_the_ranking_apart_is_the_ranking_here():
    """Same catalog, same hardware (probed here, from the NVML stand-in): the same ranking and fits."""
    nvml = FakeNVML([FakeGpu()])
    here = rank_catalog(None, nvml, 8192)
    apart = rank_catalog(None, nvml, 8192, apart=True)
    assert here.recommendation is not None and apart.recommendation is not None
    # free RAM is measured again by each call; the ranking is what must agree
    ranked = [(c.target.filename, c.draft.filename) for c in here.recommendation.recommended]
    assert ranked and ranked == [(c.target.filename, c.draft.filename) for c in apart.recommendation.recommended]
    assert [(f.name, f.fits) for f in apart.fits or []] == [(f.name, f.fits) for f in here.fits or []]


def test_a_header_parsed_apart_is_the_header_parsed_here_and_is_kept(tmp_path):
    target, _ = write_pair(tmp_path, PairSpec())
    os.utime(target, (time.time() - 60, time.time() - 60))  # settled, so kept
    apart = inspect_gguf(target, apart=True)
    assert header_cached(target)
    here = child_call.call("engine.models.gguf_inspect", "read_header", path=str(target))
    assert apart.metadata == here.metadata and apart.vocab == here.vocab
    assert [t.name for t in apart.tensors] == [t.name for t in here.tensors]


def test_a_broken_file_read_apart_says_why(tmp_path):
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"GGUF" + b"\x03\x00\x00\x00" + b"\x01")
    with pytest.raises(GGUFInspectError, match="truncated"):
        inspect_gguf(broken, apart=True)


def test_an_error_in_the_child_is_raised_here():
    with pytest.raises(ValueError, match="not computed in a child process"):
        child_call.call("os", "system", command="true")  # only child_call.CALLABLE runs there


def test_a_child_that_dies_is_said_so(monkeypatch, tmp_path):
    gone = "import sys; print('gone', file=sys.stderr); sys.exit(3)"
    monkeypatch.setattr(child_call, "ARGV", (sys.executable, "-c", gone))
    with pytest.raises(child_call.ChildCallError, match=r"exit status 3\): gone"):
        child_call.call("engine.planning.advice.recommend", "rank_for")
    # a header still reads when no child can run: parsed in this process
    target, _ = write_pair(tmp_path, PairSpec())
    assert inspect_gguf(target, apart=True).vocab is not None
