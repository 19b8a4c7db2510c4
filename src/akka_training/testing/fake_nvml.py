"""A stand-in for NVML (the ``pynvml`` module) with scripted GPUs.

`FakeNvml` has the functions and constants `akka_training.telemetry.gpu` and
`akka_training.telemetry.placement` call, with NVML's own numeric values for the constants, and
raises `FakeNvml.NVMLError` (carrying ``value``, as pynvml's errors do) where NVML would. A
test scripts each GPU's readings in a `FakeGpu`, changes them between samples, and queues XID
events with `queue_xid`.

    nvml = FakeNvml([FakeGpu(uuid="GPU-aaaa", clock_reasons=FakeNvml.nvmlClocksEventReasonSwPowerCap)])
    nvml.queue_xid("GPU-aaaa", 79)
    FakeNvml.without_driver()  # nvmlInit raises, as on a machine without a driver
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from akka_training.core.clock import SYSTEM_CLOCK, Clock


@dataclass
class FakeGpu:
    uuid: str
    index: int = 0
    name: str = "NVIDIA H200"
    power_mw: int = 350_000
    temperature_c: int = 55
    utilization_gpu: int = 97
    utilization_memory: int = 40
    memory_used: int = 60 * 2**30
    memory_total: int = 141 * 2**30
    sm_clock_mhz: int = 1980
    mem_clock_mhz: int = 3201
    # Bitmask of clock-event (throttle) reasons, NVML's bits.
    clock_reasons: int = 0
    ecc_corrected: int = 0
    ecc_uncorrected: int = 0
    # Function names that answer NVML_ERROR_NOT_SUPPORTED for this GPU.
    unsupported: set[str] = field(default_factory=set)


@dataclass
class _Utilization:
    gpu: int
    memory: int


@dataclass
class _Memory:
    total: int
    used: int
    free: int


@dataclass
class _EventData:
    device: Any
    eventType: int
    eventData: int
    gpuInstanceId: int = 0xFFFFFFFF
    computeInstanceId: int = 0xFFFFFFFF


@dataclass(frozen=True)
class _Handle:
    uuid: str


class _NVMLError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.value = value

    def __str__(self) -> str:
        return _ERROR_TEXT.get(self.value, f"NVML error {self.value}")


class FakeNvml:
    """Module-like NVML with scripted GPUs. Counts `init_calls` and `shutdown_calls`."""

    NVMLError = _NVMLError

    NVML_SUCCESS = 0
    NVML_ERROR_UNINITIALIZED = 1
    NVML_ERROR_INVALID_ARGUMENT = 2
    NVML_ERROR_NOT_SUPPORTED = 3
    NVML_ERROR_NOT_FOUND = 6
    NVML_ERROR_DRIVER_NOT_LOADED = 9
    NVML_ERROR_TIMEOUT = 10
    NVML_ERROR_LIBRARY_NOT_FOUND = 12
    NVML_TEMPERATURE_GPU = 0
    NVML_CLOCK_SM = 1
    NVML_CLOCK_MEM = 2
    NVML_VOLATILE_ECC = 0
    NVML_AGGREGATE_ECC = 1
    NVML_MEMORY_ERROR_TYPE_CORRECTED = 0
    NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
    nvmlEventTypeXidCriticalError = 0x0000000000000008
    nvmlClocksEventReasonGpuIdle = 0x0000000000000001
    nvmlClocksEventReasonApplicationsClocksSetting = 0x0000000000000002
    nvmlClocksEventReasonSwPowerCap = 0x0000000000000004
    nvmlClocksEventReasonHwSlowdown = 0x0000000000000008
    nvmlClocksEventReasonSyncBoost = 0x0000000000000010
    nvmlClocksEventReasonSwThermalSlowdown = 0x0000000000000020
    nvmlClocksEventReasonHwThermalSlowdown = 0x0000000000000040
    nvmlClocksEventReasonHwPowerBrakeSlowdown = 0x0000000000000080
    nvmlClocksEventReasonDisplayClockSetting = 0x0000000000000100

    def __init__(
        self,
        gpus: Sequence[FakeGpu],
        *,
        init_error: int | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        """`clock`: the time `nvmlEventSetWait`'s timeout counts (a test's `ManualClock`)."""
        self.gpus = list(gpus)
        self._clock = clock
        self.init_error = init_error
        self.init_calls = 0
        self.shutdown_calls = 0
        self.registered: list[tuple[str, int]] = []
        self._events: deque[_EventData] = deque()
        self._event_ready = clock.condition()
        self._initialised = 0

    @classmethod
    def without_driver(cls) -> FakeNvml:
        """NVML whose nvmlInit fails as it does where the library or driver is missing."""
        return cls([], init_error=cls.NVML_ERROR_LIBRARY_NOT_FOUND)

    # --- scripting ---------------------------------------------------------------------------

    def queue_xid(self, uuid: str, xid: int) -> None:
        """Queue an XID critical error event for the GPU, as the driver would raise it."""
        with self._event_ready:
            self._events.append(_EventData(_Handle(uuid), self.nvmlEventTypeXidCriticalError, xid))
            self._event_ready.notify_all()

    # --- NVML --------------------------------------------------------------------------------

    def nvmlInit(self) -> None:
        self.init_calls += 1
        if self.init_error is not None:
            raise _NVMLError(self.init_error)
        self._initialised += 1

    def nvmlShutdown(self) -> None:
        self._check()
        self.shutdown_calls += 1
        self._initialised -= 1

    def nvmlDeviceGetCount(self) -> int:
        self._check()
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> _Handle:
        self._check()
        for gpu in self.gpus:
            if gpu.index == index:
                return _Handle(gpu.uuid)
        raise _NVMLError(self.NVML_ERROR_INVALID_ARGUMENT)

    def nvmlDeviceGetHandleByUUID(self, uuid: str | bytes) -> _Handle:
        self._check()
        wanted = uuid.decode() if isinstance(uuid, bytes) else uuid
        for gpu in self.gpus:
            if gpu.uuid == wanted:
                return _Handle(gpu.uuid)
        raise _NVMLError(self.NVML_ERROR_NOT_FOUND)

    def nvmlDeviceGetUUID(self, handle: _Handle) -> str:
        return self._gpu(handle, "nvmlDeviceGetUUID").uuid

    def nvmlDeviceGetIndex(self, handle: _Handle) -> int:
        return self._gpu(handle, "nvmlDeviceGetIndex").index

    def nvmlDeviceGetName(self, handle: _Handle) -> str:
        return self._gpu(handle, "nvmlDeviceGetName").name

    def nvmlDeviceGetPowerUsage(self, handle: _Handle) -> int:
        return self._gpu(handle, "nvmlDeviceGetPowerUsage").power_mw

    def nvmlDeviceGetTemperature(self, handle: _Handle, sensor: int) -> int:
        gpu = self._gpu(handle, "nvmlDeviceGetTemperature")
        if sensor != self.NVML_TEMPERATURE_GPU:
            raise _NVMLError(self.NVML_ERROR_INVALID_ARGUMENT)
        return gpu.temperature_c

    def nvmlDeviceGetUtilizationRates(self, handle: _Handle) -> _Utilization:
        gpu = self._gpu(handle, "nvmlDeviceGetUtilizationRates")
        return _Utilization(gpu.utilization_gpu, gpu.utilization_memory)

    def nvmlDeviceGetMemoryInfo(self, handle: _Handle, version: int | None = None) -> _Memory:
        gpu = self._gpu(handle, "nvmlDeviceGetMemoryInfo")
        return _Memory(gpu.memory_total, gpu.memory_used, gpu.memory_total - gpu.memory_used)

    def nvmlDeviceGetClockInfo(self, handle: _Handle, clock: int) -> int:
        gpu = self._gpu(handle, "nvmlDeviceGetClockInfo")
        if clock == self.NVML_CLOCK_SM:
            return gpu.sm_clock_mhz
        if clock == self.NVML_CLOCK_MEM:
            return gpu.mem_clock_mhz
        raise _NVMLError(self.NVML_ERROR_INVALID_ARGUMENT)

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: _Handle) -> int:
        return self._gpu(handle, "nvmlDeviceGetCurrentClocksEventReasons").clock_reasons

    def nvmlDeviceGetTotalEccErrors(self, handle: _Handle, error_type: int, counter: int) -> int:
        gpu = self._gpu(handle, "nvmlDeviceGetTotalEccErrors")
        if counter not in (self.NVML_VOLATILE_ECC, self.NVML_AGGREGATE_ECC):
            raise _NVMLError(self.NVML_ERROR_INVALID_ARGUMENT)
        if error_type == self.NVML_MEMORY_ERROR_TYPE_CORRECTED:
            return gpu.ecc_corrected
        return gpu.ecc_uncorrected

    def nvmlEventSetCreate(self) -> object:
        self._check()
        return object()

    def nvmlDeviceRegisterEvents(
        self, handle: _Handle, event_types: int, _event_set: object
    ) -> None:
        gpu = self._gpu(handle, "nvmlDeviceRegisterEvents")
        self.registered.append((gpu.uuid, event_types))

    def nvmlEventSetWait(self, _event_set: object, timeout_ms: int) -> _EventData:
        """The next queued event, or NVML_ERROR_TIMEOUT after `timeout_ms`."""
        self._check()
        deadline = self._clock.monotonic() + timeout_ms / 1000
        with self._event_ready:
            while not self._events:
                left = deadline - self._clock.monotonic()
                if left <= 0:
                    raise _NVMLError(self.NVML_ERROR_TIMEOUT)
                self._event_ready.wait(left)
            return self._events.popleft()

    def nvmlEventSetFree(self, _event_set: object) -> None:
        self._check()

    # --- internals ---------------------------------------------------------------------------

    def _check(self) -> None:
        if self._initialised <= 0:
            raise _NVMLError(self.NVML_ERROR_UNINITIALIZED)

    def _gpu(self, handle: _Handle, function: str) -> FakeGpu:
        self._check()
        for gpu in self.gpus:
            if gpu.uuid == handle.uuid:
                if function in gpu.unsupported:
                    raise _NVMLError(self.NVML_ERROR_NOT_SUPPORTED)
                return gpu
        raise _NVMLError(self.NVML_ERROR_INVALID_ARGUMENT)


_ERROR_TEXT = {
    FakeNvml.NVML_ERROR_UNINITIALIZED: "Uninitialized",
    FakeNvml.NVML_ERROR_INVALID_ARGUMENT: "Invalid Argument",
    FakeNvml.NVML_ERROR_NOT_SUPPORTED: "Not Supported",
    FakeNvml.NVML_ERROR_NOT_FOUND: "Not Found",
    FakeNvml.NVML_ERROR_DRIVER_NOT_LOADED: "Driver Not Loaded",
    FakeNvml.NVML_ERROR_TIMEOUT: "Timeout",
    FakeNvml.NVML_ERROR_LIBRARY_NOT_FOUND: "NVML Shared Library Not Found",
}
