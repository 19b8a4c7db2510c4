from __future__ import annotations

import logging
import re

import pytest

from akka_training.core.failures import FailureReason
from akka_training.telemetry import catalog as c
from akka_training.telemetry.service_metrics import (
    PROMETHEUS_CONTENT_TYPE,
    CapacitySnapshot,
    PoolCapacity,
    ProjectCapacity,
    ScrapeOff,
    ServiceTelemetry,
)
from akka_training.testing.otlp_receiver import OtlpReceiver

P = c.PREFIX


def _snapshot() -> CapacitySnapshot:
    return CapacitySnapshot(
        pools=[
            PoolCapacity("training", "nvidia-h200", 8, 7, 5, {"granted": 2, "queued": 1}),
            PoolCapacity("small", "nvidia-l4", 2, None, 0, {}),
        ],
        projects=[ProjectCapacity("maths", 4, 6), ProjectCapacity("vision", 1, None)],
        runs_by_phase={("maths", "TRAINING"): 2, ("maths", "QUEUED"): 1},
        evaluations_by_state={("maths", "SUCCEEDED"): 3},
    )


def test_capacity_gauges_reach_the_collector_with_their_units_and_attributes(
    receiver: OtlpReceiver,
) -> None:
    telemetry = ServiceTelemetry(receiver.endpoint, _snapshot, export_interval_s=3600)
    try:
        telemetry.run_failed("maths", FailureReason.DEVICE_OOM)
        telemetry.run_failed("maths", "device-oom")
        assert telemetry.flush()
    finally:
        telemetry.shutdown()

    declared = receiver.wait_for_metric(P + "pool.devices.declared")
    assert (declared.kind, declared.unit) == ("gauge", "{device}")
    assert declared.resource["service.name"] == "akka-training"
    assert (
        declared.require_point({c.POOL_NAME: "training", c.POOL_ACCELERATOR: "nvidia-h200"}).value
        == 8
    )
    observed = receiver.wait_for_metric(P + "pool.devices.observed")
    # A pool the backend has not reported yet has no observed value rather than a false 0.
    assert [p.attributes[c.POOL_NAME] for p in observed.points] == ["training"]
    claims = receiver.wait_for_metric(P + "pool.claims")
    assert claims.require_point({c.CLAIM_STATE: "queued"}).attributes == {
        c.POOL_NAME: "training",
        c.POOL_ACCELERATOR: "nvidia-h200",
        c.CLAIM_STATE: "queued",
    }

    names = ("project.devices.claimed", "project.devices.quota", "runs", "evaluations")
    for name in (*names, "run.failures"):
        record = receiver.wait_for_metric(P + name)
        for point in record.points:
            assert point.attributes[c.PROJECT] in ("maths", "vision")
            assert c.RUN_ID not in point.attributes
        assert c.RUN_ID not in record.resource
    quota = receiver.wait_for_metric(P + "project.devices.quota")
    assert [p.attributes[c.PROJECT] for p in quota.points] == ["maths"]  # vision has no quota
    runs = receiver.wait_for_metric(P + "runs")
    assert runs.require_point({c.RUN_PHASE: "TRAINING"}).value == 2
    assert runs.require_point({c.RUN_PHASE: "PAUSED"}).value == 0  # every phase, 0 where empty
    evaluations = receiver.wait_for_metric(P + "evaluations")
    assert evaluations.unit == "{evaluation}"
    assert evaluations.require_point({c.EVALUATION_STATE: "SUCCEEDED"}).value == 3
    assert evaluations.require_point({c.EVALUATION_STATE: "RUNNING"}).value == 0
    failures = receiver.wait_for_metric(P + "run.failures")
    assert (failures.kind, failures.monotonic) == ("sum", True)
    assert failures.require_point({c.FAILURE_REASON: "device-oom"}).value == 2


def test_prometheus_text_for_metrics_endpoint() -> None:
    telemetry = ServiceTelemetry(None, _snapshot)
    try:
        telemetry.run_failed("maths", FailureReason.JOB_CRASHED)
        text = telemetry.prometheus_text().decode()
    finally:
        telemetry.shutdown()
    assert PROMETHEUS_CONTENT_TYPE.startswith("text/plain")
    assert re.search(
        r"^akka_optimize_training_pool_devices_declared\{akka_optimize_training_pool_accelerator="
        r'"nvidia-h200",akka_optimize_training_pool_name="training"\} 8\.0$',
        text,
        re.MULTILINE,
    )
    assert re.search(
        r"^akka_optimize_training_run_failures_total\{akka_optimize_training_failure_reason="
        r'"job-crashed",akka_optimize_training_project="maths"\} 1\.0$',
        text,
        re.MULTILINE,
    )
    assert "# TYPE akka_optimize_training_pool_claims gauge" in text


def test_one_collection_reads_the_snapshot_once_and_instances_are_independent() -> None:
    calls = []

    def snapshot() -> CapacitySnapshot:
        calls.append(1)
        return _snapshot()

    first = ServiceTelemetry(None, snapshot, snapshot_ttl_s=60)
    second = ServiceTelemetry(None, lambda: CapacitySnapshot())
    try:
        first.prometheus_text()
        assert len(calls) == 1
        assert "pool_devices_declared" not in second.prometheus_text().decode()
    finally:
        first.shutdown()
        second.shutdown()


def test_a_failing_snapshot_is_logged_once_and_publishes_nothing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def broken() -> CapacitySnapshot:
        raise RuntimeError("database is down")

    telemetry = ServiceTelemetry(None, broken, snapshot_ttl_s=0)
    try:
        with caplog.at_level(logging.WARNING):
            first = telemetry.prometheus_text().decode()
            telemetry.prometheus_text()
    finally:
        telemetry.shutdown()
    assert "pool_devices_declared" not in first
    logged = [r for r in caplog.records if "capacity snapshot could not be read" in r.message]
    assert len(logged) == 1


def test_with_scrape_chosen_nothing_goes_over_otlp_and_with_otlp_nothing_is_scraped(
    receiver: OtlpReceiver,
) -> None:
    scraped = ServiceTelemetry(receiver.endpoint, _snapshot, export="scrape")
    try:
        assert b"akka_optimize_training_pool_devices_declared" in scraped.prometheus_text()
        assert scraped.flush()
    finally:
        scraped.shutdown()
    assert receiver.latest(P + "pool.devices.declared") is None

    exported = ServiceTelemetry(receiver.endpoint, _snapshot, export_interval_s=3600)
    try:
        assert exported.export == "otlp"  # the default with a collector
        with pytest.raises(ScrapeOff, match=re.escape("over OTLP to http://127.0.0.1")):
            exported.prometheus_text()
        assert exported.flush()
    finally:
        exported.shutdown()
    assert receiver.wait_for_metric(P + "pool.devices.declared")
    with pytest.raises(
        ValueError, match=re.escape("no trainer.telemetry.collector-endpoint is set")
    ):
        ServiceTelemetry(None, _snapshot, export="otlp")


def test_run_failures_start_at_0_for_every_reason_of_every_project() -> None:
    telemetry = ServiceTelemetry(None, _snapshot)
    try:
        text = telemetry.prometheus_text().decode()
    finally:
        telemetry.shutdown()
    name = c.prometheus_name(c.metric(P + "run.failures"))
    reason = c.prometheus_label(c.FAILURE_REASON)
    for project in ("maths", "vision"):
        for r in FailureReason:
            assert re.search(
                rf'^{name}{{.*{reason}="{r.value}".*}} 0\.0$|^{name}{{.*project="{project}".*{reason}="{r.value}".*}} 0\.0$',
                text,
                re.M,
            ), (project, r)
