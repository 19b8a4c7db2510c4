from __future__ import annotations

import httpx
import pytest
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource

from akka_training.testing.otlp_receiver import DataPoint, MetricRecord, OtlpReceiver


def test_gzip_exports_are_decoded_into_records(receiver: OtlpReceiver) -> None:
    exporter = OTLPMetricExporter(
        endpoint=f"{receiver.endpoint}/v1/metrics", compression=Compression.Gzip
    )
    reader = PeriodicExportingMetricReader(exporter, export_interval_millis=3_600_000)
    provider = MeterProvider(resource=Resource.create({"k": "v"}), metric_readers=[reader])
    counter = provider.get_meter("scope-a").create_counter("demo.count", unit="{thing}")
    counter.add(3, {"colour": "red", "n": 2, "ok": True})
    provider.shutdown()

    record = receiver.wait_for_metric("demo.count")
    assert (record.unit, record.kind, record.monotonic, record.scope) == (
        "{thing}",
        "sum",
        True,
        "scope-a",
    )
    assert record.resource["k"] == "v"
    assert record.require_point({"colour": "red"}).attributes == {
        "colour": "red",
        "n": 2,
        "ok": True,
    }
    assert record.require_point({"colour": "red"}).value == 3
    assert receiver.requests["/v1/metrics"] >= 1


def test_unknown_paths_and_json_are_refused(receiver: OtlpReceiver) -> None:
    assert httpx.post(f"{receiver.endpoint}/v1/logs", content=b"").status_code == 404
    json_post = httpx.post(
        f"{receiver.endpoint}/v1/metrics", json={}, headers={"Content-Type": "application/json"}
    )
    assert json_post.status_code == 415
    receiver.clear()
    assert receiver.metrics() == [] and receiver.spans() == []


def test_a_required_point_that_is_missing_names_the_metric_and_its_points() -> None:
    record = MetricRecord(
        name="demo.count",
        unit="{thing}",
        description="",
        kind="sum",
        monotonic=True,
        points=(DataPoint({"colour": "red"}, value=3), DataPoint({"colour": "blue"}, value=1)),
        resource={},
        scope="scope-a",
    )
    assert record.require_point({"colour": "blue"}).value == 1
    with pytest.raises(AssertionError) as missing:
        record.require_point({"colour": "green"})
    assert str(missing.value) == (
        "demo.count has no data point with {'colour': 'green'}; "
        "it has [{'colour': 'red'}, {'colour': 'blue'}]"
    )
