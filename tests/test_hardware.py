"""engine.planning.hardware against an NVML stand-in (tests/fake_nvml.py), and the real CPU side."""

from __future__ import annotations

import os
import sys

import pytest

from engine.planning.hardware import _meminfo, cpu_features, cpu_info, peak_bandwidth, probe, ram, refresh

from .fake_nvml import (
    NVML_ERROR_DRIVER_NOT_LOADED,
    NVML_ERROR_GPU_IS_LOST,
    NVML_ERROR_LIBRARY_NOT_FOUND,
    NVML_ERROR_NOT_SUPPORTED,
    NVML_ERROR_UNKNOWN,
    FakeNVML,
    h100,
    rtx4090,
)


def test_several_gpus_are_reported_in_full():
    nvml = FakeNVML([rtx4090(0), h100(1)])
    report = probe(nvml)
    assert report.status == "ok"
    assert report.driver_version == "550.54.14" and report.cuda_driver_version == "12.4"
    assert "2 NVIDIA GPUs" in report.message
    a, b = report.gpus
    assert (a.index, a.llama_name, a.name, a.uuid) == (0, "CUDA0", "NVIDIA GeForce RTX 4090", "GPU-4090-0000")
    assert (a.memory_total_bytes, a.memory_used_bytes, a.memory_free_bytes) == (24 * 2**30, 2**30, 23 * 2**30)
    assert (a.compute_capability, a.memory_bus_width_bits, a.max_memory_clock_mhz) == ("8.9", 384, 10501)
    assert (a.pcie_generation, a.pcie_width, a.pcie_max_generation, a.pcie_max_width) == (4, 16, 4, 16)
    assert (a.utilization_gpu_percent, a.utilization_memory_percent) == (7, 3)
    assert a.errors == {}
    assert (b.llama_name, b.compute_capability, b.memory_free_bytes) == ("CUDA1", "9.0", 80 * 2**30 - 512 * 2**20)
    # 384-bit GDDR6X at 10501 MHz is the RTX 4090's published 1008 GB/s; HBM3 5120-bit at 2619 MHz 3.35 TB/s
    assert a.peak_memory_bandwidth_bytes_per_s == pytest.approx(1008.1e9, rel=1e-4)
    assert b.peak_memory_bandwidth_bytes_per_s == pytest.approx(3352.3e9, rel=1e-4)
    assert nvml.init_count == 0, "every nvmlInit must be matched by nvmlShutdown"
    d = report.to_dict()
    assert [g["llama_name"] for g in d["gpus"]] == ["CUDA0", "CUDA1"] and d["cpu"]["logical_cores"] == os.cpu_count()


def test_an_unsupported_query_leaves_one_field_empty():
    flaky = rtx4090(
        1,
        failing={
            "nvmlDeviceGetCurrPcieLinkGeneration": NVML_ERROR_NOT_SUPPORTED,
            "nvmlDeviceGetCurrPcieLinkWidth": NVML_ERROR_NOT_SUPPORTED,
            "nvmlDeviceGetMemoryBusWidth": NVML_ERROR_NOT_SUPPORTED,
        },
    )
    report = probe(FakeNVML([rtx4090(0), flaky]))
    assert report.status == "ok"
    good, bad = report.gpus
    assert good.pcie_generation == 4 and good.errors == {}
    assert bad.pcie_generation is None and bad.pcie_width is None and bad.memory_bus_width_bits is None
    assert bad.peak_memory_bandwidth_bytes_per_s is None, "no bandwidth without the bus width"
    assert bad.errors == {
        "pcie_generation": "Not Supported",
        "pcie_width": "Not Supported",
        "memory_bus_width": "Not Supported",
    }
    # everything else about that GPU is still there
    assert bad.memory_free_bytes == 23 * 2**30 and bad.pcie_max_generation == 4 and bad.compute_capability == "8.9"


def test_a_lost_gpu_is_listed_without_its_details():
    report = probe(FakeNVML([rtx4090(0), rtx4090(1, failing={"nvmlDeviceGetHandleByIndex": NVML_ERROR_GPU_IS_LOST})]))
    assert report.status == "ok" and "GPU 1 could not be read" in report.message
    assert report.gpus[0].name == "NVIDIA GeForce RTX 4090"
    assert report.gpus[1].name is None and "GPU is lost" in report.gpus[1].errors["handle"]


@pytest.mark.parametrize("code", [NVML_ERROR_LIBRARY_NOT_FOUND, NVML_ERROR_DRIVER_NOT_LOADED])
def test_no_driver_falls_back_to_the_cpu(code):
    nvml = FakeNVML([rtx4090()], init_error=code)
    report = probe(nvml)
    assert report.status == "no_driver" and report.gpus == []
    assert "no NVIDIA driver" in report.message and "CPU only" in report.message
    assert report.driver_version is None
    assert report.cpu.logical_cores == os.cpu_count() and report.cpu.ram_total_bytes > 0
    assert nvml.calls == ["nvmlInit"], "nothing else may be called when init failed"


def test_another_init_error_is_reported_as_an_nvml_error():
    report = probe(FakeNVML([rtx4090()], init_error=NVML_ERROR_UNKNOWN))
    assert report.status == "nvml_error" and f"NVML error {NVML_ERROR_UNKNOWN}" in report.message


def test_a_failure_while_listing_is_reported_and_nvml_is_shut_down():
    nvml = FakeNVML([rtx4090()], failing={"nvmlDeviceGetCount": NVML_ERROR_UNKNOWN})
    report = probe(nvml)
    assert report.status == "nvml_error" and "while listing GPUs" in report.message and report.gpus == []
    assert nvml.init_count == 0


def test_zero_gpus():
    report = probe(FakeNVML([]))
    assert report.status == "no_gpu" and report.gpus == [] and report.driver_version == "550.54.14"
    assert "reports no GPU" in report.message


def test_refresh_rereads_memory_and_utilisation_only():
    gpu = rtx4090(0)
    nvml = FakeNVML([gpu])
    first = probe(nvml)
    gpu.used, gpu.utilization = 20 * 2**30, (99, 60)
    calls_before = len(nvml.calls)
    second = refresh(first, nvml)
    assert second.gpus[0].memory_free_bytes == 4 * 2**30 and second.gpus[0].utilization_gpu_percent == 99
    assert first.gpus[0].memory_free_bytes == 23 * 2**30, "the old report is not changed"
    assert second.gpus[0].name == first.gpus[0].name and second.gpus[0].pcie_generation == 4
    assert "nvmlDeviceGetName" not in nvml.calls[calls_before:], "static fields are not asked again"
    assert nvml.init_count == 0


def test_refresh_probes_again_when_the_gpus_change():
    nvml = FakeNVML([rtx4090(0)])
    first = probe(nvml)
    nvml.gpus.append(h100(1))
    second = refresh(first, nvml)
    assert [g.name for g in second.gpus] == ["NVIDIA GeForce RTX 4090", "NVIDIA H100 80GB HBM3"]
    nvml.gpus[0] = h100(7)  # same count, another card in slot 0
    third = refresh(second, nvml)
    assert third.gpus[0].uuid == "GPU-H100-0007" and third.gpus[0].compute_capability == "9.0"
    assert nvml.init_count == 0


def test_the_real_nvml_never_raises():
    report = probe()
    assert report.status in {"ok", "no_gpu", "no_driver", "nvml_error"}
    assert report.message and report.cpu.logical_cores == os.cpu_count()
    if report.status != "ok":
        assert report.gpus == []


def test_peak_bandwidth_formula():
    assert peak_bandwidth(256, 8000) == 256 / 8 * 8000e6 * 2
    assert peak_bandwidth(None, 8000) is None and peak_bandwidth(256, 0) is None


MEMINFO = """MemTotal:       24684092 kB
MemFree:         1234567 kB
MemAvailable:   22264012 kB
Buffers:          100000 kB
Cached:          5000000 kB
HugePages_Total:       0
"""


def test_meminfo_parsing(tmp_path):
    path = tmp_path / "meminfo"
    path.write_text(MEMINFO)
    assert _meminfo(str(path)) == (24684092 * 1024, 22264012 * 1024)
    # kernels before 3.14 have no MemAvailable: free + cache + buffers
    path.write_text(MEMINFO.replace("MemAvailable:   22264012 kB\n", ""))
    assert _meminfo(str(path)) == (24684092 * 1024, (1234567 + 100000 + 5000000) * 1024)


def test_cpu_features_from_cpuinfo(tmp_path):
    path = tmp_path / "cpuinfo"
    path.write_text("processor\t: 0\nflags\t\t: fpu sse2 avx2 avx512f avx512_vnni amx_tile amx_int8 amx_bf16\n")
    assert cpu_features(str(path)) == ["amx", "avx2", "avx512"]
    path.write_text("processor\t: 0\nflags\t\t: fpu sse2 avx2\n")
    assert cpu_features(str(path)) == ["avx2"]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc on Linux")
def test_real_ram_and_cores():
    total, available, source = ram()
    assert source == "/proc/meminfo" and 0 < available <= total
    info = cpu_info()
    assert info.logical_cores == os.cpu_count() and info.ram_total_bytes == total
