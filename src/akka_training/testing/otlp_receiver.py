"""A loopback OTLP/HTTP receiver for tests: what a real collector would receive, decoded.

Start it, point a service or a job at `endpoint` as their collector endpoint, and wait for what
they publish::

    with OtlpReceiver() as receiver:
        telemetry = JobTelemetry(attrs, receiver.endpoint, tmp_path)
        ...
        record = receiver.wait_for_metric("akka.optimize.training.rl.step.count")
        assert record.resource["akka.optimize.training.run.id"] == "r1"

It accepts protobuf (the encoding the OpenTelemetry Python exporters send) at ``/v1/metrics``
and ``/v1/traces``, gzip or not, on 127.0.0.1 and a free port, answering from a thread per
request. Everything received is kept in arrival order; metrics are cumulative, so the latest
record of a name holds its current totals.
"""

from __future__ import annotations

import gzip
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, TypeVar

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.metrics.v1.metrics_pb2 import Metric

from akka_training.testing.waiting import until

T = TypeVar("T")


@dataclass(frozen=True)
class DataPoint:
    attributes: dict[str, Any]
    # A gauge's or a sum's value.
    value: float | None = None
    # A histogram's count, sum, per-bucket counts and upper bounds.
    count: int | None = None
    sum: float | None = None
    bucket_counts: tuple[int, ...] = ()
    explicit_bounds: tuple[float, ...] = ()
    time_unix_nano: int = 0


@dataclass(frozen=True)
class MetricRecord:
    name: str
    unit: str
    description: str
    # gauge | sum | histogram | exponential_histogram | summary
    kind: str
    # For a sum: whether it is monotonic (a counter); None otherwise.
    monotonic: bool | None
    points: tuple[DataPoint, ...]
    resource: dict[str, Any]
    scope: str

    def point(self, attributes: Mapping[str, Any] | None = None) -> DataPoint | None:
        """The first data point whose attributes include all of `attributes`."""
        wanted = dict(attributes or {})
        for p in self.points:
            if all(p.attributes.get(k) == v for k, v in wanted.items()):
                return p
        return None

    def require_point(self, attributes: Mapping[str, Any] | None = None) -> DataPoint:
        """The first data point whose attributes include all of `attributes`; AssertionError
        naming the metric and the points it has when none does."""
        found = self.point(attributes)
        if found is None:
            held = [p.attributes for p in self.points]
            raise AssertionError(
                f"{self.name} has no data point with {dict(attributes or {})}; it has {held}"
            )
        return found


@dataclass(frozen=True)
class SpanRecord:
    name: str
    trace_id: str  # 32 hex digits
    span_id: str  # 16 hex digits
    parent_span_id: str | None
    attributes: dict[str, Any]
    resource: dict[str, Any]
    start_unix_nano: int
    end_unix_nano: int
    status_code: int


class OtlpReceiver:
    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self._host = host
        self._lock = threading.Lock()
        self._metrics: list[MetricRecord] = []
        self._spans: list[SpanRecord] = []
        self.requests: dict[str, int] = {}
        self._server = ThreadingHTTPServer((host, port), _handler(self))
        self._server.daemon_threads = True
        # A short poll interval lets close() return at once.
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="otlp-receiver",
            daemon=True,
        )
        self._thread.start()

    @property
    def endpoint(self) -> str:
        """The base URL to configure as a collector endpoint."""
        return f"http://{self._host}:{self._server.server_port}"

    def metrics(self, name: str | None = None) -> list[MetricRecord]:
        with self._lock:
            return [m for m in self._metrics if name is None or m.name == name]

    def spans(self, name: str | None = None) -> list[SpanRecord]:
        with self._lock:
            return [s for s in self._spans if name is None or s.name == name]

    def latest(self, name: str) -> MetricRecord | None:
        found = self.metrics(name)
        return found[-1] if found else None

    def wait_for(self, predicate: Callable[[OtlpReceiver], T | None], timeout: float = 10.0) -> T:
        """Poll `predicate(self)` until it returns something truthy, and return that;
        AssertionError (naming what arrived) after `timeout` seconds."""
        found = until(
            lambda: predicate(self),
            what="the receiver to get a match",
            timeout=timeout,
            interval=0.02,
            detail=lambda: (
                f"received metrics {sorted({m.name for m in self.metrics()})}, "
                f"spans {sorted({s.name for s in self.spans()})}"
            ),
        )
        assert found is not None  # until returns only a truthy answer
        return found

    def wait_for_metric(
        self,
        name: str,
        predicate: Callable[[MetricRecord], bool] | None = None,
        timeout: float = 10.0,
    ) -> MetricRecord:
        """The latest record of `name` that satisfies `predicate`."""

        def find(receiver: OtlpReceiver) -> MetricRecord | None:
            for record in reversed(receiver.metrics(name)):
                if predicate is None or predicate(record):
                    return record
            return None

        return self.wait_for(find, timeout)

    def wait_for_span(
        self,
        name: str,
        predicate: Callable[[SpanRecord], bool] | None = None,
        timeout: float = 10.0,
    ) -> SpanRecord:
        def find(receiver: OtlpReceiver) -> SpanRecord | None:
            for record in receiver.spans(name):
                if predicate is None or predicate(record):
                    return record
            return None

        return self.wait_for(find, timeout)

    def clear(self) -> None:
        with self._lock:
            self._metrics.clear()
            self._spans.clear()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> OtlpReceiver:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    # --- decoding ------------------------------------------------------------------------------

    def _receive(self, path: str, body: bytes) -> bytes | None:
        with self._lock:
            self.requests[path] = self.requests.get(path, 0) + 1
        if path == "/v1/metrics":
            metrics_request = ExportMetricsServiceRequest.FromString(body)
            records = list(_metric_records(metrics_request))
            with self._lock:
                self._metrics.extend(records)
            answer: bytes = ExportMetricsServiceResponse().SerializeToString()
            return answer
        if path == "/v1/traces":
            trace_request = ExportTraceServiceRequest.FromString(body)
            spans = list(_span_records(trace_request))
            with self._lock:
                self._spans.extend(spans)
            answer = ExportTraceServiceResponse().SerializeToString()
            return answer
        return None


def _handler(receiver: OtlpReceiver) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length)
            if self.headers.get("Content-Encoding", "").lower() == "gzip":
                body = gzip.decompress(body)
            if "json" in self.headers.get("Content-Type", ""):
                self._answer(415, b"this receiver decodes protobuf only", "text/plain")
                return
            answer = receiver._receive(self.path, body)
            if answer is None:
                self._answer(404, b"not an OTLP path", "text/plain")
                return
            self._answer(200, answer, "application/x-protobuf")

        def _answer(self, status: int, body: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            # Requests are the test's business, not its output.
            return

    return Handler


def _metric_records(request: ExportMetricsServiceRequest) -> list[MetricRecord]:
    records: list[MetricRecord] = []
    for rm in request.resource_metrics:
        resource = _attributes(rm.resource.attributes)
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                kind = metric.WhichOneof("data") or ""
                monotonic = metric.sum.is_monotonic if kind == "sum" else None
                records.append(
                    MetricRecord(
                        name=metric.name,
                        unit=metric.unit,
                        description=metric.description,
                        kind=kind,
                        monotonic=monotonic,
                        points=tuple(_points(metric, kind)),
                        resource=resource,
                        scope=sm.scope.name,
                    )
                )
    return records


def _points(metric: Metric, kind: str) -> list[DataPoint]:
    if kind in ("gauge", "sum"):
        number_points = metric.gauge.data_points if kind == "gauge" else metric.sum.data_points
        return [
            DataPoint(
                attributes=_attributes(p.attributes),
                value=p.as_double if p.WhichOneof("value") == "as_double" else float(p.as_int),
                time_unix_nano=p.time_unix_nano,
            )
            for p in number_points
        ]
    if kind == "histogram":
        return [
            DataPoint(
                attributes=_attributes(p.attributes),
                count=p.count,
                sum=p.sum,
                bucket_counts=tuple(p.bucket_counts),
                explicit_bounds=tuple(p.explicit_bounds),
                time_unix_nano=p.time_unix_nano,
            )
            for p in metric.histogram.data_points
        ]
    return []


def _span_records(request: ExportTraceServiceRequest) -> list[SpanRecord]:
    records: list[SpanRecord] = []
    for rs in request.resource_spans:
        resource = _attributes(rs.resource.attributes)
        for ss in rs.scope_spans:
            for s in ss.spans:
                records.append(
                    SpanRecord(
                        name=s.name,
                        trace_id=s.trace_id.hex(),
                        span_id=s.span_id.hex(),
                        parent_span_id=s.parent_span_id.hex() or None,
                        attributes=_attributes(s.attributes),
                        resource=resource,
                        start_unix_nano=s.start_time_unix_nano,
                        end_unix_nano=s.end_time_unix_nano,
                        status_code=s.status.code,
                    )
                )
    return records


def _attributes(pairs: Any) -> dict[str, Any]:
    return {kv.key: _value(kv.value) for kv in pairs if isinstance(kv, KeyValue)}


def _value(value: AnyValue) -> Any:
    which = value.WhichOneof("value")
    if which == "array_value":
        return [_value(v) for v in value.array_value.values]
    if which == "kvlist_value":
        return _attributes(value.kvlist_value.values)
    if which is None:
        return None
    return getattr(value, which)
