"""Fixtures for the telemetry tests: a loopback OTLP receiver, and a job's telemetry pointed at
it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from akka_training.telemetry.job_metrics import JobTelemetry
from akka_training.telemetry.otel import job_resource
from akka_training.testing.otlp_receiver import OtlpReceiver


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    with OtlpReceiver() as r:
        yield r


@pytest.fixture
def job(receiver: OtlpReceiver, tmp_path: Path) -> Iterator[JobTelemetry]:
    """A job's telemetry exporting to `receiver` only when flushed (the interval is long)."""
    telemetry = JobTelemetry(
        job_resource("run-1", 2, "maths", method="grpo", engine="trl", pod="p-0", node="n-1"),
        receiver.endpoint,
        tmp_path / "artifacts",
        export_interval_s=3600,
    )
    yield telemetry
    telemetry.shutdown()
