"""The tune at the user's concurrency: two real llama-servers at -np N on the demo pair, N requests at once,
each setting paired batch by batch against no speculation; and the concurrency a recording sets."""

from __future__ import annotations

import argparse
import dataclasses

import pytest

from engine.cli import run as run_cli
from engine.core.chat import Conversation
from engine.core.settings import LoadSettings, SettingsError, SpecSettings
from engine.measure.concurrent_tune import (
    ConcurrentTuneError,
    _batches,
    candidate_specs,
    predicted_k,
    side_by_side_refusal,
    tune_concurrent,
)
from engine.models.demo_models import demo_pair
from engine.planning.advice.preflight import preflight_load
from engine.planning.memory.budget import Budget
from engine.planning.memory.memory_plan import GpuBudget
from engine.serve.record import Recorder, recorded_concurrency

PROMPTS = [Conversation.user(t) for t in ("def add(a, b):", "class Stack:", "import os\nfor", "def main():")]


@pytest.mark.server
def test_each_setting_is_paired_batch_by_batch_with_no_speculation_at_the_same_concurrency():
    target, draft = demo_pair("f16")
    load = LoadSettings(target, draft, ctx=384)
    result = tune_concurrent(
        load, PROMPTS, clients=2, max_tokens=16, rounds=1, specs=[SpecSettings("draft-simple", draft_n_max=2)]
    )
    (cand,) = result.candidates
    assert len(cand.batches) == len(cand.baseline) == 2  # 4 prompts, 2 at once
    assert all(b.generated > 0 and len(b.client_speeds) == 2 for b in cand.batches + cand.baseline)
    assert sum(b.drafted for b in cand.batches) > 0 and sum(b.drafted for b in cand.baseline) == 0
    assert cand.ratio is not None and cand.ratio.n == 2 and "2 paired batches" in cand.ratio.describe()
    argv = result.export_argv
    assert argv[argv.index("-np") + 1] == "2" and argv[argv.index("-c") + 1] == "768"
    out = result.to_dict()
    assert out["clients"] == 2 and out["best"]["setting"] == "draft-simple K=2"
    assert ("--spec-type" in argv) == result.beats_baseline  # the pick is exported only when it pays


def test_batches_send_every_prompt_each_round_and_mix_them_anew():
    batches = _batches(["a", "b", "c", "d"], clients=2, rounds=2)
    assert batches == [["a", "b"], ["c", "d"], ["b", "c"], ["d", "a"]]
    assert sorted(p for b in batches[:2] for p in b) == ["a", "b", "c", "d"]


def test_the_candidates_follow_the_pair_and_take_the_users_own_setting():
    target, draft = demo_pair("f16")
    with_draft = [s.spec_type for s in candidate_specs(LoadSettings(target, draft))]
    assert with_draft == ["draft-simple", "draft-simple", "ngram-mod"]
    alone = candidate_specs(LoadSettings(target, None), SpecSettings("ngram-simple"))
    assert [s.spec_type for s in alone] == ["ngram-mod", "ngram-simple"]
    # the K the speed model predicts best for the clients joins the fixed ones, once
    assert [s.draft_n_max for s in candidate_specs(LoadSettings(target, draft), predicted=3)[:3]] == [2, 3, 4]
    assert len(candidate_specs(LoadSettings(target, draft), predicted=4)) == 3
    assert predicted_k(LoadSettings(target, None), 4) is None


def test_a_recording_that_saw_several_requests_at_once_sets_the_tunes_concurrency(tmp_path, capsys):
    path = tmp_path / "traffic.jsonl"
    with Recorder(path) as rec:
        for n in (1, 2, 2, 3, 2):
            rec.record({"messages": [{"role": "user", "content": f"q{n}"}]}, in_flight=n)
    assert recorded_concurrency(path) == 2
    assert recorded_concurrency(tmp_path / "missing.jsonl") is None
    p = argparse.ArgumentParser()
    run_cli.register(p.add_subparsers(dest="command"))
    a = p.parse_args(["tune", "--demo", "--workload", str(path)])
    assert run_cli._clients(a) == 2
    assert "tuning at --clients 2" in capsys.readouterr().err
    a = p.parse_args(["tune", "--demo", "--workload", str(path), "--clients", "1"])
    assert run_cli._clients(a) == 1  # the user's word wins
    with pytest.raises(SettingsError, match="at least 1"):
        run_cli._clients(p.parse_args(["tune", "--demo", "--workload", str(path), "--clients", "0"]))


def test_two_servers_that_would_not_fit_side_by_side_are_refused_before_either_starts():
    """Each server holds its own copy on the GPU, so each must fit in half: a GPU that holds one server at
    -np 4 but not two is refused with the plan's reason, and with room for both nothing is said."""
    target, draft = demo_pair("f16")
    load = LoadSettings(target, draft, ctx=512)
    alone = preflight_load(dataclasses.replace(load, ctx=4 * 512), Budget((GpuBudget("CUDA0", 1 << 40),)))
    assert alone.fit is not None
    needed = alone.fit.needed_bytes  # one server at -np 4, by the memory plan
    roomy = Budget((GpuBudget("CUDA0", 3 * needed),), ram_bytes=1 << 40)
    assert side_by_side_refusal(load, 4, roomy) is None
    tight = Budget((GpuBudget("CUDA0", int(1.5 * needed)),), ram_bytes=1 << 40)  # one fits, two do not
    why = side_by_side_refusal(load, 4, tight)
    assert why is not None and "side by side" in why and "4 slots of 512 tokens" in why and "CUDA0" in why
    with pytest.raises(ConcurrentTuneError, match="fewer clients"):
        tune_concurrent(load, PROMPTS, clients=4, budget=tight, server="/nonexistent/llama-server")
