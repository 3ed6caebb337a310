"""Every Lab knob explains itself: a tooltip naming the llama-server flag it becomes, a flag that the
exporter writes for it and that the pinned llama-server build accepts, with that build's default."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("PySide6")

from app.pages.lab.controls import LabControls  # noqa: E402
from app.pages.lab.knob_help import KNOB_HELP  # noqa: E402
from engine.core.settings import LoadSettings, SamplingSettings, SpecSettings  # noqa: E402
from engine.deploy.export import server_argv  # noqa: E402
from engine.llama.dialect import CURRENT, DialectError, read_help  # noqa: E402


@pytest.fixture
def controls(qtbot):
    w = LabControls()
    qtbot.addWidget(w)
    return w


def test_every_knob_widget_has_a_tooltip_with_its_flag(controls):
    for name, help_ in KNOB_HELP.items():
        widget = getattr(controls, name)
        tip = widget.toolTip()
        assert help_.flag in tip.split(), (name, tip)
        assert help_.sentence in tip and help_.default in tip, name


def test_form_labels_carry_the_same_explanation(controls):
    from PySide6.QtWidgets import QLabel

    labels = {label.text(): label.toolTip() for label in controls.findChildren(QLabel)}
    assert "--spec-draft-n-min" in labels["n-min"]
    assert "--spec-draft-n-max" in labels["K (draft n-max)"]
    assert "--spec-ngram-mod-n-max" in labels["ngram-mod min / max"]


def test_the_exporter_writes_every_flag_the_tooltips_name(tmp_path: Path):
    """Settings that differ from every default, so the exporter has to write each flag out."""
    load = LoadSettings(
        target=tmp_path / "t.gguf",
        draft=tmp_path / "d.gguf",
        ctx=2048,
        ngl=5,
        threads=2,
        repack=False,
        device="CUDA0",
        device_draft="CUDA1",
        n_cpu_moe=4,
    )
    spec = SpecSettings(
        spec_type="ngram-simple,ngram-mod,draft-simple",
        draft_n_max=7,
        draft_n_min=1,
        draft_p_min=0.5,
        ngram_size_n=5,
        ngram_size_m=9,
        ngram_min_hits=2,
        ngram_mod_n_match=11,
        ngram_mod_n_min=3,
        ngram_mod_n_max=13,
    )
    argv = server_argv(load, spec, SamplingSettings(temp=0.7, top_k=20, top_p=0.9, seed=7), "llama-server", CURRENT)
    missing = [h.flag for h in KNOB_HELP.values() if h.flag not in argv]
    assert not missing, f"tooltips name flags the export never writes: {missing}"


def test_the_pinned_llama_server_has_each_flag_with_that_default():
    try:
        server_help = read_help()
    except (DialectError, OSError) as exc:
        pytest.skip(f"no bundled llama-server to ask: {exc}")
    for name, help_ in KNOB_HELP.items():
        assert server_help.has(help_.flag), (name, help_.flag)
        # a flag whose --help states no default: the table says what llama.cpp does without it
        stated = help_.default if help_.stated else None
        assert server_help.default_of(help_.flag) == stated, (name, server_help.default_of(help_.flag))
