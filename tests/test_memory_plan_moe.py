"""The memory plan of mixture-of-experts models (qwen3moe, as the synthetic generator writes them)
against llama.cpp's own breakdown on the CPU, and where --n-cpu-moe puts the experts."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from engine.cli import deploy as deploy_cli
from engine.core.settings import LoadSettings, SpecSettings
from engine.deploy.export import llama_server_argv
from engine.llama.quantize import quantize
from engine.models.gguf_inspect import inspect_gguf
from engine.planning.hardware import cpu_features
from engine.planning.memory.memory_plan import CPU, GpuBudget, PlanError, moe_numbers, plan_memory
from engine.runtime.binding import Engine

from .conftest import run_registered
from .test_memory_plan import compare

TOLERANCE = 0.01  # the bar for MoE: every buffer within 1 % of llama.cpp's report


@pytest.fixture(scope="module")
def moe_pair(tmp_path_factory):
    """What `python -m testmodels.synthetic OUT --n-expert 8 --n-expert-used 2` writes (F16), via its command line."""
    out = tmp_path_factory.mktemp("moe")
    argv = [sys.executable, "-m", "testmodels.synthetic", str(out), "--n-expert", "8", "--n-expert-used", "2"]
    done = subprocess.run(argv + ["--dtype", "f16"], capture_output=True, text=True, check=True)
    written = json.loads(done.stdout)
    return Path(written["target"]), Path(written["draft"])


@pytest.fixture(scope="module")
def moe_q4_k_m(moe_pair):
    return tuple(quantize(p, p.with_name(f"{p.stem}-q4_k_m.gguf"), "Q4_K_M") for p in moe_pair)


def _check(target, draft, ctx, **moe):
    plan = plan_memory(inspect_gguf(target), ctx, draft=inspect_gguf(draft), cpu_features=cpu_features(), **moe)
    load = {"n_cpu_moe": moe.get("n_cpu_moe", 0), "n_cpu_moe_draft": moe.get("n_cpu_moe_draft", 0)}
    with Engine(LoadSettings(target, draft, ctx=ctx, **load)) as engine:
        rows = compare(plan, engine.memory())
    for model, kind, buffer_type, actual, planned, error in rows:
        print(f"ctx {ctx} {model:6} {kind:8} {buffer_type:10} llama.cpp {actual:10d} plan {planned:10d} {error:+.3%}")
        assert abs(error) <= TOLERANCE, (model, kind, buffer_type, actual, planned)
    return plan


def test_the_generated_model_is_a_qwen3moe_with_its_experts(moe_pair):
    info = inspect_gguf(moe_pair[0])
    assert info.architecture == "qwen3moe"
    assert moe_numbers(info) == (8, 2, 128)  # n_ff 256 / 2 used, llama.cpp's default expert width
    shapes = {t.name: t.shape for t in info.tensors}
    assert shapes["blk.0.ffn_gate_exps.weight"] == (128, 128, 8)  # {n_embd, n_ff_exp, n_expert}
    assert shapes["blk.0.ffn_gate_inp.weight"] == (128, 8)


@pytest.mark.parametrize("ctx", [512, 2048])
def test_moe_pair_plan_matches_llama_cpp_on_the_cpu(moe_pair, ctx):
    plan = _check(*moe_pair, ctx)
    assert not plan.notes


@pytest.mark.slow
def test_quantized_moe_pair_and_n_cpu_moe_match_llama_cpp(moe_q4_k_m):
    # on the CPU the experts are where they were; the overrides must not change any buffer either
    _check(*moe_q4_k_m, 1024)
    _check(*moe_q4_k_m, 1024, n_cpu_moe=2, n_cpu_moe_draft=-1)


def test_n_cpu_moe_moves_exactly_the_experts_of_the_first_layers_off_the_gpu(moe_pair):
    info = inspect_gguf(moe_pair[0])
    expert_bytes = [
        sum(t.n_bytes for t in info.tensors if t.name.startswith(f"blk.{i}.") and "_exps" in t.name) for i in range(4)
    ]
    gpus = [GpuBudget("CUDA0", 1 << 30)]

    def plan(n):
        return plan_memory(info, 1024, gpus=gpus, n_cpu_moe=n)

    on_gpu = {n: plan(n).total(kind="weights", device="CUDA0") for n in (0, 1, 3, -1)}
    mapped = {n: plan(n).total(kind="weights", buffer_type="CPU_Mapped") for n in (0, 1, 3, -1)}
    # GPU tensors carry CUDA's 128-byte rounding; F16 rows need no padding, so the bytes move whole
    assert on_gpu[0] - on_gpu[1] == expert_bytes[0]
    assert on_gpu[0] - on_gpu[3] == sum(expert_bytes[:3])
    assert on_gpu[0] - on_gpu[-1] == sum(expert_bytes)
    # the CPU keeps them in the file mapping (its span reaches from token_embd to the last expert moved)
    assert mapped[-1] > mapped[3] > mapped[1] > mapped[0]
    assert plan(2).total(device=CPU) > plan(0).total(device=CPU)
    with pytest.raises(PlanError, match="n_cpu_moe"):
        plan(-2)


def test_the_export_keeps_the_experts_where_the_plan_put_them(moe_pair):
    load = LoadSettings(moe_pair[0], moe_pair[1], ctx=1024, n_cpu_moe=2, n_cpu_moe_draft=-1)
    argv = llama_server_argv(load, SpecSettings("draft-simple", draft_n_max=4), None, "llama-server")
    assert argv[argv.index("-ncmoe") + 1] == "2"
    assert argv[argv.index("-ncmoed") + 1] == "9999"
    every = LoadSettings(moe_pair[0], None, ctx=1024, n_cpu_moe=-1)
    assert "--cpu-moe" in llama_server_argv(every, SpecSettings("ngram-mod"), None, "llama-server")


@pytest.mark.server
def test_an_moe_pair_validates_against_llama_server_with_n_cpu_moe(moe_pair, capsys):
    """The exported -ncmoe runs on the real server, and speculation on an MoE pair counts as the lab does."""
    args = ["validate", "--target", str(moe_pair[0]), "--draft", str(moe_pair[1]), "--ctx", "1024", "--n-cpu-moe", "2"]
    args += ["--max-tokens", "48", "--json", "--no-history", "--prompt", "def value(self): return"]
    rc, out, _ = run_registered(deploy_cli.register, args, capsys)
    assert rc == 0
    report = json.loads(out)
    assert "-ncmoe" in report["argv"]
    assert report["agree"] is True and report["lab"]["drafted"] > 0
