"""Draft placement and expert offload (engine.planning.advice.placement): where a pair goes when llama.cpp's
default placement does not fit the GPUs, on the NVML stand-in with two GPUs of different sizes, through
the plan, the recommendations and the exported command line."""

from __future__ import annotations

import json
import shlex

import pytest

from engine.cli import deploy as deploy_cli
from engine.cli.models import register as register_models
from engine.core.settings import LoadSettings, SettingsError
from engine.models.catalog import load_catalog
from engine.models.gguf_inspect import inspect_gguf
from engine.models.synthetic import ModelShape, PairSpec, write_pair
from engine.planning.advice.model_numbers import model_info_from_numbers
from engine.planning.advice.placement import Placement, place, placements
from engine.planning.advice.recommend import recommend
from engine.planning.hardware import probe
from engine.planning.memory.budget import Budget, budget_from_hardware, fits, headroom
from engine.planning.memory.fit import verdict_of
from engine.planning.memory.memory_plan import CPU, GpuBudget, PlanError, no_headroom, plan_memory
from engine.runtime.binding import Engine, SpecrtError

from .conftest import run_registered
from .fake_nvml import FakeNVML, rtx4090

GiB = 2**30
NO_HEADROOM = no_headroom


def _qwen3(n_layer, n_embd, n_head, n_ff, bits, tied=False, **moe):
    return model_info_from_numbers(
        architecture="qwen3moe" if moe else "qwen3",
        n_layer=n_layer,
        n_embd=n_embd,
        n_head=n_head,
        n_head_kv=8 if not moe else 4,
        head_dim=128,
        n_ff=n_ff,
        n_vocab=151936,
        n_ctx_train=40960,
        tied_embeddings=tied,
        weight_type="Q4_K" if bits < 8 else "Q8_0",
        bits_per_weight=bits,
        **moe,
    )


TARGET = _qwen3(36, 4096, 32, 12288, 4.9)  # Qwen3-8B's shape, Q4_K_M
DRAFT = _qwen3(28, 1024, 16, 3072, 8.5, tied=True)  # Qwen3-0.6B's shape, Q8_0
MOE = _qwen3(48, 2048, 32, 6144, 4.9, n_expert=128, n_expert_used=8, n_ff_exp=768)  # Qwen3-30B-A3B's


def _gpus(*sizes):
    return [GpuBudget(f"CUDA{i}", int(s * GiB)) for i, s in enumerate(sizes)]


def test_the_default_comes_first_and_every_arrangement_is_a_real_plan():
    gpus = _gpus(8, 4)
    order = list(placements(TARGET, DRAFT, gpus))
    assert order[0].is_default and order[-1].draft_on_cpu
    for p in order:
        plan = p.plan(TARGET, DRAFT, 8192, gpus)
        draft_layers = plan.layers["draft"]["by_device"]
        if p.draft_on_cpu:
            assert set(draft_layers) == {CPU}
        elif p.draft_devices:
            assert set(draft_layers) == set(p.draft_devices)
        if p.target_devices:
            assert set(plan.layers["target"]["by_device"]) == set(p.target_devices)


def test_two_gpus_of_different_sizes_place_the_draft_where_the_pair_fits():
    # 6 + 1.5 GiB: split over both cards, each card holds a compute buffer of each model: too much
    gpus = _gpus(6, 1.5)
    assert not fits(Placement().plan(TARGET, DRAFT, 8192, gpus), Budget(tuple(gpus)), NO_HEADROOM)
    placement, plan = place(TARGET, DRAFT, 8192, gpus, NO_HEADROOM)
    assert placement == Placement(draft_devices=("CUDA0",))
    assert plan.layers["draft"]["by_device"] == {"CUDA0": 28}
    assert plan.fits is True
    assert placement.flags() == ["-devd", "CUDA0"]
    # 6 + 3 GiB: the default fits; nothing moves
    assert place(TARGET, DRAFT, 8192, _gpus(6, 3), NO_HEADROOM)[0].is_default


def test_the_draft_loads_after_the_target_and_splits_over_what_it_left():
    gpus = _gpus(8, 8)
    alone = plan_memory(DRAFT, 8192, gpus=gpus).layers["target"]["by_device"]
    paired = plan_memory(TARGET, 8192, draft=DRAFT, gpus=gpus).layers["draft"]["by_device"]
    # the target left both cards about equally full: the draft splits about as it would alone
    assert abs(paired["CUDA0"] - alone["CUDA0"]) <= 1 and sum(paired.values()) == 28
    # the target on CUDA0 alone: CUDA1 has far more free when the draft loads, and takes most of it
    lopsided = plan_memory(TARGET, 8192, draft=DRAFT, gpus=_gpus(8, 8), target_devices=["CUDA0"])
    assert lopsided.layers["draft"]["by_device"]["CUDA1"] > lopsided.layers["draft"]["by_device"]["CUDA0"]
    with pytest.raises(PlanError, match="draft device CUDA7"):
        plan_memory(TARGET, 8192, draft=DRAFT, gpus=gpus, draft_devices=["CUDA7"])


def test_an_moe_target_too_big_for_the_gpu_keeps_the_fewest_expert_layers_in_ram():
    gpus = _gpus(12)
    placement, plan = place(MOE, DRAFT, 8192, gpus, headroom)
    n = placement.n_cpu_moe
    assert 0 < n < 48 and not placement.draft_on_cpu
    assert fits(plan, Budget(tuple(gpus)), headroom)
    one_fewer = Placement(n_cpu_moe=n - 1).plan(MOE, DRAFT, 8192, gpus)
    assert not fits(one_fewer, Budget(tuple(gpus)), headroom)
    assert placement.flags() == ["-ncmoe", str(n)]
    # the experts of those layers moved to host memory, byte for byte
    moved = sum(t.n_bytes for t in MOE.tensors if "_exps" in t.name and int(t.name.split(".")[1]) < n)
    default = Placement().plan(MOE, DRAFT, 8192, gpus)
    assert default.total(device="CUDA0") - plan.total(device="CUDA0") >= moved
    # a dense target cannot be helped that way
    assert place(TARGET, DRAFT, 8192, _gpus(4), headroom) is None


def test_experts_go_to_ram_only_where_the_ram_holds_them():
    """The host part of a placement (the experts of the first N layers, the draft on the CPU) must fit the
    available RAM: mapped experts that RAM cannot hold would be read from the disk on every token."""
    gpus = _gpus(12)
    placement, plan = place(MOE, DRAFT, 8192, gpus, headroom)
    host = plan.device_totals()[CPU]
    assert host > 4 * GiB  # the experts of the first layers
    # enough RAM: the same placement; one byte too little (after its headroom): nowhere
    roomy = host + headroom(host) + GiB
    assert place(MOE, DRAFT, 8192, gpus, headroom, roomy) == (placement, plan)
    assert place(MOE, DRAFT, 8192, gpus, headroom, host // 2) is None
    assert fits(plan, Budget(tuple(gpus)), headroom) and not fits(plan, Budget(tuple(gpus), host // 2), headroom)
    # the default placement of a pair that fits the GPUs is held to the RAM as well (its token embeddings)
    small = _gpus(24)
    default = Placement().plan(TARGET, DRAFT, 8192, small)
    assert place(TARGET, DRAFT, 8192, small, NO_HEADROOM, default.device_totals()[CPU]) == (Placement(), default)
    assert place(TARGET, DRAFT, 8192, small, NO_HEADROOM, default.device_totals()[CPU] - 1) is None


def test_a_gpu_plan_whose_host_part_exceeds_the_ram_does_not_fit_and_says_why():
    gpus = _gpus(12)
    _, plan = place(MOE, DRAFT, 8192, gpus, headroom)
    host = plan.device_totals()[CPU]
    assert verdict_of(plan, gpus, host).fits and verdict_of(plan, gpus, None).fits
    short = verdict_of(plan, gpus, host - 1)
    assert short.fits is False and short.where == "RAM" and short.host_part
    assert short.needed_bytes == host and short.available_bytes == host - 1
    assert "The GPUs hold their part" in short.explanation(8192) and "in RAM" in short.summary()
    # a GPU that is short is the verdict, whatever the RAM
    assert verdict_of(plan, _gpus(2), 1).where == "VRAM"


def test_placement_becomes_load_settings_and_the_export_line(pair):
    load = LoadSettings(pair[0], pair[1], ctx=2048)
    placed = Placement(target_devices=("CUDA0",), draft_devices=("CUDA1",)).apply(load)
    assert (placed.device, placed.device_draft, placed.ngl_draft) == ("CUDA0", "CUDA1", -1)
    on_cpu = Placement(draft_on_cpu=True, n_cpu_moe=3).apply(load)
    assert (on_cpu.ngl_draft, on_cpu.device_draft, on_cpu.n_cpu_moe) == (0, "", 3)
    with pytest.raises(SettingsError, match="device_draft must be device names"):
        LoadSettings(pair[0], pair[1], device_draft="CUDA1; rm -rf /").validate()
    # specrt takes the same names llama-server does, and says which devices this build has
    with pytest.raises(SpecrtError, match="no GPU device named 'CUDA1' in this build"):
        Engine(LoadSettings(pair[0], pair[1], ctx=512, device_draft="CUDA1"))


@pytest.fixture(scope="module")
def mid_pair(tmp_path_factory):
    """Qwen2.5-0.5B's layer shape, 6 layers (the draft 2), F16: about 170 MB and 60 MB."""
    shape = ModelShape(n_embd=896, n_layer=6, n_head=14, n_head_kv=2, n_ff=4864, n_ctx_train=32768)
    return write_pair(tmp_path_factory.mktemp("mid"), PairSpec(shape=shape, dtype="f16", draft_layers=2))


def _two_gpu_stand_in(target, draft, ctx):
    """Two GPUs (MiB sizes) on which llama.cpp's default placement of the pair does not fit but another does:
    searched over sizes with the planner itself, so the test holds for whatever the plan says."""
    t, d = inspect_gguf(target), inspect_gguf(draft)
    for big in range(150, 600, 10):
        for small in range(20, big, 10):
            gpus = [GpuBudget("CUDA0", big * 2**20), GpuBudget("CUDA1", small * 2**20)]
            if fits(Placement().plan(t, d, ctx, gpus), Budget(tuple(gpus)), NO_HEADROOM):
                continue
            placed = place(t, d, ctx, gpus, NO_HEADROOM)
            if placed is not None:
                return gpus, placed
    raise AssertionError("no pair of GPU sizes where only a non-default placement fits")


@pytest.mark.slow
def test_plan_on_a_two_gpu_stand_in_gives_the_placed_plan_and_the_export_runs_it(mid_pair, capsys):
    """The issue's check: an NVML stand-in with two GPUs of different sizes; `spectune plan` finds the
    placement, and `spectune export` with its flags writes the matching llama-server line."""
    target, draft = mid_pair
    gpus, (placement, plan) = _two_gpu_stand_in(target, draft, 2048)
    nvml = FakeNVML([rtx4090(i, total=g.free_bytes + 2**30, used=2**30) for i, g in enumerate(gpus)])
    assert [(g.llama_name, g.memory_free_bytes) for g in probe(nvml).gpus] == [(g.name, g.free_bytes) for g in gpus]
    args = ["plan", "--target", str(target), "--draft", str(draft), "--ctx", "2048", "--json"]
    rc, out, _ = run_registered(register_models, args, capsys, nvml=nvml)
    report = json.loads(out)
    assert rc == 0 and report["fits"] is False
    placed = report["placement"]
    assert placed["flags"] == placement.flags() and placed["plan"]["fits"] is True
    assert placed["plan"]["layers"] == plan.layers
    # --vram with --ram too small for even the default plan's host part (the token embeddings): the GPU holds
    # its part, and the verdict is the RAM's
    host = Placement().plan(inspect_gguf(target), inspect_gguf(draft), 2048, _gpus(4)).device_totals()[CPU]
    ram_args = ["plan", "--target", str(target), "--draft", str(draft), "--ctx", "2048", "--vram", "4GiB"]
    rc, out, _ = run_registered(register_models, [*ram_args, "--ram", f"{host - 1}B", "--json"], capsys)
    short = json.loads(out)["fit"]
    assert rc == 0 and short["fits"] is False and short["where"] == "RAM" and short["needed_bytes"] == host
    rc, out, _ = run_registered(register_models, [*ram_args, "--ram", f"{host}B", "--json"], capsys)
    assert json.loads(out)["fit"]["fits"] is True
    # the export with those flags: the same placement on llama-server's command line
    flags = {"-devd": "--device-draft", "-dev": "--device", "-ngld": "--ngl-draft", "-ncmoe": "--n-cpu-moe"}
    export_args = ["export", "--target", str(target), "--draft", str(draft), "--ctx", "2048"]
    it = iter(placement.flags())
    for flag, value in zip(it, it):
        export_args += [flags[flag], value]
    rc, out, _ = run_registered(deploy_cli.register, export_args, capsys)
    argv = shlex.split(out.strip().splitlines()[-1])
    for flag, value in zip(*[iter(placement.flags())] * 2):
        assert argv[argv.index(flag) + 1] == value


@pytest.mark.slow
def test_recommendations_on_two_gpus_carry_the_placement_that_makes_them_fit():
    catalog = load_catalog()
    nvml = FakeNVML([rtx4090(0, total=7 * GiB, used=GiB // 4), rtx4090(1, total=2 * GiB, used=GiB // 4)])
    budget = budget_from_hardware(nvml)
    assert [g.name for g in budget.gpus] == ["CUDA0", "CUDA1"]
    r = recommend(catalog, budget, ctx=8192)
    placed = [c for c in r.recommended if c.placement is not None]
    assert placed, [c.label for c in r.recommended]
    for c in placed:
        assert c.fits_memory and c.plan is not None and fits(c.plan, budget, headroom)
        d = c.to_dict()
        assert d["placement_flags"] == c.placement.flags() and d["placement"]["describe"] in " ".join(c.reasons())
        # without the placement the same pair does not fit
        default = Placement().plan(_info(catalog, c.target), _info(catalog, c.draft), 8192, list(budget.gpus))
        assert not fits(default, budget, headroom)


def _info(catalog, f):
    from engine.planning.advice.catalog_models import CatalogModels

    return CatalogModels(catalog).info(catalog.model(f.model), f.quant)


def test_export_arguments_reach_llama_server_flags(pair):
    from engine.core.settings import SpecSettings
    from engine.deploy.export import llama_server_argv

    load = LoadSettings(pair[0], pair[1], ctx=2048, device="CUDA0", device_draft="CUDA1", ngl_draft=-1)
    argv = llama_server_argv(load, SpecSettings("draft-simple"), None, "llama-server")
    assert argv[argv.index("-dev") + 1] == "CUDA0" and argv[argv.index("-devd") + 1] == "CUDA1"
