"""A stand-in for the pynvml module (nvidia-ml-py) with NVML's names, return types and errors.

Only what engine.planning.hardware calls is implemented, with pynvml's signatures: it
returns pynvml's own ctypes structs (c_nvmlMemory_t, c_nvmlUtilization_t),
raises pynvml's own NVMLError (whose constructor picks the subclass for the
code, e.g. NVMLError_NotSupported), and keeps NVML's rules: nothing works
before nvmlInit, nvmlInit / nvmlShutdown are reference counted, a bad index or
clock type is NVML_ERROR_INVALID_ARGUMENT.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pynvml

# the real constants and the real error class, so hardware code sees exactly what pynvml gives it
NVMLError = pynvml.NVMLError
NVML_ERROR_UNINITIALIZED = pynvml.NVML_ERROR_UNINITIALIZED
NVML_ERROR_INVALID_ARGUMENT = pynvml.NVML_ERROR_INVALID_ARGUMENT
NVML_ERROR_NOT_SUPPORTED = pynvml.NVML_ERROR_NOT_SUPPORTED
NVML_ERROR_DRIVER_NOT_LOADED = pynvml.NVML_ERROR_DRIVER_NOT_LOADED
NVML_ERROR_LIBRARY_NOT_FOUND = pynvml.NVML_ERROR_LIBRARY_NOT_FOUND
NVML_ERROR_FUNCTION_NOT_FOUND = pynvml.NVML_ERROR_FUNCTION_NOT_FOUND
NVML_ERROR_GPU_IS_LOST = pynvml.NVML_ERROR_GPU_IS_LOST
NVML_ERROR_UNKNOWN = pynvml.NVML_ERROR_UNKNOWN
NVML_CLOCK_GRAPHICS = pynvml.NVML_CLOCK_GRAPHICS
NVML_CLOCK_SM = pynvml.NVML_CLOCK_SM
NVML_CLOCK_MEM = pynvml.NVML_CLOCK_MEM


@dataclass
class FakeGpu:
    name: str = "NVIDIA GeForce RTX 4090"
    uuid: str = "GPU-00000000-0000-0000-0000-000000000000"
    total: int = 24 * 2**30
    used: int = 2**30
    compute_capability: tuple[int, int] = (8, 9)
    bus_width_bits: int = 384
    max_memory_clock_mhz: int = 10501
    pcie_generation: int = 4
    pcie_width: int = 16
    pcie_max_generation: int = 4
    pcie_max_width: int = 16
    utilization: tuple[int, int] = (7, 3)  # gpu %, memory %
    failing: dict[str, int] = field(default_factory=dict)  # NVML function name -> error code it raises


class _Handle:
    """Opaque, like pynvml's c_nvmlDevice_t."""

    def __init__(self, gpu: FakeGpu):
        self._gpu = gpu


class FakeNVML:
    """Pass an instance where engine.planning.hardware expects the pynvml module."""

    NVMLError = NVMLError
    NVML_ERROR_UNINITIALIZED = NVML_ERROR_UNINITIALIZED
    NVML_ERROR_INVALID_ARGUMENT = NVML_ERROR_INVALID_ARGUMENT
    NVML_ERROR_NOT_SUPPORTED = NVML_ERROR_NOT_SUPPORTED
    NVML_ERROR_DRIVER_NOT_LOADED = NVML_ERROR_DRIVER_NOT_LOADED
    NVML_ERROR_LIBRARY_NOT_FOUND = NVML_ERROR_LIBRARY_NOT_FOUND
    NVML_ERROR_FUNCTION_NOT_FOUND = NVML_ERROR_FUNCTION_NOT_FOUND
    NVML_ERROR_GPU_IS_LOST = NVML_ERROR_GPU_IS_LOST
    NVML_ERROR_UNKNOWN = NVML_ERROR_UNKNOWN
    NVML_CLOCK_GRAPHICS = NVML_CLOCK_GRAPHICS
    NVML_CLOCK_SM = NVML_CLOCK_SM
    NVML_CLOCK_MEM = NVML_CLOCK_MEM

    def __init__(
        self,
        gpus: list[FakeGpu] | None = None,
        *,
        init_error: int | None = None,
        driver_version: str = "550.54.14",
        cuda_driver_version: int = 12040,
        failing: dict[str, int] | None = None,
    ):
        self.gpus = list(gpus or [])
        self.init_error = init_error
        self.driver_version = driver_version
        self.cuda_driver_version = cuda_driver_version
        self.failing = dict(failing or {})  # system-level function name -> error code
        self.init_count = 0
        self.calls: list[str] = []

    # -- library ---------------------------------------------------------------------------
    def _enter(self, function: str) -> None:
        self.calls.append(function)
        if self.init_count <= 0:
            raise NVMLError(NVML_ERROR_UNINITIALIZED)
        if function in self.failing:
            raise NVMLError(self.failing[function])

    def nvmlInit(self) -> None:
        self.calls.append("nvmlInit")
        if self.init_error is not None:
            raise NVMLError(self.init_error)
        self.init_count += 1

    def nvmlShutdown(self) -> None:
        self._enter("nvmlShutdown")
        self.init_count -= 1

    def nvmlSystemGetDriverVersion(self) -> str:
        self._enter("nvmlSystemGetDriverVersion")
        return self.driver_version

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        self._enter("nvmlSystemGetCudaDriverVersion")
        return self.cuda_driver_version

    def nvmlDeviceGetCount(self) -> int:
        self._enter("nvmlDeviceGetCount")
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> _Handle:
        self._enter("nvmlDeviceGetHandleByIndex")
        if not 0 <= index < len(self.gpus):
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        gpu = self.gpus[index]
        if "nvmlDeviceGetHandleByIndex" in gpu.failing:
            raise NVMLError(gpu.failing["nvmlDeviceGetHandleByIndex"])
        return _Handle(gpu)

    # -- per device ------------------------------------------------------------------------
    def _device(self, function: str, handle: _Handle) -> FakeGpu:
        self._enter(function)
        if not isinstance(handle, _Handle):
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        if function in handle._gpu.failing:
            raise NVMLError(handle._gpu.failing[function])
        return handle._gpu

    def nvmlDeviceGetName(self, handle: _Handle) -> str:
        return self._device("nvmlDeviceGetName", handle).name

    def nvmlDeviceGetUUID(self, handle: _Handle) -> str:
        return self._device("nvmlDeviceGetUUID", handle).uuid

    def nvmlDeviceGetMemoryInfo(self, handle: _Handle, version=None) -> pynvml.c_nvmlMemory_t:
        gpu = self._device("nvmlDeviceGetMemoryInfo", handle)
        memory = pynvml.c_nvmlMemory_t()
        memory.total, memory.used, memory.free = gpu.total, gpu.used, gpu.total - gpu.used
        return memory

    def nvmlDeviceGetCudaComputeCapability(self, handle: _Handle) -> tuple[int, int]:
        return self._device("nvmlDeviceGetCudaComputeCapability", handle).compute_capability

    def nvmlDeviceGetMemoryBusWidth(self, device: _Handle) -> int:
        return self._device("nvmlDeviceGetMemoryBusWidth", device).bus_width_bits

    def nvmlDeviceGetMaxClockInfo(self, handle: _Handle, type: int) -> int:
        gpu = self._device("nvmlDeviceGetMaxClockInfo", handle)
        if type != NVML_CLOCK_MEM:
            if type in (NVML_CLOCK_GRAPHICS, NVML_CLOCK_SM):
                return 2520
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        return gpu.max_memory_clock_mhz

    def nvmlDeviceGetCurrPcieLinkGeneration(self, handle: _Handle) -> int:
        return self._device("nvmlDeviceGetCurrPcieLinkGeneration", handle).pcie_generation

    def nvmlDeviceGetCurrPcieLinkWidth(self, handle: _Handle) -> int:
        return self._device("nvmlDeviceGetCurrPcieLinkWidth", handle).pcie_width

    def nvmlDeviceGetMaxPcieLinkGeneration(self, handle: _Handle) -> int:
        return self._device("nvmlDeviceGetMaxPcieLinkGeneration", handle).pcie_max_generation

    def nvmlDeviceGetMaxPcieLinkWidth(self, handle: _Handle) -> int:
        return self._device("nvmlDeviceGetMaxPcieLinkWidth", handle).pcie_max_width

    def nvmlDeviceGetUtilizationRates(self, handle: _Handle) -> pynvml.c_nvmlUtilization_t:
        gpu = self._device("nvmlDeviceGetUtilizationRates", handle)
        utilization = pynvml.c_nvmlUtilization_t()
        utilization.gpu, utilization.memory = gpu.utilization
        return utilization


def rtx4090(index: int = 0, **changes) -> FakeGpu:
    return FakeGpu(uuid=f"GPU-4090-{index:04d}", **changes)


def h100(index: int = 0, **changes) -> FakeGpu:
    values = dict(
        name="NVIDIA H100 80GB HBM3",
        uuid=f"GPU-H100-{index:04d}",
        total=80 * 2**30,
        used=512 * 2**20,
        compute_capability=(9, 0),
        bus_width_bits=5120,
        max_memory_clock_mhz=2619,
        pcie_generation=5,
        pcie_width=16,
        pcie_max_generation=5,
        pcie_max_width=16,
        utilization=(0, 0),
    )
    values.update(changes)
    return FakeGpu(**values)
