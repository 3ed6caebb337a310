"""What the machine has: NVIDIA GPUs through NVML, and the CPU and RAM.

NVML comes in as a module argument (default: ``import pynvml`` from
nvidia-ml-py), so tests can hand in a stand-in with NVML's names. A missing
library, a driver that is not loaded, zero GPUs or an NVML error is reported
plainly in ``status`` / ``message``; the CPU side is always filled in. A query
that one GPU does not support (PCIe link on some boards, bus width on
virtual GPUs) leaves that field None and the rest of the report intact.

Peak memory bandwidth is computed, not queried: NVML reports the bus width in
bits and the maximum memory clock in MHz, and GDDR/HBM move data on both clock
edges, so peak bytes/s = bus_width_bits / 8 * max_memory_clock_MHz * 1e6 * 2.
(RTX 4090: 384 bits, 10501 MHz -> 1008 GB/s; H100 SXM: 5120 bits, 2619 MHz -> 3.35 TB/s.)
"""

from __future__ import annotations

import ctypes
import json
import os
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from types import ModuleType
from typing import Any

from engine.core.units import format_gib


@dataclass
class GpuInfo:
    index: int
    name: str | None = None
    uuid: str | None = None
    memory_total_bytes: int | None = None
    memory_used_bytes: int | None = None
    memory_free_bytes: int | None = None
    compute_capability: str | None = None  # "8.9"
    memory_bus_width_bits: int | None = None
    max_memory_clock_mhz: int | None = None
    peak_memory_bandwidth_bytes_per_s: float | None = None
    pcie_generation: int | None = None  # current link generation
    pcie_width: int | None = None  # current link width (lanes)
    pcie_max_generation: int | None = None
    pcie_max_width: int | None = None
    utilization_gpu_percent: int | None = None
    utilization_memory_percent: int | None = None
    errors: dict[str, str] = field(default_factory=dict)  # query -> NVML's error, for fields left None

    @property
    def llama_name(self) -> str:
        """The name llama.cpp's CUDA backend gives this device (CUDA0, CUDA1, ...)."""
        return f"CUDA{self.index}"


@dataclass
class CpuInfo:
    logical_cores: int | None
    ram_total_bytes: int | None
    ram_available_bytes: int | None
    features: list[str]  # the ones the memory plan cares about: amx, avx2, avx512
    source: str  # where the RAM numbers came from


@dataclass
class HardwareReport:
    status: str  # "ok" | "no_gpu" | "no_driver" | "nvml_error"
    message: str
    driver_version: str | None
    cuda_driver_version: str | None  # "12.4"
    gpus: list[GpuInfo]
    cpu: CpuInfo

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        for gpu, out in zip(self.gpus, d["gpus"]):
            out["llama_name"] = gpu.llama_name
        return d


def peak_bandwidth(bus_width_bits: int | None, max_memory_clock_mhz: int | None) -> float | None:
    """Bytes per second: bus width in bytes x clock x 2 transfers per clock (double data rate)."""
    if not bus_width_bits or not max_memory_clock_mhz:
        return None
    return bus_width_bits / 8 * max_memory_clock_mhz * 1e6 * 2


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def _cuda_version(value: int) -> str:
    """NVML's 12040 -> '12.4'."""
    return f"{value // 1000}.{value % 1000 // 10}"


# NVML error codes that mean "there is no usable NVIDIA driver here" rather than "something broke"
def _no_driver_codes(nvml: ModuleType) -> set[int]:
    names = ("NVML_ERROR_LIBRARY_NOT_FOUND", "NVML_ERROR_DRIVER_NOT_LOADED", "NVML_ERROR_FUNCTION_NOT_FOUND")
    return {getattr(nvml, n) for n in names if hasattr(nvml, n)}


def _gpu(nvml: ModuleType, index: int) -> GpuInfo:
    info = GpuInfo(index)
    handle = nvml.nvmlDeviceGetHandleByIndex(index)

    def ask(label: str, call: Callable[[], Any]) -> Any:
        try:
            return call()
        except nvml.NVMLError as exc:
            info.errors[label] = str(exc)
            return None

    name = ask("name", lambda: nvml.nvmlDeviceGetName(handle))
    info.name = _text(name) if name is not None else None
    uuid = ask("uuid", lambda: nvml.nvmlDeviceGetUUID(handle))
    info.uuid = _text(uuid) if uuid is not None else None
    memory = ask("memory", lambda: nvml.nvmlDeviceGetMemoryInfo(handle))
    if memory is not None:
        info.memory_total_bytes, info.memory_used_bytes, info.memory_free_bytes = (
            int(memory.total),
            int(memory.used),
            int(memory.free),
        )
    capability = ask("compute_capability", lambda: nvml.nvmlDeviceGetCudaComputeCapability(handle))
    if capability is not None:
        info.compute_capability = f"{capability[0]}.{capability[1]}"
    info.memory_bus_width_bits = ask("memory_bus_width", lambda: nvml.nvmlDeviceGetMemoryBusWidth(handle))
    info.max_memory_clock_mhz = ask(
        "max_memory_clock", lambda: nvml.nvmlDeviceGetMaxClockInfo(handle, nvml.NVML_CLOCK_MEM)
    )
    info.peak_memory_bandwidth_bytes_per_s = peak_bandwidth(info.memory_bus_width_bits, info.max_memory_clock_mhz)
    info.pcie_generation = ask("pcie_generation", lambda: nvml.nvmlDeviceGetCurrPcieLinkGeneration(handle))
    info.pcie_width = ask("pcie_width", lambda: nvml.nvmlDeviceGetCurrPcieLinkWidth(handle))
    info.pcie_max_generation = ask("pcie_max_generation", lambda: nvml.nvmlDeviceGetMaxPcieLinkGeneration(handle))
    info.pcie_max_width = ask("pcie_max_width", lambda: nvml.nvmlDeviceGetMaxPcieLinkWidth(handle))
    utilization = ask("utilization", lambda: nvml.nvmlDeviceGetUtilizationRates(handle))
    if utilization is not None:
        info.utilization_gpu_percent, info.utilization_memory_percent = int(utilization.gpu), int(utilization.memory)
    return info


def _nvml_module(nvml: ModuleType | None) -> Any:
    """The NVML module to use: the one given (a stand-in in tests), else pynvml, else None (not installed)."""
    if nvml is not None:
        return nvml
    try:
        import pynvml
    except ImportError:
        return None
    return pynvml


def probe(nvml: ModuleType | None = None) -> HardwareReport:
    """One look at the machine. Never raises for a missing or failing NVIDIA driver."""
    cpu = cpu_info()
    nvml = _nvml_module(nvml)
    if nvml is None:
        return HardwareReport(
            "no_driver", "nvidia-ml-py (pynvml) is not installed; GPUs cannot be listed", None, None, [], cpu
        )
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as exc:
        code = getattr(exc, "value", None)
        if code in _no_driver_codes(nvml):
            return HardwareReport(
                "no_driver", f"no NVIDIA driver is available (NVML: {exc}); using the CPU only", None, None, [], cpu
            )
        return HardwareReport(
            "nvml_error", f"NVML could not start (NVML error {code}: {exc}); using the CPU only", None, None, [], cpu
        )
    try:
        driver = _text(nvml.nvmlSystemGetDriverVersion())
        try:
            cuda = _cuda_version(int(nvml.nvmlSystemGetCudaDriverVersion()))
        except nvml.NVMLError:
            cuda = None
        count = nvml.nvmlDeviceGetCount()
        gpus = []
        for index in range(count):
            try:
                gpus.append(_gpu(nvml, index))
            except nvml.NVMLError as exc:  # the handle itself failed: the GPU is there but unreadable
                gpus.append(GpuInfo(index, errors={"handle": str(exc)}))
    except nvml.NVMLError as exc:
        return HardwareReport(
            "nvml_error",
            f"NVML failed while listing GPUs (NVML error {getattr(exc, 'value', None)}: {exc}); using the CPU only",
            None,
            None,
            [],
            cpu,
        )
    finally:
        try:
            nvml.nvmlShutdown()
        except nvml.NVMLError:
            pass
    if not gpus:
        return HardwareReport(
            "no_gpu",
            f"the NVIDIA driver {driver} is loaded but reports no GPU; using the CPU only",
            driver,
            cuda,
            [],
            cpu,
        )
    unreadable = [g.index for g in gpus if "handle" in g.errors]
    message = f"{len(gpus)} NVIDIA GPU{'s' if len(gpus) != 1 else ''}, driver {driver}, CUDA {cuda or 'unknown'}"
    if unreadable:
        message += f"; GPU {', '.join(map(str, unreadable))} could not be read"
    return HardwareReport("ok", message, driver, cuda, gpus, cpu)


def refresh(report: HardwareReport, nvml: ModuleType | None = None) -> HardwareReport:
    """A cheap update for polling: free/used memory and utilisation re-read, the rest kept.

    Falls back to a full probe when the earlier report had no GPUs or the set of
    GPUs changed (same indices, same UUIDs). The report passed in is not modified.
    """
    if report.status != "ok":
        return probe(nvml)
    nvml = _nvml_module(nvml)
    if nvml is None:
        return probe(nvml)
    try:
        nvml.nvmlInit()
    except nvml.NVMLError:
        return probe(nvml)
    try:
        if nvml.nvmlDeviceGetCount() != len(report.gpus):
            return probe(nvml)
        gpus = []
        for old in report.gpus:
            handle = nvml.nvmlDeviceGetHandleByIndex(old.index)
            if old.uuid is not None and _text(nvml.nvmlDeviceGetUUID(handle)) != old.uuid:
                return probe(nvml)
            new = GpuInfo(**{**asdict(old), "errors": dict(old.errors)})
            try:
                memory = nvml.nvmlDeviceGetMemoryInfo(handle)
                new.memory_total_bytes, new.memory_used_bytes, new.memory_free_bytes = (
                    int(memory.total),
                    int(memory.used),
                    int(memory.free),
                )
            except nvml.NVMLError as exc:
                new.memory_used_bytes = new.memory_free_bytes = None
                new.errors["memory"] = str(exc)
            try:
                utilization = nvml.nvmlDeviceGetUtilizationRates(handle)
                new.utilization_gpu_percent = int(utilization.gpu)
                new.utilization_memory_percent = int(utilization.memory)
            except nvml.NVMLError as exc:
                new.utilization_gpu_percent = new.utilization_memory_percent = None
                new.errors["utilization"] = str(exc)
            gpus.append(new)
    except nvml.NVMLError:
        return probe(nvml)
    finally:
        try:
            nvml.nvmlShutdown()
        except nvml.NVMLError:
            pass
    return HardwareReport(
        report.status, report.message, report.driver_version, report.cuda_driver_version, gpus, cpu_info()
    )


# -- the CPU side ---------------------------------------------------------------------------


def _meminfo(path: str = "/proc/meminfo") -> tuple[int | None, int | None]:
    values: dict[str, int] = {}
    with open(path, encoding="ascii", errors="replace") as fh:
        for line in fh:
            key, _, rest = line.partition(":")
            parts = rest.split()
            if parts and parts[0].isdigit():
                values[key] = int(parts[0]) * (1024 if parts[1:2] == ["kB"] else 1)
    available = values.get("MemAvailable")
    if available is None and "MemFree" in values:  # kernels before 3.14
        available = values["MemFree"] + values.get("Cached", 0) + values.get("Buffers", 0)
    return values.get("MemTotal"), available


class _MemoryStatusEx(ctypes.Structure):
    _fields_ = [
        ("dwLength", ctypes.c_ulong),
        ("dwMemoryLoad", ctypes.c_ulong),
        ("ullTotalPhys", ctypes.c_ulonglong),
        ("ullAvailPhys", ctypes.c_ulonglong),
        ("ullTotalPageFile", ctypes.c_ulonglong),
        ("ullAvailPageFile", ctypes.c_ulonglong),
        ("ullTotalVirtual", ctypes.c_ulonglong),
        ("ullAvailVirtual", ctypes.c_ulonglong),
        ("ullAvailExtendedVirtual", ctypes.c_ulonglong),
    ]


def ram() -> tuple[int | None, int | None, str]:
    """(total, available, source) in bytes."""
    if sys.platform.startswith("linux") and os.path.exists("/proc/meminfo"):
        total, available = _meminfo()
        return total, available, "/proc/meminfo"
    if sys.platform == "win32":
        status = _MemoryStatusEx()
        status.dwLength = ctypes.sizeof(_MemoryStatusEx)
        if ctypes.windll.kernel32.GlobalMemoryStatusEx(ctypes.byref(status)):  # type: ignore[attr-defined]
            return int(status.ullTotalPhys), int(status.ullAvailPhys), "GlobalMemoryStatusEx"
        return None, None, "GlobalMemoryStatusEx failed"
    try:
        page = os.sysconf("SC_PAGE_SIZE")
        total = os.sysconf("SC_PHYS_PAGES") * page
        try:
            available = os.sysconf("SC_AVPHYS_PAGES") * page
        except (ValueError, OSError):
            available = None
        return total, available, "sysconf"
    except (ValueError, OSError, AttributeError):
        return None, None, "unknown on this system"


def cpu_features(cpuinfo_path: str = "/proc/cpuinfo") -> list[str]:
    """CPU features that decide llama.cpp's CPU extra buffer types (AMX, CPU_REPACK).

    Read from /proc/cpuinfo on Linux; on Windows only AVX2 / AVX-512 presence is
    asked of the kernel; elsewhere none are known. llama.cpp also needs to have
    been built with them (a native build is).
    """
    if os.path.exists(cpuinfo_path):
        flags: set[str] = set()
        with open(cpuinfo_path, encoding="ascii", errors="replace") as fh:
            for line in fh:
                if line.startswith("flags"):
                    flags = set(line.partition(":")[2].split())
                    break
        found = []
        if {"amx_int8", "amx_tile", "avx512_vnni"} <= flags:
            found.append("amx")
        if "avx2" in flags:
            found.append("avx2")
        if "avx512f" in flags:
            found.append("avx512")
        return found
    if sys.platform == "win32":
        present = ctypes.windll.kernel32.IsProcessorFeaturePresent  # type: ignore[attr-defined]
        # PF_AVX2_INSTRUCTIONS_AVAILABLE = 40, PF_AVX512F_INSTRUCTIONS_AVAILABLE = 41
        return [name for name, code in (("avx2", 40), ("avx512", 41)) if present(code)]
    return []


def refresh_ram(report: HardwareReport) -> HardwareReport:
    """The report with its RAM figures re-read and the rest kept: what a CPU-only machine polls, since
    its fit verdicts and the status bar count free RAM (one RAM query, no GPU probe)."""
    total, available, source = ram()
    return replace(report, cpu=replace(report.cpu, ram_total_bytes=total, ram_available_bytes=available, source=source))


def cpu_info() -> CpuInfo:
    total, available, source = ram()
    return CpuInfo(os.cpu_count(), total, available, cpu_features(), source)


# -- command line -----------------------------------------------------------------------------


def format_report(report: HardwareReport) -> str:
    lines = [report.message]
    for g in report.gpus:
        bw = (
            f"{g.peak_memory_bandwidth_bytes_per_s / 1e9:.0f} GB/s peak"
            if g.peak_memory_bandwidth_bytes_per_s
            else "bandwidth unknown"
        )
        pcie = (
            f"PCIe gen {g.pcie_generation} x{g.pcie_width}"
            if g.pcie_generation and g.pcie_width
            else "PCIe link unknown"
        )
        lines.append(
            f"  {g.llama_name}  {g.name or '?'}  {format_gib(g.memory_free_bytes)} free"
            f" of {format_gib(g.memory_total_bytes)}"
            f"  compute {g.compute_capability or '?'}  {bw}  {pcie}"
            f"  busy {g.utilization_gpu_percent if g.utilization_gpu_percent is not None else '?'}%"
        )
        for query, error in g.errors.items():
            lines.append(f"      {query}: {error}")
    c = report.cpu
    lines.append(
        f"  CPU  {c.logical_cores or '?'} logical cores  RAM {format_gib(c.ram_available_bytes)} available of "
        f"{format_gib(c.ram_total_bytes)}  features {', '.join(c.features) or 'none detected'}"
    )
    return "\n".join(lines)


if __name__ == "__main__":  # python -m engine.planning.hardware
    print(json.dumps(probe().to_dict(), indent=2))
