"""The fit verdict: the memory plan of a real (synthetic) pair against a stand-in NVML's free VRAM, or RAM."""

from __future__ import annotations

import dataclasses

from engine.models.gguf_inspect import inspect_gguf
from engine.planning.hardware import probe
from engine.planning.memory.budget import held_bytes
from engine.planning.memory.fit import check_fit

from .fake_nvml import FakeNVML, h100, rtx4090


def infos(pair):
    return inspect_gguf(pair[0]), inspect_gguf(pair[1])


def test_fits_on_a_roomy_gpu_and_not_on_a_full_one(pair):
    target, draft = infos(pair)
    roomy = check_fit(target, 2048, draft=draft, report=probe(FakeNVML([rtx4090(0)])))
    assert roomy.fits is True and roomy.where == "VRAM" and roomy.short_devices == []
    assert roomy.needed_bytes == roomy.plan.to_dict()["totals"]["vram_bytes"] > 0
    assert roomy.summary().startswith("fits in VRAM")

    full = probe(FakeNVML([rtx4090(0, used=24 * 2**30 - 2**20)]))
    tight = check_fit(target, 2048, draft=draft, report=full)
    assert tight.fits is False and tight.short_devices == ["CUDA0"] and tight.available_bytes == 2**20
    why = tight.explanation(2048)
    assert "does not fit on CUDA0" in why and "smaller context than 2048" in why
    # memory the caller frees first (the Lab's own loaded pair, as the worker reports it) counts as free:
    # what sat on the GPU goes to the GPU's budget; host buffers are no VRAM
    on_gpu = [
        {
            "model": "target",
            "buffer_type": "CUDA0",
            "model_bytes": tight.needed_bytes,
            "context_bytes": 0,
            "compute_bytes": 0,
        }
    ]
    assert check_fit(target, 2048, draft=draft, report=full, held=on_gpu).fits is True
    on_host = [dict(on_gpu[0], buffer_type="CUDA_Host"), dict(on_gpu[0], buffer_type="CPU_Mapped")]
    assert check_fit(target, 2048, draft=draft, report=full, held=on_host).fits is False
    # a CPU build of the engine cannot use the GPU at all: the plan is held against RAM
    cpu_build = check_fit(target, 2048, draft=draft, report=full, gpu_backend=False)
    assert cpu_build.where == "RAM" and cpu_build.plan.to_dict()["totals"]["vram_bytes"] == 0


def test_two_gpus_name_the_one_that_overflows(pair):
    target, draft = infos(pair)
    report = probe(FakeNVML([rtx4090(0, used=24 * 2**30 - 2**20), h100(1)]))
    verdict = check_fit(target, 2048, draft=draft, report=report)
    # the plan splits the layers by free memory as llama.cpp does, and still puts one on the full GPU
    assert verdict.plan.layers["target"]["by_device"].get("CUDA0", 0) >= 1
    assert verdict.fits is False and verdict.short_devices == ["CUDA0"]
    assert verdict.available_bytes == 2**20 + report.gpus[1].memory_free_bytes
    # the Lab's pair held 1 GiB on each GPU: each gets its own back, not the first GPU both
    held = [{"buffer_type": name, "model_bytes": 2**30} for name in ("CUDA0", "CUDA1")]
    freed = check_fit(target, 2048, draft=draft, report=report, held=held)
    budgets = {g["name"]: g["free_bytes"] for g in freed.plan.to_dict()["gpus"]}
    assert budgets == {"CUDA0": 2**20 + 2**30, "CUDA1": report.gpus[1].memory_free_bytes + 2**30}
    assert freed.fits is True


def test_without_a_gpu_the_plan_is_held_against_ram(pair):
    target, draft = infos(pair)
    report = probe(FakeNVML([]))
    ok = check_fit(target, 2048, draft=draft, report=report)
    assert ok.where == "RAM" and ok.needed_bytes == ok.plan.to_dict()["totals"]["all_bytes"]
    short = dataclasses.replace(report, cpu=dataclasses.replace(report.cpu, ram_available_bytes=1024))
    verdict = check_fit(target, 2048, draft=draft, report=short)
    assert verdict.fits is False and "RAM is available" in verdict.explanation(2048)
    unknown = dataclasses.replace(report, cpu=dataclasses.replace(report.cpu, ram_available_bytes=None))
    assert check_fit(target, 2048, draft=draft, report=unknown).fits is None


def test_held_memory_is_sorted_into_gpu_and_host():
    items = [
        {"buffer_type": b, "model_bytes": 100, "context_bytes": 10, "compute_bytes": 1}
        for b in ("CUDA0", "Vulkan1", "CUDA_Host", "CPU", "CPU_REPACK", "AMX", "CPU_Mapped")
    ]
    assert held_bytes(items) == (222, 444) and held_bytes(None) == (0, 0)
