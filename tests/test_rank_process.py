"""engine.planning.rank_process: the desktop app's catalog ranking, computed in a child process."""

from __future__ import annotations

import sys

import pytest

from engine.planning import rank_process
from engine.planning.recommend import rank_catalog

from .fake_nvml import FakeGpu, FakeNVML


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


def test_an_error_in_the_child_is_raised_here():
    with pytest.raises(AttributeError, match="no_such_function"):
        rank_process.call("no_such_function")


def test_a_child_that_dies_is_said_so(monkeypatch):
    monkeypatch.setattr(
        rank_process, "ARGV", (sys.executable, "-c", "import sys; print('gone', file=sys.stderr); sys.exit(3)")
    )
    with pytest.raises(rank_process.RankProcessError, match=r"exit status 3\): gone"):
        rank_process.call("rank_for")
