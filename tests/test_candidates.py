"""One list of the settings SpecTune measures (engine.measure.candidates, issue 50)."""

from __future__ import annotations

import re
from pathlib import Path

from engine.core.paths import REPO_ROOT
from engine.core.settings import LoadSettings
from engine.measure import candidates, concurrent_tune, quick_check
from engine.measure.candidates import NGRAM_MOD, NGRAM_SIMPLE, QUICK, with_draft

# a speculative setting spelled out: SpecSettings("draft-simple", ...), SpecSettings("ngram-mod", ...), ...
SPELLED_OUT = re.compile(r"SpecSettings\(\s*(spec_type\s*=\s*)?\"(?!none\")")


def test_no_module_of_the_measurements_spells_out_a_setting_of_its_own():
    """A setting written anywhere else is a second list that drifts from this one, as ngram-mod's sizes did."""
    measure = REPO_ROOT / "engine" / "measure"
    own = {
        p.name: [n for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if SPELLED_OUT.search(line)]
        for p in sorted(measure.glob("*.py"))
        if p.name != "candidates.py"
    }
    assert not {name: lines for name, lines in own.items() if lines}
    assert SPELLED_OUT.search('SpecSettings("ngram-mod", ngram_mod_n_match=8)')  # the check sees one
    assert not SPELLED_OUT.search('SpecSettings("none")')


def test_the_quick_check_the_demo_and_the_concurrency_tune_use_the_same_ngram_sizes():
    assert quick_check.CANDIDATES == QUICK
    specs = concurrent_tune.candidate_specs(LoadSettings(target=Path("t.gguf"), draft=Path("d.gguf")))
    assert specs[-1] == NGRAM_MOD and NGRAM_MOD in QUICK  # not llama.cpp's defaults, as it once was
    combined = with_draft(NGRAM_SIMPLE, 3)
    assert combined.types == ["ngram-simple", "draft-simple"] and combined.draft_n_max == 3
    assert (combined.ngram_size_n, combined.ngram_size_m) == (NGRAM_SIMPLE.ngram_size_n, NGRAM_SIMPLE.ngram_size_m)
    assert candidates.tuner_extras(5)[0].draft_p_min == 0.5
