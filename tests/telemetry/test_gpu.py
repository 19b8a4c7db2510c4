from __future__ import annotations

import inspect
import logging
import threading
from collections.abc import Iterator
from typing import Any

import pynvml
import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader, NumberDataPoint

from akka_training.core.clock import SYSTEM_CLOCK, Clock, ManualClock
from akka_training.core.reports import Gpu
from akka_training.telemetry import catalog as c
from akka_training.telemetry.gpu import GpuHealth, decode_throttle_reasons
from akka_training.telemetry.job_metrics import JobTelemetry
from akka_training.testing.fake_nvml import FakeGpu, FakeNvml
from akka_training.testing.otlp_receiver import OtlpReceiver
from akka_training.testing.waiting import until

P = c.PREFIX
A, B = "GPU-0a1b2c3d-0000-1111-2222-333344445555", "GPU-9f8e7d6c-0000-1111-2222-333344445555"


def _nvml(clock: Clock = SYSTEM_CLOCK) -> FakeNvml:
    return FakeNvml(
        [
            FakeGpu(
                A,
                index=0,
                power_mw=412_500,
                clock_reasons=FakeNvml.nvmlClocksEventReasonSwPowerCap
                | FakeNvml.nvmlClocksEventReasonHwThermalSlowdown,
                ecc_corrected=3,
            ),
            FakeGpu(B, index=1, unsupported={"nvmlDeviceGetTotalEccErrors"}),
        ],
        clock=clock,
    )


def _close(health: GpuHealth, clock: ManualClock) -> None:
    """Close `health`, moving the clock on until its thread's last wait for NVML ends."""
    closing = threading.Thread(target=health.close)
    closing.start()

    def stopped() -> bool:
        clock.advance(1)
        return not closing.is_alive()

    until(stopped, what="the sampler to stop", timeout=30)


@pytest.fixture
def memory() -> Iterator[tuple[MeterProvider, InMemoryMetricReader]]:
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    yield provider, reader
    provider.shutdown()


def _points(reader: InMemoryMetricReader, name: str) -> list[tuple[dict[str, Any], float]]:
    data = reader.get_metrics_data()
    found: list[tuple[dict[str, Any], float]] = []
    for rm in data.resource_metrics if data else []:
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                if metric.name == name:
                    for p in metric.data.data_points:
                        assert isinstance(p, NumberDataPoint)  # a gauge's
                        found.append((dict(p.attributes or {}), p.value))
    return found


def test_throttle_reasons_decode_with_nvml_bits() -> None:
    mask = pynvml.nvmlClocksEventReasonSwPowerCap | pynvml.nvmlClocksEventReasonHwSlowdown
    decoded = decode_throttle_reasons(pynvml, mask)
    assert set(decoded) == set(c.THROTTLE_REASONS)
    assert {r for r, active in decoded.items() if active} == {"sw-power-cap", "hw-slowdown"}
    assert decode_throttle_reasons(FakeNvml([]), 0x20) == {
        **dict.fromkeys(c.THROTTLE_REASONS, False),
        "sw-thermal-slowdown": True,
    }


def test_health_of_each_gpu_reaches_the_collector_with_its_uuid(
    job: JobTelemetry, receiver: OtlpReceiver
) -> None:
    nvml = _nvml()
    health = job.watch_gpus([Gpu(index=0, uuid=A), Gpu(index=1, uuid=B)], nvml=nvml, interval_s=60)
    assert health.active and health.uuids == [A, B]
    assert job.flush()

    power = receiver.wait_for_metric(P + "gpu.power")
    assert power.unit == "W"
    assert power.require_point({c.GPU_UUID: A}).value == 412.5
    assert power.require_point({c.GPU_UUID: B}).attributes == {c.GPU_UUID: B, c.GPU_INDEX: 1}
    assert (
        receiver.wait_for_metric(P + "gpu.temperature").require_point({c.GPU_UUID: A}).value == 55
    )
    utilisation = receiver.wait_for_metric(P + "gpu.utilization.ratio")
    assert utilisation.unit == "1"
    assert utilisation.require_point({c.GPU_UUID: A}).value == 0.97  # NVML says 97 (%)
    assert (
        receiver.wait_for_metric(P + "gpu.memory.used").require_point({c.GPU_UUID: B}).value
        == 60 * 2**30
    )
    # NVML answers MHz; the series is in hertz.
    assert (
        receiver.wait_for_metric(P + "gpu.clock.sm").require_point({c.GPU_UUID: A}).value == 1980e6
    )
    assert receiver.wait_for_metric(P + "gpu.clock.memory").unit == "Hz"

    throttle = receiver.wait_for_metric(P + "gpu.throttle")
    active = {
        p.attributes[c.GPU_THROTTLE_REASON]
        for p in throttle.points
        if p.attributes[c.GPU_UUID] == A and p.value == 1
    }
    assert active == {"sw-power-cap", "hw-thermal-slowdown"}
    idle = throttle.require_point({c.GPU_UUID: B, c.GPU_THROTTLE_REASON: "gpu-idle"})
    assert idle.value == 0
    ecc = receiver.wait_for_metric(P + "gpu.ecc.errors")
    assert ecc.monotonic is True
    assert ecc.require_point({c.GPU_UUID: A, c.GPU_ECC_TYPE: "corrected"}).value == 3
    assert ecc.point({c.GPU_UUID: B}) is None  # B does not report ECC
    job.shutdown()
    assert nvml.shutdown_calls == nvml.init_calls == 1


def test_xid_events_are_counted_per_gpu_and_code(
    memory: tuple[MeterProvider, InMemoryMetricReader],
) -> None:
    provider, reader = memory
    clock = ManualClock()
    nvml = _nvml(clock)
    health = GpuHealth(provider.get_meter("t"), [A, B], nvml=nvml, interval_s=60, clock=clock)
    assert health.start()
    try:
        assert {uuid for uuid, _ in nvml.registered} == {A, B}
        assert all(kind == nvml.nvmlEventTypeXidCriticalError for _, kind in nvml.registered)
        clock.settle(threads=1)  # the thread waits for NVML's events
        nvml.queue_xid(B, 79)
        nvml.queue_xid(B, 79)
        nvml.queue_xid(A, 48)
        clock.settle()  # it took them, with no time passing, and waits again
        counted = _points(reader, P + "gpu.xid.errors")
    finally:
        _close(health, clock)
    assert sorted((a[c.GPU_UUID], a[c.GPU_XID], v) for a, v in counted if v) == [
        (A, 48, 1),
        (B, 79, 2),
    ]
    # Every XID of note was published at 0 for each GPU from the start, so Prometheus sees
    # the first one as an increase.
    zeros = {(a[c.GPU_UUID], a[c.GPU_XID]) for a, v in counted if v == 0}
    assert zeros == {(g, x) for g in (A, B) for x in c.XIDS_OF_NOTE} - {(A, 48), (B, 79)}


def test_the_sampler_thread_follows_changing_readings(
    memory: tuple[MeterProvider, InMemoryMetricReader],
) -> None:
    provider, reader = memory
    clock = ManualClock()
    nvml = _nvml(clock)
    health = GpuHealth(
        provider.get_meter("t"), [A], nvml=nvml, interval_s=0.5, event_wait_ms=100, clock=clock
    )
    assert health.start()
    try:
        clock.settle(threads=1)
        nvml.gpus[0].temperature_c = 91
        nvml.gpus[0].clock_reasons = FakeNvml.nvmlClocksEventReasonGpuIdle
        clock.advance(0.25)  # within the interval: no sample yet
        clock.settle()
        assert _points(reader, P + "gpu.temperature")[0][1] != 91
        clock.advance(0.25)  # the interval is up: the thread samples
        clock.settle()
        assert _points(reader, P + "gpu.temperature") == [({c.GPU_UUID: A, c.GPU_INDEX: 0}, 91)]
        throttle = {a[c.GPU_THROTTLE_REASON]: v for a, v in _points(reader, P + "gpu.throttle")}
    finally:
        _close(health, clock)
    assert _points(reader, P + "gpu.temperature")[0][1] == 91
    assert throttle["gpu-idle"] == 1 and throttle["sw-power-cap"] == 0


def test_without_nvml_it_says_once_that_gpu_health_is_off_and_publishes_nothing(
    memory: tuple[MeterProvider, InMemoryMetricReader], caplog: pytest.LogCaptureFixture
) -> None:
    provider, reader = memory
    nvml = FakeNvml.without_driver()
    health = GpuHealth(provider.get_meter("t"), [A], nvml=nvml, interval_s=0.01)
    with caplog.at_level(logging.INFO, logger="akka_training.telemetry.gpu"):
        assert not health.start()
        health.sample()
        health.poll_events(5)
        health.close()
    off = [r for r in caplog.records if "GPU health is off" in r.getMessage()]
    assert len(off) == 1
    assert "NVML Shared Library Not Found" in off[0].getMessage()
    assert not health.active
    assert _points(reader, P + "gpu.power") == []
    assert _points(reader, P + "gpu.ecc.errors") == []


def test_the_default_nvml_on_a_machine_without_a_driver(
    memory: tuple[MeterProvider, InMemoryMetricReader], caplog: pytest.LogCaptureFixture
) -> None:
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        pass
    else:
        pynvml.nvmlShutdown()
        pytest.skip("this machine has an NVIDIA driver")
    provider, reader = memory
    health = GpuHealth(provider.get_meter("t"), [0])  # pynvml, imported by the sampler
    with caplog.at_level(logging.WARNING, logger="akka_training.telemetry.gpu"):
        assert not health.start()
    assert len([r for r in caplog.records if "GPU health is off" in r.getMessage()]) == 1
    assert _points(reader, P + "gpu.temperature") == []


def test_the_stand_in_matches_nvidia_ml_py() -> None:
    for name, value in vars(FakeNvml).items():
        if name.startswith(("NVML_", "nvml")) and not callable(value):
            assert getattr(pynvml, name) == value, name
    for name, function in inspect.getmembers(FakeNvml, inspect.isfunction):
        if name.startswith("nvml"):
            assert callable(getattr(pynvml, name)), name
            real = list(inspect.signature(getattr(pynvml, name)).parameters)
            fake = list(inspect.signature(function).parameters)[1:]
            assert len(real) == len(fake), name
