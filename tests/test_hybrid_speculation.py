"""Speculation on hybrid (recurrent + attention) models, Qwen3.5's layout: a generated qwen35 pair.

A recurrent state cannot drop the rejected tail of a draft, so specrt does what llama-server does:
it saves the target's state before verifying, and after a partial accept restores it and verifies
the accepted tokens again (a replay, which also yields one more token). With draft-mtp, llama.cpp
keeps K recurrent-state snapshots instead, and the replay is needed only for a draft longer than the
K the model was loaded for. Either way the text is the target's own, and the counts are llama-server's.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from engine.core.settings import LoadSettings, SamplingSettings, SpecSettings
from engine.deploy.export import llama_server_argv
from engine.llama.install import server_path
from engine.llama.server import LlamaServer, server_summary
from engine.models.gguf_inspect import inspect_gguf
from engine.models.synthetic import qwen35_is_recurrent
from engine.runtime.binding import Cycle, Engine

from .conftest import PROMPTS

GREEDY = SamplingSettings(temp=0.0)
N = 64


def _write(out: Path, *flags: str) -> tuple[Path, Path]:
    argv = [sys.executable, "-m", "testmodels.synthetic", str(out), "--hybrid", "--dtype", "f16", *flags]
    written = json.loads(subprocess.run(argv, capture_output=True, text=True, check=True).stdout)
    return Path(written["target"]), Path(written["draft"])


@pytest.fixture(scope="module")
def hybrid_pair(tmp_path_factory) -> tuple[Path, Path]:
    """An 8-layer qwen35 target (layers 3 and 7 attend, the rest are gated delta-net) and its first 4
    layers as the draft."""
    return _write(tmp_path_factory.mktemp("hybrid"))


@pytest.fixture(scope="module")
def mtp_target(tmp_path_factory) -> Path:
    """The same target with Qwen3.5's MTP block after its trunk."""
    return _write(tmp_path_factory.mktemp("hybrid_mtp"), "--mtp")[0]


def _generate(engine: Engine, prompt: str, spec: SpecSettings, baseline: bool = False) -> tuple[list[int], list[Cycle]]:
    engine.set_spec(spec)
    engine.set_sampling(GREEDY)
    engine.begin(prompt, N, baseline=baseline)
    cycles = []
    while (cycle := engine.step()) is not None:
        cycles.append(cycle)
    return [t for c in cycles for t in c.tokens], cycles


def test_the_generated_pair_is_qwen35_with_recurrent_layers(hybrid_pair):
    target, draft = (inspect_gguf(p) for p in hybrid_pair)
    assert (target.architecture, target.block_count, draft.block_count) == ("qwen35", 8, 4)
    assert [i for i in range(8) if not qwen35_is_recurrent(i)] == [3, 7]
    assert target.arch_value("ssm.state_size") and target.arch_value("full_attention_interval") == 4
    names = {t.name for t in target.tensors}
    assert {"blk.0.ssm_conv1d.weight", "blk.0.attn_qkv.weight", "blk.3.attn_q.weight"} <= names
    assert "blk.3.ssm_conv1d.weight" not in names


def test_a_draft_with_no_attention_layer_is_refused(tmp_path):
    # llama.cpp cannot run a hybrid model whose every layer is recurrent (it fails an assertion)
    argv = [sys.executable, "-m", "testmodels.synthetic", str(tmp_path), "--hybrid", "--draft-layers", "2"]
    done = subprocess.run(argv, capture_output=True, text=True)
    assert done.returncode == 2 and "at least 4 layers" in done.stderr


@pytest.mark.parametrize("k", [3, 8])
def test_drafts_on_a_hybrid_target_replay_and_keep_the_targets_text(hybrid_pair, k):
    target, draft = hybrid_pair
    spec = SpecSettings("draft-simple", draft_n_max=k)
    with Engine(LoadSettings(target, draft, ctx=1024, threads=1)) as engine:
        for prompt in PROMPTS[:3]:
            plain, _ = _generate(engine, prompt, spec, baseline=True)
            tokens, cycles = _generate(engine, prompt, spec)
            assert tokens == plain, "speculation must not change the text at temperature 0"
            steps = [c for c in cycles if not c.is_prompt]
            replays = [c for c in steps if c.replayed]
            # a partly rejected draft is verified again: the accepted prefix, the target's own token, and one more
            assert replays and all(c.emitted == c.accepted + 2 or c.is_eog for c in replays)
            assert all(c.emitted == c.accepted + 1 for c in steps if not c.replayed and not c.is_eog)
            assert all(c.accepted < c.drafted for c in replays)


def test_timing_a_forward_pass_leaves_the_recurrent_state_as_it_was(hybrid_pair):
    target, draft = hybrid_pair
    spec = SpecSettings("draft-simple", draft_n_max=4)
    with Engine(LoadSettings(target, draft, ctx=1024, threads=1)) as engine:
        before, _ = _generate(engine, PROMPTS[0], spec)
        # the repeated passes at the same positions would fail if the state kept the timed tokens
        assert engine.time_forward("target", 5, n_past=64, reps=3) > 0
        assert engine.time_forward("draft", 1, n_past=64, reps=3) > 0
        after, _ = _generate(engine, PROMPTS[0], spec)
    assert after == before


def test_draft_mtp_beyond_the_loaded_k_replays_and_keeps_the_targets_text(mtp_target):
    # loaded for K=2: two state snapshots per sequence; a 5-token draft rolls back by checkpoint and replay
    with Engine(LoadSettings(mtp_target, ctx=1024, threads=1, draft_n_max_at_load=2)) as engine:
        plain, _ = _generate(engine, PROMPTS[1], SpecSettings("none"), baseline=True)
        short, short_cycles = _generate(engine, PROMPTS[1], SpecSettings("draft-mtp", draft_n_max=2))
        long, long_cycles = _generate(engine, PROMPTS[1], SpecSettings("draft-mtp", draft_n_max=5))
    assert short == plain and long == plain
    assert not any(c.replayed for c in short_cycles), "within the snapshots a rejected draft is trimmed in place"
    assert any(c.replayed for c in long_cycles)


def _server_counts(load: LoadSettings, spec: SpecSettings, prompts) -> list[dict]:
    argv = llama_server_argv(load, spec, GREEDY, server_path(), extra=["--fit", "off"])
    with LlamaServer(argv) as srv:
        return [server_summary(srv.complete(p, N)) for p in prompts]


def _lab_counts(load: LoadSettings, spec: SpecSettings, prompts) -> list[dict]:
    out = []
    with Engine(load) as engine:
        for prompt in prompts:
            _, cycles = _generate(engine, prompt, spec)
            out.append(
                {
                    "text": "".join(c.text for c in cycles),
                    "drafted": sum(c.drafted for c in cycles),
                    "accepted": sum(c.accepted for c in cycles),
                }
            )
    return out


@pytest.mark.server
@pytest.mark.parametrize(
    "spec",
    [SpecSettings("draft-simple", draft_n_max=4), SpecSettings("ngram-mod,draft-simple", draft_n_max=6)],
    ids=lambda s: f"{s.spec_type}-K{s.draft_n_max}",
)
def test_same_counts_as_llama_server_on_a_hybrid_pair(hybrid_pair, spec):
    target, draft = hybrid_pair
    load = LoadSettings(target, draft, ctx=1024, threads=1, threads_batch=1)
    prompts = PROMPTS[:3]
    server = _server_counts(load, spec, prompts)
    lab = _lab_counts(load, spec, prompts)
    for i, (ours, theirs) in enumerate(zip(lab, server)):
        assert (ours["drafted"], ours["accepted"]) == (theirs["drafted"], theirs["accepted"]), i
        assert ours["text"] == theirs["text"], i
    assert 0 < sum(s["accepted"] for s in server) < sum(s["drafted"] for s in server), "partial accepts must happen"


@pytest.mark.server
@pytest.mark.parametrize("k", [2, 6])
def test_same_counts_as_llama_server_with_draft_mtp_on_a_hybrid_target(mtp_target, k):
    # llama-server keeps --spec-draft-n-max state snapshots; the lab is loaded for the same K
    load = LoadSettings(mtp_target, ctx=1024, threads=1, threads_batch=1, draft_n_max_at_load=k)
    spec = SpecSettings("draft-mtp", draft_n_max=k)
    prompts = PROMPTS[:3]
    server = _server_counts(load, spec, prompts)
    lab = _lab_counts(load, spec, prompts)
    for i, (ours, theirs) in enumerate(zip(lab, server)):
        assert (ours["drafted"], ours["accepted"]) == (theirs["drafted"], theirs["accepted"]), i
    assert sum(s["drafted"] for s in server) > 0


@pytest.mark.slow
def test_the_cli_drafts_with_the_targets_own_mtp_head_when_no_draft_is_given(mtp_target):
    argv = [sys.executable, "-m", "engine.cli", "run", "--target", str(mtp_target), "--ctx", "1024"]
    argv += ["--max-tokens", "16", "--prompt", PROMPTS[0], "--threads", "1", "--json"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert summary["drafted"] > 0, "draft-mtp, not an n-gram method that drafts nothing on this text"
