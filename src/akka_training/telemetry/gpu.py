"""GPU health of a training job, sampled from NVML.

`GpuHealth` samples each GPU the job uses on a daemon thread: power, temperature, utilisation
(a 0-1 ratio), memory in use, SM and memory clocks (in hertz), clock-event (throttle) reasons and ECC error counts; and it
counts the XID errors the driver reports through NVML events. Every series carries the GPU's
UUID and index, so a dashboard can set them beside DCGM's series for the same GPU.

The NVML module is injectable: by default ``pynvml`` (from nvidia-ml-py) is imported when
sampling starts; tests pass `akka_training.testing.fake_nvml.FakeNvml`. Without NVML (no
driver, no library) the sampler logs once that GPU health is off and publishes nothing.

Between samples the thread waits on NVML's event set, so an XID is counted as it arrives rather
than at the next sample.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from opentelemetry.metrics import CallbackOptions, Meter, Observation

from akka_training.core.clock import SYSTEM_CLOCK, Clock
from akka_training.telemetry import catalog as c
from akka_training.telemetry.otel import create_instruments

log = logging.getLogger(__name__)

# The metrics this module publishes (a job's other instruments are made elsewhere).
GPU_HEALTH_METRICS: tuple[str, ...] = tuple(
    c.PREFIX + short
    for short in (
        "gpu.power",
        "gpu.temperature",
        "gpu.utilization.ratio",
        "gpu.memory.used",
        "gpu.clock.sm",
        "gpu.clock.memory",
        "gpu.throttle",
        "gpu.ecc.errors",
        "gpu.xid.errors",
    )
)

# Each reason's NVML constant: the clock-event name (NVML 12+) first, the older throttle name
# second (the same bit).
THROTTLE_CONSTANTS: dict[str, tuple[str, str]] = {
    "gpu-idle": ("nvmlClocksEventReasonGpuIdle", "nvmlClocksThrottleReasonGpuIdle"),
    "applications-clocks-setting": (
        "nvmlClocksEventReasonApplicationsClocksSetting",
        "nvmlClocksThrottleReasonApplicationsClocksSetting",
    ),
    "sw-power-cap": ("nvmlClocksEventReasonSwPowerCap", "nvmlClocksThrottleReasonSwPowerCap"),
    "hw-slowdown": ("nvmlClocksEventReasonHwSlowdown", "nvmlClocksThrottleReasonHwSlowdown"),
    "sync-boost": ("nvmlClocksEventReasonSyncBoost", "nvmlClocksThrottleReasonSyncBoost"),
    "sw-thermal-slowdown": (
        "nvmlClocksEventReasonSwThermalSlowdown",
        "nvmlClocksThrottleReasonSwThermalSlowdown",
    ),
    "hw-thermal-slowdown": (
        "nvmlClocksEventReasonHwThermalSlowdown",
        "nvmlClocksThrottleReasonHwThermalSlowdown",
    ),
    "hw-power-brake-slowdown": (
        "nvmlClocksEventReasonHwPowerBrakeSlowdown",
        "nvmlClocksThrottleReasonHwPowerBrakeSlowdown",
    ),
    "display-clock-setting": (
        "nvmlClocksEventReasonDisplayClockSetting",
        "nvmlClocksThrottleReasonDisplayClockSetting",
    ),
}


def decode_throttle_reasons(nvml: Any, mask: int) -> dict[str, bool]:
    """Every known reason, True where its bit is set in `mask`."""
    decoded: dict[str, bool] = {}
    for reason, names in THROTTLE_CONSTANTS.items():
        bit = next((getattr(nvml, n) for n in names if hasattr(nvml, n)), None)
        if bit is not None:
            decoded[reason] = bool(mask & bit)
    return decoded


def open_nvml(nvml: Any | None = None) -> tuple[Any | None, str | None]:
    """(the initialised NVML module, None), or (None, why not). Each success must be paired
    with ``nvmlShutdown()``."""
    if nvml is None:
        try:
            import pynvml  # nvidia-ml-py; imported here so a process without GPUs never loads it

            nvml = pynvml
        except ImportError as exc:
            return None, f"nvidia-ml-py is not installed ({exc})"
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as exc:
        return None, str(exc)
    return nvml, None


def text(value: bytes | str) -> str:
    """NVML strings arrive as bytes from some bindings and str from others."""
    return value.decode() if isinstance(value, bytes) else value


@dataclass
class _Gpu:
    handle: Any
    uuid: str
    index: int
    attrs: dict[str, str | int] = field(default_factory=dict)
    # Readings NVML answered NOT_SUPPORTED for: not asked again.
    unsupported: set[str] = field(default_factory=set)
    # Readings that failed otherwise: logged once, asked again at the next sample.
    warned: set[str] = field(default_factory=set)


class GpuHealth:
    """Samples GPU health every `interval_s` on a daemon thread once `start()` succeeded.

    `gpus`: the GPUs to watch, each a UUID (``GPU-…``) or an NVML index; None for every GPU
    NVML sees. `sample()` and `poll_events()` are what the thread calls; they are public so a
    caller can take a reading at a moment of its choice. `clock`: the time the interval counts
    (NVML's own event wait counts the machine's; a test's fake NVML takes the test's clock).
    """

    def __init__(
        self,
        meter: Meter,
        gpus: Sequence[str | int] | None = None,
        *,
        nvml: Any | None = None,
        interval_s: float = 15.0,
        event_wait_ms: int = 250,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self._requested = gpus
        self._clock = clock
        self._nvml_arg = nvml
        self._interval = interval_s
        self._event_wait_ms = event_wait_ms
        self._nvml: Any | None = None
        self._gpus: list[_Gpu] = []
        self._events: Any | None = None
        self._stop = clock.event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._ecc: dict[tuple[str, int, str], int] = {}
        specs = [c.metric(n) for n in GPU_HEALTH_METRICS if n != c.PREFIX + "gpu.ecc.errors"]
        self._instruments = create_instruments(meter, specs)
        ecc = c.metric(c.PREFIX + "gpu.ecc.errors")
        meter.create_observable_counter(
            ecc.name, callbacks=[self._observe_ecc], unit=ecc.unit, description=ecc.description
        )

    @property
    def active(self) -> bool:
        return self._nvml is not None

    @property
    def uuids(self) -> list[str]:
        return [g.uuid for g in self._gpus]

    def start(self) -> bool:
        """Open NVML, take a first sample and start the thread. False (after one log line)
        when NVML or the GPUs are not available: then nothing is published."""
        nvml, error = open_nvml(self._nvml_arg)
        if nvml is None:
            log.warning("GPU health is off: NVML is not available (%s)", error)
            return False
        gpus = self._resolve(nvml)
        if not gpus:
            log.warning("GPU health is off: NVML found none of the GPUs %s", self._requested)
            nvml.nvmlShutdown()
            return False
        self._nvml, self._gpus = nvml, gpus
        self._events = self._register_xid_events(nvml)
        if self._events is not None:
            # At 0 from the start, so the first XID of note shows as an increase.
            xids = self._instruments[c.PREFIX + "gpu.xid.errors"]
            for gpu in gpus:
                for xid in c.XIDS_OF_NOTE:
                    xids.add(0, {**gpu.attrs, c.GPU_XID: xid})
        self.sample()
        self._thread = threading.Thread(target=self._loop, name="akka-gpu-health", daemon=True)
        self._thread.start()
        return True

    def sample(self) -> None:
        """Read every watched GPU once and set the gauges."""
        nvml = self._nvml
        if nvml is None:
            return
        m = self._instruments
        for gpu in self._gpus:
            for short, reading in _GAUGE_READINGS.items():
                value = self._read(nvml, gpu, short, partial(reading, nvml, gpu.handle))
                if value is not None:
                    m[c.PREFIX + short].set(float(value), gpu.attrs)
            mask = self._read(nvml, gpu, "gpu.throttle", partial(_clock_reasons, nvml, gpu.handle))
            if mask is not None:
                for reason, active in decode_throttle_reasons(nvml, int(mask)).items():
                    attrs = {**gpu.attrs, c.GPU_THROTTLE_REASON: reason}
                    m[c.PREFIX + "gpu.throttle"].set(1 if active else 0, attrs)
            for ecc_type in ("corrected", "uncorrected"):
                read = partial(_ecc_errors, nvml, gpu.handle, ecc_type)
                count = self._read(nvml, gpu, f"gpu.ecc.{ecc_type}", read)
                if count is not None:
                    with self._lock:
                        self._ecc[(gpu.uuid, gpu.index, ecc_type)] = int(count)

    def poll_events(self, timeout_ms: int = 0) -> int:
        """Wait up to `timeout_ms` for one NVML event and count it when it is an XID error;
        returns the number of XID errors counted (0 or 1)."""
        nvml = self._nvml
        if nvml is None or self._events is None:
            self._stop.wait(timeout_ms / 1000)
            return 0
        try:
            data = nvml.nvmlEventSetWait(self._events, timeout_ms)
        except nvml.NVMLError as exc:
            if exc.value != nvml.NVML_ERROR_TIMEOUT:
                log.warning("XID events are off: waiting for NVML events failed (%s)", exc)
                self._free_events()
            return 0
        if not data.eventType & nvml.nvmlEventTypeXidCriticalError:
            return 0
        uuid = text(nvml.nvmlDeviceGetUUID(data.device))
        gpu = next((g for g in self._gpus if g.uuid == uuid), None)
        if gpu is None:
            return 0
        xid = int(data.eventData)
        log.warning("GPU %s (index %d) reported XID %d", gpu.uuid, gpu.index, xid)
        self._instruments[c.PREFIX + "gpu.xid.errors"].add(1, {**gpu.attrs, c.GPU_XID: xid})
        return 1

    def close(self) -> None:
        """Stop the thread and release NVML. Safe to call more than once."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=max(5.0, self._event_wait_ms / 1000 * 4))
            self._thread = None
        if self._nvml is not None:
            self._free_events()
            try:
                self._nvml.nvmlShutdown()
            except self._nvml.NVMLError as exc:
                log.debug("nvmlShutdown: %s", exc)
            self._nvml = None

    # --- internals ---------------------------------------------------------------------------

    def _loop(self) -> None:
        while not self._stop.is_set():
            deadline = self._clock.monotonic() + self._interval
            while not self._stop.is_set():
                left_ms = int((deadline - self._clock.monotonic()) * 1000)
                if left_ms <= 0:
                    break
                self.poll_events(min(left_ms, self._event_wait_ms))
            if self._stop.is_set():
                return
            try:
                self.sample()
            except Exception:
                # A sampler must not take the job down: log and keep going.
                log.exception("GPU health sample failed")

    def _resolve(self, nvml: Any) -> list[_Gpu]:
        wanted: Iterable[str | int] = (
            self._requested if self._requested is not None else range(nvml.nvmlDeviceGetCount())
        )
        gpus: list[_Gpu] = []
        for key in wanted:
            try:
                if isinstance(key, str) and not key.isdigit():
                    handle = nvml.nvmlDeviceGetHandleByUUID(key)
                else:
                    handle = nvml.nvmlDeviceGetHandleByIndex(int(key))
                uuid = text(nvml.nvmlDeviceGetUUID(handle))
                index = int(nvml.nvmlDeviceGetIndex(handle))
            except nvml.NVMLError as exc:
                log.warning("GPU health: GPU %s is not watched: %s", key, exc)
                continue
            gpus.append(_Gpu(handle, uuid, index, {c.GPU_UUID: uuid, c.GPU_INDEX: index}))
        return gpus

    def _register_xid_events(self, nvml: Any) -> Any | None:
        try:
            events = nvml.nvmlEventSetCreate()
        except nvml.NVMLError as exc:
            log.info("XID events are off: NVML could not create an event set (%s)", exc)
            return None
        registered = 0
        for gpu in self._gpus:
            try:
                nvml.nvmlDeviceRegisterEvents(
                    gpu.handle, nvml.nvmlEventTypeXidCriticalError, events
                )
                registered += 1
            except nvml.NVMLError as exc:
                log.info("XID events are off for GPU %s: %s", gpu.uuid, exc)
        if registered:
            return events
        nvml.nvmlEventSetFree(events)
        return None

    def _free_events(self) -> None:
        if self._events is not None and self._nvml is not None:
            try:
                self._nvml.nvmlEventSetFree(self._events)
            except self._nvml.NVMLError as exc:
                log.debug("nvmlEventSetFree: %s", exc)
        self._events = None

    def _read(self, nvml: Any, gpu: _Gpu, what: str, read: Callable[[], Any]) -> Any | None:
        if what in gpu.unsupported:
            return None
        try:
            return read()
        except nvml.NVMLError as exc:
            # Not every GPU reports everything (ECC off, power on some boards): say so once.
            if exc.value == nvml.NVML_ERROR_NOT_SUPPORTED:
                gpu.unsupported.add(what)
                log.info("GPU %s does not report %s", gpu.uuid, what)
            elif what not in gpu.warned:
                gpu.warned.add(what)
                log.warning("GPU %s: reading %s failed: %s", gpu.uuid, what, exc)
            return None

    def _observe_ecc(self, _options: CallbackOptions) -> Iterable[Observation]:
        with self._lock:
            items = list(self._ecc.items())
        return [
            Observation(count, {c.GPU_UUID: uuid, c.GPU_INDEX: index, c.GPU_ECC_TYPE: ecc_type})
            for (uuid, index, ecc_type), count in items
        ]


# --- NVML readings: (nvml, handle) -> value in the catalog's unit ----------------------------------


def _power_watts(nvml: Any, handle: Any) -> float:
    return float(nvml.nvmlDeviceGetPowerUsage(handle)) / 1000.0  # NVML answers milliwatts


def _temperature(nvml: Any, handle: Any) -> float:
    return float(nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU))


def _utilization(nvml: Any, handle: Any) -> float:
    return float(nvml.nvmlDeviceGetUtilizationRates(handle).gpu) / 100.0  # NVML answers percent


def _memory_used(nvml: Any, handle: Any) -> float:
    return float(nvml.nvmlDeviceGetMemoryInfo(handle).used)


_MHZ = 1e6


def _sm_clock(nvml: Any, handle: Any) -> float:
    return float(nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM)) * _MHZ  # NVML: MHz


def _memory_clock(nvml: Any, handle: Any) -> float:
    return float(nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_MEM)) * _MHZ


_GAUGE_READINGS: dict[str, Callable[[Any, Any], float]] = {
    "gpu.power": _power_watts,
    "gpu.temperature": _temperature,
    "gpu.utilization.ratio": _utilization,
    "gpu.memory.used": _memory_used,
    "gpu.clock.sm": _sm_clock,
    "gpu.clock.memory": _memory_clock,
}


def _clock_reasons(nvml: Any, handle: Any) -> int:
    # NVML 12 renamed throttle reasons to clock-event reasons; older bindings have the old name.
    if hasattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons"):
        return int(nvml.nvmlDeviceGetCurrentClocksEventReasons(handle))
    return int(nvml.nvmlDeviceGetCurrentClocksThrottleReasons(handle))


def _ecc_errors(nvml: Any, handle: Any, ecc_type: str) -> int:
    error_type = (
        nvml.NVML_MEMORY_ERROR_TYPE_CORRECTED
        if ecc_type == "corrected"
        else nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
    )
    return int(nvml.nvmlDeviceGetTotalEccErrors(handle, error_type, nvml.NVML_VOLATILE_ECC))
