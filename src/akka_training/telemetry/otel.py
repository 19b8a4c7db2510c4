"""OpenTelemetry plumbing shared by the service and the jobs: resources, OTLP endpoints, meter
providers and instruments built from the catalog.

Providers here are never installed as OpenTelemetry's global ones: each `ServiceTelemetry`,
`JobTelemetry` and `Tracing` owns its provider, so a process (or a test) can hold several and
shut each down on its own.

A collector endpoint is the base URL of an OTLP/HTTP receiver (``http://collector:4318``); the
signal paths ``/v1/metrics`` and ``/v1/traces`` are appended here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.metrics import Meter
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricReader, PeriodicExportingMetricReader
from opentelemetry.sdk.resources import SERVICE_NAME, Resource

from akka_training import __version__
from akka_training.core.resolved import JobSpec
from akka_training.telemetry import catalog as c

SERVICE = "akka-training"
JOB_SERVICE = "akka-training-job"
METER_NAME = "akka_training"

ResourceValue = str | int


def otlp_url(endpoint: str, signal: Literal["metrics", "traces"]) -> str:
    """The full OTLP/HTTP URL of a signal at a collector endpoint."""
    base = endpoint.rstrip("/")
    path = f"/v1/{signal}"
    return base if base.endswith(path) else base + path


def job_resource(
    run_id: str,
    attempt: int,
    project: str,
    *,
    method: str | None = None,
    engine: str | None = None,
    pipeline: str | None = None,
    stage: str | None = None,
    pod: str | None = None,
    node: str | None = None,
    namespace: str | None = None,
) -> dict[str, ResourceValue]:
    """The resource attributes of a job process (absent values are left out). The pod and
    node appear twice: under the names the reference documents (``…pod``, ``…node``) and
    under OpenTelemetry's Kubernetes conventions (``k8s.pod.name``, ``k8s.node.name``), with
    ``k8s.namespace.name``."""
    values: dict[str, ResourceValue | None] = {
        c.RUN_ID: run_id,
        c.RUN_ATTEMPT: attempt,
        c.PROJECT: project,
        c.RUN_METHOD: method,
        c.RUN_ENGINE: engine,
        c.PIPELINE_ID: pipeline,
        c.PIPELINE_STAGE: stage,
    }
    return placed(values, pod, node, namespace)


def placed(
    values: Mapping[str, ResourceValue | None],
    pod: str | None,
    node: str | None,
    namespace: str | None,
) -> dict[str, ResourceValue]:
    """`values` with where the process runs (the pod and node under both names, as
    `job_resource` says), absent values left out."""
    where = {
        c.POD: pod,
        c.NODE: node,
        c.K8S_POD: pod,
        c.K8S_NODE: node,
        c.K8S_NAMESPACE: namespace,
    }
    return {k: v for k, v in {**values, **where}.items() if v is not None}


def job_resource_from_spec(
    spec: JobSpec,
    *,
    pod: str | None = None,
    node: str | None = None,
    namespace: str | None = None,
) -> dict[str, ResourceValue]:
    """`job_resource` filled from the job's spec and its placement."""
    return job_resource(
        spec.run_id,
        spec.attempt,
        spec.project,
        method=spec.settings.method,
        engine=spec.settings.engine,
        pipeline=spec.pipeline,
        stage=spec.stage,
        pod=pod,
        node=node,
        namespace=namespace,
    )


def check_job_resource(attrs: Mapping[str, ResourceValue]) -> None:
    """Refuse a job resource without run, attempt and project, or with a name the catalog
    does not list as a job resource attribute."""
    check_resource(attrs, "job", c.JOB_REQUIRED_RESOURCE_ATTRIBUTES, c.JOB_RESOURCE_ATTRIBUTES)


def check_resource(
    attrs: Mapping[str, ResourceValue],
    what: str,
    required: Sequence[str],
    allowed: Sequence[str],
) -> None:
    """Refuse a resource that lacks a `required` name or holds one outside `allowed`."""
    missing = [k for k in required if k not in attrs]
    unknown = [k for k in attrs if k not in allowed]
    if missing or unknown:
        raise ValueError(
            f"{what} resource attributes: missing {missing or 'none'}, unknown "
            f"{unknown or 'none'}; allowed: {', '.join(allowed)}"
        )


def make_resource(service_name: str, attrs: Mapping[str, ResourceValue]) -> Resource:
    # Resource.create adds the SDK's attributes and honours OTEL_RESOURCE_ATTRIBUTES.
    return Resource.create(
        {SERVICE_NAME: service_name, "service.version": __version__, **dict(attrs)}
    )


def meter_provider(
    resource: Resource,
    collector_endpoint: str | None,
    readers: Sequence[MetricReader] = (),
    *,
    export_interval_s: float = 15.0,
    export_timeout_s: float = 10.0,
) -> MeterProvider:
    """A provider that exports over OTLP/HTTP when an endpoint is set, plus `readers`."""
    all_readers = list(readers)
    if collector_endpoint:
        exporter = OTLPMetricExporter(
            endpoint=otlp_url(collector_endpoint, "metrics"), timeout=export_timeout_s
        )
        all_readers.append(
            PeriodicExportingMetricReader(
                exporter,
                export_interval_millis=export_interval_s * 1000,
                export_timeout_millis=export_timeout_s * 1000,
            )
        )
    return MeterProvider(resource=resource, metric_readers=all_readers)


def create_instruments(meter: Meter, specs: Sequence[c.MetricSpec]) -> dict[str, Any]:
    """Synchronous instruments for `specs`, by metric name. Histograms get the catalog's
    boundaries as the SDK's bucket advice, so no view is needed."""
    instruments: dict[str, Any] = {}
    for spec in specs:
        common = {"name": spec.name, "unit": spec.unit, "description": spec.description}
        if spec.instrument is c.Instrument.COUNTER:
            instruments[spec.name] = meter.create_counter(**common)
        elif spec.instrument is c.Instrument.UP_DOWN:
            instruments[spec.name] = meter.create_up_down_counter(**common)
        elif spec.instrument is c.Instrument.GAUGE:
            instruments[spec.name] = meter.create_gauge(**common)
        else:
            instruments[spec.name] = meter.create_histogram(
                **common, explicit_bucket_boundaries_advisory=list(spec.boundaries)
            )
    return instruments
